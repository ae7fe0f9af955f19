"""The message ledger: every tensor that crosses the client/server boundary.

The engine passes every payload through ``Ledger.record``; nothing else moves between
clients and server. The ledger counts names, shapes and bytes per round and direction, and
``audit_upload`` checks that an upload holds none of the client's raw data: feature rows,
labels or edges (by exact content match), and only the keys the algorithm declared.

A method whose protocol discloses raw data on purpose (FedDistill*'s public set, gathered
from a few clients) declares those upload names with ``disclosed(pattern)``: what the audit
finds under them is recorded as a disclosure (``summary()["disclosures"]``, so every record
says so) instead of failing the cell.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import Tensor

from benchmark.federation import ClientData

Payload = dict[str, Tensor]
#: the phases of an algorithm's own traffic; "eval" holds what a remote engine (Flower) must
#: send to score the clients, which an in-process run reads for free: kept apart so bytes
#: per round mean the same on every backend
ALGORITHM_PHASES = ("setup", "train")

#: prefix (a regex comment, so the pattern still matches as written) of declared disclosures
DISCLOSED = "(?#disclosed)"


#: suffix of a finding under a declared disclosure: recorded, not a violation
DISCLOSURE_MARK = " (declared disclosure)"


def disclosed(pattern: str) -> str:
    """An ``upload_keys`` entry whose payloads may carry raw client data, flagged in the record."""
    return DISCLOSED + pattern


def payload_bytes(payload: Payload) -> int:
    """Bytes on the wire for a payload (raw tensor storage)."""
    return int(sum(t.numel() * t.element_size() for t in payload.values()))


@dataclass
class LedgerEntry:
    round: int
    phase: str          # "setup" (one-time exchange), "train", or "eval" (a remote engine's scoring)
    direction: str      # "up" (client -> server) or "down" (server -> client)
    cid: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def _row_hashes(x: Tensor) -> set[bytes]:
    """Hashes of the non-constant rows of a 2-D float tensor (zeros/fill rows excluded)."""
    x = x.detach().to("cpu", torch.float32).contiguous()
    # max > min rather than std > 0: exact for constant rows, and no warning on an empty tensor
    keep = x.amax(dim=1) > x.amin(dim=1) if x.shape[1] > 1 else x[:, 0] != 0
    return {hashlib.blake2b(r.numpy().tobytes(), digest_size=16).digest() for r in x[keep]}


class RawDataFingerprint:
    """What one client must never upload: its feature rows, label vector and edge list."""

    def __init__(self, client: ClientData) -> None:
        self.rows: dict[int, set[bytes]] = defaultdict(set)
        for j, (m, x) in enumerate(client.features.items()):
            self.rows[x.shape[1]] |= _row_hashes(x[client.available[:, j]])
        self.labels = [] if client.y is None else [client.y.cpu(), client.y[client.train_mask].cpu()]
        gid = client.global_ids.cpu()
        self.edges = [client.edge_index.cpu(), gid[client.edge_index.cpu()]] if client.edge_index.numel() else []

    def leaks(self, name: str, t: Tensor) -> str | None:
        """A reason if tensor ``t`` holds raw data, else None."""
        t = t.detach().cpu()
        if t.dtype.is_floating_point and t.dim() >= 1 and t.shape[-1] in self.rows and t.numel() > 1:
            rows = t.reshape(-1, t.shape[-1])
            if rows.shape[1] > 1 and _row_hashes(rows) & self.rows[t.shape[-1]]:
                return f"payload '{name}' contains raw feature rows"
        for y in self.labels:
            if t.numel() == y.numel() and t.numel() > 1 and torch.equal(t.flatten().to(y.dtype), y):
                return f"payload '{name}' equals the client's labels"
        for e in self.edges:
            if t.shape == e.shape and torch.equal(t.to(e.dtype), e):
                return f"payload '{name}' equals the client's edge list"
        return None


def audit_findings(rnd: int, cid: int, payload: Payload, raw: RawDataFingerprint,
                   declared: tuple[str, ...] | None) -> list[str]:
    """What is wrong with one upload: undeclared names, raw rows, labels or edges.

    A pure function of the upload and the client's own data, so it runs where the data is
    (the engine in process, the client itself under Flower) and reads the same either way.
    """
    found: list[str] = []
    for name, t in payload.items():
        match = None if declared is None else next((p for p in declared if re.fullmatch(p, name)), None)
        if declared is not None and match is None:
            found.append(f"round {rnd}, client {cid}: undeclared payload '{name}'")
        reason = raw.leaks(name, t)
        if reason and match is not None and match.startswith(DISCLOSED):
            found.append(f"round {rnd}, client {cid}: {reason}{DISCLOSURE_MARK}")
        elif reason:
            found.append(f"round {rnd}, client {cid}: {reason}")
    return found


@dataclass
class Ledger:
    """Append-only log of payloads, with per-round byte totals and an upload audit."""

    entries: list[LedgerEntry] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def record(self, rnd: int, direction: str, cid: int, payload: Payload, phase: str = "train") -> None:
        for name, t in payload.items():
            if not isinstance(t, Tensor):
                raise TypeError(f"payload '{name}' is {type(t).__name__}; payloads are flat dicts of tensors")
            self.entries.append(
                LedgerEntry(rnd, phase, direction, cid, name, tuple(t.shape), str(t.dtype).replace("torch.", ""),
                            t.numel() * t.element_size())
            )

    def audit_upload(self, rnd: int, cid: int, payload: Payload, raw: RawDataFingerprint,
                     declared: tuple[str, ...] | None) -> list[str]:
        """Check one upload; violations are kept and returned."""
        return self.add_findings(audit_findings(rnd, cid, payload, raw, declared))

    def add_findings(self, findings: list[str]) -> list[str]:
        """File an upload's audit findings: declared disclosures apart, the rest as violations
        (returned)."""
        found = [f for f in findings if not f.endswith(DISCLOSURE_MARK)]
        self.disclosed_uploads().extend(f for f in findings if f.endswith(DISCLOSURE_MARK))
        self.violations.extend(found)
        return found

    def disclosed_uploads(self) -> list[str]:
        """Declared disclosures found so far (created on first use, so that a ledger read
        from an older checkpoint has the list too)."""
        return self.__dict__.setdefault("disclosures", [])

    def bytes_by_round(self) -> dict[int, dict[str, int]]:
        out: dict[int, dict[str, int]] = defaultdict(lambda: {"up": 0, "down": 0})
        for e in self.entries:
            out[e.round][e.direction] += e.nbytes
        return dict(out)

    def total_bytes(self, direction: str | None = None, phase: str | None = None) -> int:
        return sum(e.nbytes for e in self.entries
                   if (direction is None or e.direction == direction) and (phase is None or e.phase == phase))

    def names(self, direction: str = "up") -> set[str]:
        return {e.name for e in self.entries if e.direction == direction}

    def summary(self) -> dict[str, object]:
        return {
            "bytes_up": sum(self.total_bytes("up", p) for p in ALGORITHM_PHASES),
            "bytes_down": sum(self.total_bytes("down", p) for p in ALGORITHM_PHASES),
            "eval_bytes_down": self.total_bytes("down", "eval"),
            "setup_bytes_up": self.total_bytes("up", "setup"),
            "upload_names": sorted(self.names("up")),
            "violations": list(self.violations),
            "disclosures": list(self.disclosed_uploads()),
        }
