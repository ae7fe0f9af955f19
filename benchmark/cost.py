"""Where a training round's time goes, and what the server half holds: the cost metrics of
FedMBridge (ICML 2024, section 5.2 and Figure 3), measured for every algorithm and task.

The engine splits each training round (client sampling to the end of ``aggregate``, the same
span as ``seconds_per_round``; evaluation lies outside it) into disjoint wall-clock stages:

* ``download_s``: building each sampled client's payload and recording it in the ledger, plus
  what the channel spends encoding it (Flower: numpy ``ArrayRecord``s). In process a client
  reads the server's tensors where they are, so nothing is copied or serialized;
* ``client_s``: the clients' side of the exchange. In process, the clients' ``client_update``
  hooks, which run one after another, summed (the harness's own upload audit is left out).
  Under Flower, the server's wait for the replies: client compute *and* message transfer,
  which the server's clock cannot tell apart;
* ``upload_s``: decoding the replies (Flower) and taking each upload in: finiteness check,
  ledger record, audit findings;
* ``server_s``: the ``aggregate`` hook, the paper's "global knowledge sharing" (for FedMBridge it
  includes generating every client's theta_i, which Algorithm 1 books under its download);
* ``other_s``: the rest of the round (sampling, the in-process upload audit), so the five
  parts of a round add up to its seconds.

``cot_s`` is the paper's COT of a round: "the average time spent by each round of
server-client communication, including downloading, uploading, and global knowledge sharing
stages, whose weights in the metric are 0.46, 0.46, and 0.08" (section 5.2), applied here to
the measured seconds (:data:`PAPER_COT`). The paper gives no bandwidth or latency, so no
transfer time is modelled from bytes; the ledger's bytes per round are recorded beside the
seconds (``bytes_down``/``bytes_up``) for anyone who wants to apply a link model.

On CUDA every stage boundary synchronizes the device, so a kernel is charged to the stage
that launched it; on the CPU nothing is added to the round.

``server_memory_mb`` is the peak, over the run, of the bytes of the tensors the server half
holds after a server hook: its algorithm instance's attributes (models, optimizer state,
gradients, per-client tables) and the broadcast it keeps for the next round, each storage
counted once (:func:`held_tensor_bytes`).
"""

from __future__ import annotations

import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import numpy as np
import torch

#: the measured stages of a round, in the order a round runs them
STAGES = ("download_s", "client_s", "upload_s", "server_s")
#: the remainder of a round no stage claims
OTHER = "other_s"
MIB = 2**20


@dataclass(frozen=True)
class CotWeights:
    """The weights of the paper's COT (FedMBridge section 5.2): download, upload, knowledge sharing."""

    download_s: float
    upload_s: float
    server_s: float

    def of(self, parts: dict[str, float]) -> float:
        """The weighted seconds of one round."""
        return self.download_s * parts["download_s"] + self.upload_s * parts["upload_s"] + \
            self.server_s * parts["server_s"]


#: FedMBridge's COT weights, quoted in the module docstring
PAPER_COT = CotWeights(download_s=0.46, upload_s=0.46, server_s=0.08)


@dataclass(frozen=True)
class ExchangeTiming:
    """What a channel measured of its last ``train`` exchange, for the engine to split its wall
    time: seconds encoding the downloads, decoding the uploads, and on the clients' side
    (None: the rest of the exchange, for a channel that cannot tell)."""

    encode_s: float = 0.0
    decode_s: float = 0.0
    client_s: float | None = None


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels (CUDA), so a clock read after it is honest."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Stopwatch:
    """Seconds of one span of work on ``device`` (synchronized on CUDA at both ends)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds = 0.0

    @contextmanager
    def span(self) -> Iterator["Stopwatch"]:
        synchronize(self.device)
        start = time.perf_counter()
        try:
            yield self
        finally:
            synchronize(self.device)
            self.seconds += time.perf_counter() - start


class RoundTimer:
    """The stage seconds of one round (:data:`STAGES`), each a disjoint span of its wall time."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.parts = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        watch = Stopwatch(self.device)
        with watch.span():
            yield
        self.parts[name] += watch.seconds

    def split_exchange(self, timing: ExchangeTiming) -> None:
        """Charge the channel's encoding to the download and its decoding to the upload, out of
        the exchange's wall time (booked as ``client_s``); a channel that measured its clients'
        own seconds leaves the rest of the exchange to ``other_s``."""
        wall = self.parts["client_s"]
        encode = min(timing.encode_s, wall)
        decode = min(timing.decode_s, wall - encode)
        self.parts["download_s"] += encode
        self.parts["upload_s"] += decode
        rest = wall - encode - decode
        self.parts["client_s"] = rest if timing.client_s is None else min(timing.client_s, rest)


