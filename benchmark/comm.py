"""The message ledger: every tensor that crosses the client/server boundary.

The engine passes every payload through ``Ledger.record``; nothing else moves between
clients and server. The ledger counts names, shapes and bytes per round and direction, and
``audit_upload`` checks that an upload holds none of the client's raw data: feature rows
(bit for bit, or up to transposition, reshaping, rescaling and a small perturbation: an
uploaded row within |cosine| 0.9999 of a raw row, at a norm within 4x of its own; see
"raw-row matching" below), labels or edges (by exact content match), and only the keys the
algorithm declared.

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


# --------------------------------------------------------------------------- raw-row matching
#
# An upload holds a raw feature row when one of its rows, read at the width d of one of the
# client's modalities, is that row bit for bit (any width), or points the same way up to
# |cosine| > COSINE_MATCH (widths of at least COSINE_MIN_WIDTH): so the raw matrix
# transposed, flattened, cast to float16, rescaled, negated or slightly perturbed is caught,
# not only a byte-identical copy. A tensor is read as rows of width d in the orientations
# that can hold one: its elements in order cut into rows of d (its own rows when its last
# axis is d, else "flattened"), its transpose when it is 2-D with a first axis of d (or 1-D:
# a transposed matrix flattened), and for 3+-D tensors each other axis of size d moved last.
#
# Chance matches. A constant row (all zeros, a fill value, all ones) is never compared:
# every constant row points the same way. For the cosine test a raw row must also be
# informative: at least ~3 degrees away from the constant direction (else a near-constant
# parameter such as a LayerNorm scale could point its way), and with its energy spread over
# at least COSINE_MIN_SPREAD_COORDS coordinates (participation ratio; a near one-hot row
# would match any peaked vector, a confident softmax say); other rows are matched bit for
# bit only. At width 8 a random direction falls within the 0.9999 cap (0.81 degrees) of a
# given row, or of its negative, with probability 3e-14 (1e-28 at width 16). What does match is
# a raw row itself, and any statistic that equals one: the mean of a group of ONE row is
# that row, which the exact audit has always failed as a leak, and so does this one; a mean
# over two or more distinct rows is not flagged.
#
# Model updates. A first-layer weight update of a unit that one training sample dominated is
# that sample's row times a learning-rate-sized factor: HyperPFL's uploaded deltas reach
# |cosine| 0.99984 with a raw row on fedmbridge_table2 (small), at 0.001-0.005 of its norm,
# and a unit only one sample activates gives exactly 1. That is how gradient descent reads
# its data, not a copy of it, so a cosine match counts only when the uploaded row's norm is
# within COSINE_SCALE_RANGE of the raw row's: a row sent at (about) its own scale, rescaled,
# negated, cast or perturbed, is flagged; a gradient step is not. (A bit-for-bit copy is
# flagged at any width and any scale it has, which is its own.)
#
# Work. Rows wider than COSINE_SKETCH are first compared through a fixed Gaussian sketch of
# that many dimensions (a true match keeps a sketched |cosine| near 1: missing it takes a
# norm distortion of ~14x, odds far below 1e-30), and only rows with a sketched |cosine|
# above COSINE_SKETCH_MATCH are compared in full. Similarities are computed in blocks of
# COSINE_BLOCK; when an orientation's uploaded rows x informative raw rows exceed
# COSINE_MAX_PRODUCTS, both sides are subsampled at evenly spaced positions (the full raw
# matrix uploaded in its own order is still compared row by row). The bit-for-bit match
# always sees every row, so the audit never sees less than the exact audit did.

#: |cosine| above which an uploaded row is a raw feature row (rescaled, negated or perturbed) ...
COSINE_MATCH = 0.9999
#: ... when its norm is within this factor of the raw row's (see "Model updates" above)
COSINE_SCALE_RANGE = 4.0
#: narrowest modality compared by cosine (a random direction falls in the cap of one of 1,000
#: raw rows or their negatives: 10% of the time at d = 3, 0.1% at d = 4, 3e-11 at d = 8)
COSINE_MIN_WIDTH = 8
#: a raw row compared by cosine: |row - its mean| >= this x |row| (~3 degrees off constant) ...
COSINE_MIN_SPREAD = 0.05
#: ... and (sum x^2)^2 / sum x^4 >= this (the number of coordinates its energy is spread over)
COSINE_MIN_SPREAD_COORDS = 4.0
#: dimensions of the sketch that pre-screens wider rows, and the sketched |cosine| screened in
COSINE_SKETCH = 32
COSINE_SKETCH_MATCH = 0.98
#: most uploaded-row x raw-row similarities per tensor, width and orientation before sampling
COSINE_MAX_PRODUCTS = 1 << 24
#: similarities held in memory at once
COSINE_BLOCK = 1 << 21
_SEED = 0x5EED_FEED
#: the whole-payload screen (``RawDataFingerprint.rows_clean``) runs on accelerators only,
#: where each host sync of the per-tensor path idles the device; tests set it on the CPU
SCREEN_ON_CPU = False


def _nontrivial(rows: Tensor) -> Tensor:
    """Rows that can be compared: finite and not constant (so not all zeros or a fill value)."""
    lo, hi = rows.aminmax(dim=1)  # a NaN makes both comparisons false
    return (hi > lo) & torch.isfinite(lo) & torch.isfinite(hi)


def _hash_rows(rows: Tensor) -> Tensor:
    """An int64 hash of each float32 row's exact bits (+0.0 and -0.0 alike), computed with
    wrapping integer arithmetic, so it is the same in any order and in any batch."""
    d = rows.shape[1]
    g = torch.Generator().manual_seed(_SEED + d)
    mult = (torch.randint(-(2**31), 2**31, (d,), generator=g, dtype=torch.int64).to(torch.int32) | 1).to(rows.device)
    return ((rows + 0.0).contiguous().view(torch.int32) * mult).sum(dim=1, dtype=torch.int64)


def _indices(n: int, k: int, device: torch.device) -> Tensor:
    """``k`` evenly spaced positions in ``range(n)`` (all of them when k >= n)."""
    return (torch.arange(n) if k >= n else torch.linspace(0, n - 1, k).round().long()).to(device)


def _unit(x: Tensor) -> Tensor:
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-30)


class _RawRows:
    """The raw rows of one width, held once: every non-constant row (informative ones first)
    with its exact hash for the bit-for-bit match, and for the informative rows their inverse
    norms and sketch for the cosine test.

    Built on the CPU; ``on(device)`` is the same index on the device an upload lives on, made
    once per device, so an accelerator's uploads are audited where they are (no copy to the
    host, and the similarity blocks run on the accelerator) instead of waiting on the CPU.
    """

    _TENSORS = ("rows", "inv_norm", "order", "keys", "sketch", "screen")

    def __init__(self, rows: Tensor) -> None:
        rows = rows.detach().to("cpu", torch.float32)
        rows = rows[_nontrivial(rows)]
        self.width = d = rows.shape[1]
        informative = torch.zeros(rows.shape[0], dtype=torch.bool)
        if d >= COSINE_MIN_WIDTH and rows.shape[0]:
            norm2 = torch.einsum("ij,ij->i", rows, rows)
            spread2 = (norm2 - rows.sum(dim=1).pow(2) / d).clamp_min(0)  # |row - its mean|^2
            sq = rows * rows
            coords = norm2.pow(2) / torch.einsum("ij,ij->i", sq, sq).clamp_min(1e-30)
            del sq
            informative = (norm2 > 0) & (spread2 >= COSINE_MIN_SPREAD**2 * norm2) & (coords >= COSINE_MIN_SPREAD_COORDS)
        # informative rows first (+ 0.0: one zero, as -0.0 == 0.0 for the match)
        self.rows = (torch.cat([rows[informative], rows[~informative]]) if not informative.all() else rows) + 0.0
        self.n_informative = n = int(informative.sum())
        self.inv_norm = 1.0 / self.rows[:n].norm(dim=1)
        keys = _hash_rows(self.rows)
        self.order = keys.argsort()
        self.keys = keys[self.order]
        self.sketch: Tensor | None = None
        if d > COSINE_SKETCH and n:
            g = torch.Generator().manual_seed(_SEED + 7 * d)
            self.sketch = torch.randn(d, COSINE_SKETCH, generator=g)
            self.screen = _unit(self.rows[:n] @ self.sketch)
        self._on: dict[torch.device, _RawRows] = {self.rows.device: self}

    def on(self, device: torch.device) -> "_RawRows":
        """This index with its tensors on ``device`` (made on first use, then kept)."""
        if device not in self._on:
            moved = object.__new__(_RawRows)
            moved.__dict__.update(self.__dict__)
            for k in self._TENSORS:
                v = getattr(self, k, None)
                if v is not None:
                    setattr(moved, k, v.to(device))
            moved._on = self._on
            self._on[device] = moved
        return self._on[device]

    def exact(self, rows: Tensor) -> bool:
        """Whether one of ``rows`` (float32, non-constant) is bit for bit a raw row."""
        if not self.keys.numel() or not rows.shape[0]:
            return False
        h = _hash_rows(rows)
        pos = torch.searchsorted(self.keys, h).clamp_max(self.keys.numel() - 1)
        hit = self.keys[pos] == h
        return bool(hit.any()) and bool((self.rows[self.order[pos[hit]]] == rows[hit] + 0.0).all(dim=1).any())

    def any_match(self, rows: Tensor) -> Tensor | None:
        """A 0-d bool tensor on ``rows``' device: whether any of ``rows`` (float32, any rows)
        would be found by ``exact`` or ``nearest``, computed without a host sync; None when
        ``nearest`` would subsample (too many products), which this cannot reproduce."""
        m, n = rows.shape[0], self.n_informative
        if m * n > COSINE_MAX_PRODUCTS:
            return None
        ok = _nontrivial(rows)
        rows = torch.where(ok.unsqueeze(1), rows, torch.zeros((), device=rows.device)) + 0.0
        found = torch.zeros((), dtype=torch.bool, device=rows.device)
        if self.keys.numel() and m:
            h = _hash_rows(rows)
            pos = torch.searchsorted(self.keys, h).clamp_max(self.keys.numel() - 1)
            same = (self.rows[self.order[pos]] == rows).all(dim=1)
            found = found | ((self.keys[pos] == h) & same & ok).any()
        if not n or not m:
            return found
        raw, inv_norm = self.rows[:n], self.inv_norm
        norm = rows.norm(dim=1)
        u = rows / norm.clamp_min(1e-30).unsqueeze(1)
        cand = ok
        if self.sketch is not None:
            cand = cand & ((_unit(u @ self.sketch) @ self.screen.T).abs_().amax(dim=1) > COSINE_SKETCH_MATCH)
        sim = (u @ raw.T).mul_(inv_norm).abs_()
        ratio = norm.unsqueeze(1) * inv_norm.unsqueeze(0)  # |uploaded row| / |raw row|
        hit = (sim > COSINE_MATCH) & (ratio >= 1 / COSINE_SCALE_RANGE) & (ratio <= COSINE_SCALE_RANGE)
        return found | (hit & cand.unsqueeze(1)).any()

    def nearest(self, rows: Tensor) -> tuple[float, int, int]:
        """(|cosine|, uploaded row, raw row) of the first pair found above COSINE_MATCH, else
        (0.0, -1, -1); subsampled when too large, as the comment above says."""
        m, n = rows.shape[0], self.n_informative
        if not n or not m:
            return 0.0, -1, -1
        raw, inv_norm, screen = self.rows[:n], self.inv_norm, self.screen if self.sketch is not None else None
        up_idx = raw_idx = None
        if m * n > COSINE_MAX_PRODUCTS:
            raw_idx = _indices(n, max(1024, COSINE_MAX_PRODUCTS // m), raw.device)
            up_idx = _indices(m, max(1, COSINE_MAX_PRODUCTS // raw_idx.numel()), rows.device)
            raw, inv_norm, rows = raw[raw_idx], inv_norm[raw_idx], rows[up_idx]
            screen = None if screen is None else screen[raw_idx]
        norm = rows.norm(dim=1)
        u = rows / norm.unsqueeze(1)
        step = max(1, COSINE_BLOCK // raw.shape[0])
        for start in range(0, u.shape[0], step):
            block = u[start : start + step]
            keep = torch.arange(block.shape[0], device=block.device)
            if screen is not None:  # pre-screen on the sketch, then compare the survivors in full
                keep = ((_unit(block @ self.sketch) @ screen.T).abs_().amax(dim=1) > COSINE_SKETCH_MATCH).nonzero()[:, 0]
                if not keep.numel():
                    continue
                block = block[keep]
            sim = (block @ raw.T).mul_(inv_norm).abs_()
            if float(sim.amax()) <= COSINE_MATCH:
                continue
            pairs = (sim > COSINE_MATCH).nonzero()
            i, j = start + keep[pairs[:, 0]], pairs[:, 1]
            ratio = norm[i] * inv_norm[j]  # |uploaded row| / |raw row|
            near = ((ratio >= 1 / COSINE_SCALE_RANGE) & (ratio <= COSINE_SCALE_RANGE)).nonzero()[:, 0]
            if near.numel():
                k = int(near[0])
                ii, jj = int(i[k]), int(j[k])
                return (float(sim[pairs[k, 0], jj]), ii if up_idx is None else int(up_idx[ii]),
                        jj if raw_idx is None else int(raw_idx[jj]))
        return 0.0, -1, -1


def _orientations(t: Tensor, d: int) -> list[tuple[str, Tensor]]:
    """The ways ``t`` can hold rows of width ``d`` (see the comment above), as 2-D tensors."""
    n = t.numel()
    if n % d:
        return []
    flat = t.reshape(-1)
    out = [("rows" if t.dim() >= 1 and t.shape[-1] == d else "flattened", flat.view(-1, d))]
    if (t.dim() == 2 and t.shape[0] == d) or (t.dim() == 1 and n > d):
        out.append(("transposed", flat.view(d, -1).T))
    for i in range(t.dim() - 1) if t.dim() >= 3 else ():
        if t.shape[i] == d:
            out.append((f"axis {i} as rows", t.movedim(i, -1).reshape(-1, d)))
    return out


class RawDataFingerprint:
    """What one client must never upload: its feature rows, label vector and edge list."""

    def __init__(self, client: ClientData) -> None:
        by_width: dict[int, list[Tensor]] = defaultdict(list)
        for j, (m, x) in enumerate(client.features.items()):
            if x.dim() == 2 and x.shape[1] > 1:  # a one-column modality: no row to recognise
                by_width[x.shape[1]].append(x[client.available[:, j]])
        self.rows: dict[int, _RawRows] = {d: _RawRows(torch.cat(xs)) for d, xs in by_width.items()}
        self.labels = [] if client.y is None else [client.y.cpu(), client.y[client.train_mask].cpu()]
        gid = client.global_ids.cpu()
        self.edges = [client.edge_index.cpu(), gid[client.edge_index.cpu()]] if client.edge_index.numel() else []

    def rows_clean(self, payload: Payload) -> bool:
        """True when one screen of the whole payload on its accelerator finds no raw feature
        row (then no tensor needs the per-tensor search); False when it finds one, or cannot
        tell (a CPU payload, mixed devices, a comparison ``nearest`` would subsample).

        Why: the per-tensor search reads a verdict back to the host after every check, and on
        a GPU each read idles the device (the graph bench's harness overhead on an H200, about
        10 ms per client and round). The screen computes the same tests for every row of
        every orientation of every tensor, width by width, and reads back one bit. A payload
        it flags goes through the per-tensor search, which names the tensor and the match."""
        floats = [t.detach() for t in payload.values() if t.dtype.is_floating_point and t.numel() > 1]
        devices = {t.device for t in floats}
        if not floats or len(devices) != 1 or (next(iter(devices)).type == "cpu" and not SCREEN_ON_CPU):
            return not floats
        flags = []
        for d, raw in self.rows.items():
            views = [rows for t in floats for _, rows in _orientations(t, d)]
            if not views:
                continue
            if sum(v.shape[0] for v in views) * raw.n_informative > COSINE_MAX_PRODUCTS:
                return False  # the search samples this comparison: leave it to the search (no copy made)
            flag = raw.on(floats[0].device).any_match(torch.cat([v.to(torch.float32) for v in views]))
            if flag is None:
                return False
            flags.append(flag)
        return not flags or not bool(torch.stack(flags).any())

    def leaks(self, name: str, t: Tensor, feature_rows: bool = True) -> str | None:
        """A reason if tensor ``t`` holds raw data, else None. Feature rows are compared on
        ``t``'s own device (unless ``feature_rows`` is False: ``rows_clean`` cleared them);
        labels and edges (exact, and only at a matching size) on the CPU."""
        t = t.detach()
        if feature_rows and t.dtype.is_floating_point and t.numel() > 1:
            reason = self._feature_rows(name, t)
            if reason:
                return reason
        for y in self.labels:
            if t.numel() == y.numel() and t.numel() > 1 and torch.equal(t.cpu().flatten().to(y.dtype), y):
                return f"payload '{name}' equals the client's labels"
        for e in self.edges:
            if t.shape == e.shape and torch.equal(t.cpu().to(e.dtype), e):
                return f"payload '{name}' equals the client's edge list"
        return None

    def _feature_rows(self, name: str, t: Tensor) -> str | None:
        t32 = t.to(torch.float32)
        for d, raw in self.rows.items():
            raw = raw.on(t32.device)
            for how, rows in _orientations(t32, d):
                rows = rows[_nontrivial(rows)]
                where = "" if how == "rows" else f" ({how})"
                if raw.exact(rows):  # cheap, and it sees every row however large the upload
                    return f"payload '{name}' contains raw feature rows{where}"
                cos, i, j = raw.nearest(rows)
                if cos:
                    return (f"payload '{name}' contains raw feature rows ({how}, |cosine| {cos:.7f} "
                            f"with a {d}-wide raw row)")
        return None


def audit_findings(rnd: int, cid: int, payload: Payload, raw: RawDataFingerprint,
                   declared: tuple[str, ...] | None) -> list[str]:
    """What is wrong with one upload: undeclared names, raw rows, labels or edges.

    A pure function of the upload and the client's own data, so it runs where the data is
    (the engine in process, the client itself under Flower) and reads the same either way.
    """
    found: list[str] = []
    clean = raw.rows_clean(payload)  # on an accelerator: one read-back for the whole payload
    for name, t in payload.items():
        match = None if declared is None else next((p for p in declared if re.fullmatch(p, name)), None)
        if declared is not None and match is None:
            found.append(f"round {rnd}, client {cid}: undeclared payload '{name}'")
        reason = raw.leaks(name, t, feature_rows=not clean)
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