@dataclass
class CostLog:
    """Per-round stage seconds and bytes of one run, and the server's peak held memory. It lives
    in the checkpointed simulation state, so a resumed run keeps the rounds timed before."""

    rounds: list[int] = field(default_factory=list)
    parts: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in (*STAGES, OTHER)})
    bytes_down: list[int] = field(default_factory=list)
    bytes_up: list[int] = field(default_factory=list)
    server_peak_bytes: int = 0

    def add_round(self, rnd: int, timer: RoundTimer, seconds: float, bytes_down: int, bytes_up: int) -> None:
        """One finished round: its stage seconds, the remainder of its ``seconds``, its bytes."""
        self.rounds.append(rnd)
        for name in STAGES:
            self.parts[name].append(timer.parts[name])
        self.parts[OTHER].append(max(0.0, seconds - sum(timer.parts.values())))
        self.bytes_down.append(bytes_down)
        self.bytes_up.append(bytes_up)

    def note_server(self, *held: Any) -> None:
        """Raise the peak to what the server holds now (its algorithm, its broadcast)."""
        self.server_peak_bytes = max(self.server_peak_bytes, held_tensor_bytes(*held))

    @property
    def server_memory_mb(self) -> float:
        return self.server_peak_bytes / MIB

    def summary(self, channel: str) -> dict[str, Any]:
        """The record's ``cost``: per-round medians of every part, of the paper-weighted COT and
        of the ledger's bytes, the per-round values behind them, and how they were obtained."""
        cot = [PAPER_COT.of({k: self.parts[k][i] for k in STAGES}) for i in range(len(self.rounds))]
        out: dict[str, Any] = {k: _median(v) for k, v in self.parts.items()}
        out.update({
            "cot_s": _median(cot),
            "bytes_down": _median(self.bytes_down),
            "bytes_up": _median(self.bytes_up),
            "rounds": {"round": list(self.rounds), **{k: list(v) for k, v in self.parts.items()}, "cot_s": cot},
            "cot_weights": {"download_s": PAPER_COT.download_s, "upload_s": PAPER_COT.upload_s,
                            "server_s": PAPER_COT.server_s},
            "channel": channel,
        })
        return out


def _median(values: list[float] | list[int]) -> float | None:
    return float(median(values)) if values else None


# objects that hold no tensors of their own, or whose insides are not the server's state
_OPAQUE = (str, bytes, bytearray, int, float, complex, bool, type(None), type, types.ModuleType,
           types.FunctionType, types.BuiltinFunctionType, types.MethodType, torch.device, torch.dtype,
           torch.Generator)


def held_tensor_bytes(*roots: Any) -> int:
    """Bytes of every distinct tensor storage (and numpy array) reachable from ``roots``
    through attributes, containers and parameter gradients: the memory those objects keep
    alive, each storage counted once however many names point at it."""
    seen: set[int] = set()
    storages: set[tuple[str, int]] = set()
    arrays: set[int] = set()
    total = 0
    stack: list[Any] = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _OPAQUE):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            total += _tensor_bytes(obj, storages, stack)
        elif isinstance(obj, np.ndarray):
            root = obj
            while isinstance(root.base, np.ndarray):
                root = root.base
            if id(root) not in arrays:
                arrays.add(id(root))
                total += root.nbytes
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(getattr(obj, "__dict__", None), dict):
            stack.extend(vars(obj).values())
    return total


def _tensor_bytes(t: torch.Tensor, storages: set[tuple[str, int]], stack: list[Any]) -> int:
    """A tensor's storage bytes when not counted yet; its gradient goes on the walk."""
    if t.is_leaf and t.grad is not None:
        stack.append(t.grad)
    if t.is_sparse:  # COO: its values and indices
        stack.extend([t._values(), t._indices()])
        return 0
    if t.layout != torch.strided:  # compressed layouts: their values (a lower bound)
        stack.append(t.values())
        return 0
    storage = t.untyped_storage()
    key = (str(t.device), storage.data_ptr())
    if key in storages:
        return 0
    storages.add(key)
    return storage.nbytes()


__all__ = ["CostLog", "CotWeights", "ExchangeTiming", "OTHER", "PAPER_COT", "RoundTimer", "STAGES", "Stopwatch",
           "held_tensor_bytes", "synchronize"]
