"""A tiled Triton kernel for RotatE's distances to every entity (filtered evaluation); the
training kernels ``train.distance_kernel`` selects are in ``triton_training``.

Why: RotatE's distance ``sum_k |q_k - t_k|`` has no matrix-product form. Evaluated eagerly,
each chunk writes and re-reads ``[rows, N, d]`` temporaries (2.9 s for the FB15K-237 test
set on an H200); ``torch.compile`` fuses them into one reduction (0.65 s) but still loads
every candidate row once per query. This kernel computes it the way a matrix product is
computed, as a sum of outer products: one program holds a ``BLOCK_Q x BLOCK_N`` tile of
accumulators and walks the ``K`` complex coordinates one at a time over coordinate-major
copies of the queries and candidates, so each loaded coordinate is reused ``BLOCK_N`` (or
``BLOCK_Q``) times from registers. At the paper's size that is about 1.5e11 complex
moduli, some 40 ms of an H200's arithmetic: the target is bound by arithmetic, not memory.
(The first version, 32 x 32 tiles over ``[32, 32, 8]`` broadcast blocks of row-major
coordinates, took 0.89 s on the H200, 2026-11-28.)

The tile shape that is fastest depends on the GPU, so ``TILES`` lists a few and ``bench kg``
times each on CUDA (``tiled_forward(tile)``); ``DEFAULT_TILE`` is used otherwise.

Scope: the forward pass only, ``kind="complex"``, one candidate table shared by every query
(``[N, d]``): what all-entity evaluation computes. Anything else falls back to the eager
block (and so does a CPU tensor, unless Triton runs in its interpreter). Each output is
summed by one program in a fixed order, so it is deterministic, but in another order than
the eager kernels, so scores differ from theirs in the last bits: like
``ops.compiled_forward``, it is for measurement (``bench kg`` on CUDA) and no record is
scored by it. On the CPU the same kernel runs in Triton's interpreter, which is how the
tests check it without a GPU.

Triton ships with PyTorch's CUDA wheels; on a CPU-only install it is optional
(``available()``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import torch
from torch import Tensor

from benchmark.kge import ops


@dataclass(frozen=True)
class Tile:
    """One launch configuration: queries and candidates per program, and warps per program."""

    block_q: int
    block_n: int
    warps: int

    @property
    def name(self) -> str:
        return f"{self.block_q}x{self.block_n}, {self.warps} warps"


#: the shapes ``bench kg`` times on CUDA (accumulators per thread: 32 to 64)
TILES: tuple[Tile, ...] = (Tile(64, 64, 4), Tile(128, 64, 4), Tile(64, 128, 4), Tile(128, 128, 8))
DEFAULT_TILE = TILES[0]


def available() -> bool:
    """Whether Triton is installed (it is with PyTorch's CUDA wheels)."""
    return importlib.util.find_spec("triton") is not None


# the last candidate table and its coordinate-major copy: evaluation scores every query batch
# against the same table object, so it is transposed once per table, not once per batch. The
# table itself is held (not its address, which a later tensor may reuse), with its version
# counter, so an in-place change is seen too.
_transposed: dict[str, object] = {}


def _coordinate_major(cand: Tensor) -> Tensor:
    if _transposed.get("source") is not cand or _transposed.get("version") != cand._version:
        _transposed.update(source=cand, version=cand._version, value=cand.t().contiguous())
    return _transposed["value"]  # type: ignore[return-value]


def complex_distance(q: Tensor, cand: Tensor, tile: Tile = DEFAULT_TILE) -> Tensor:
    """``[B, N]`` RotatE distances ``sum_k |q_k - c_k|`` of float32 ``q`` ``[B, 2K]`` to every
    row of ``cand`` ``[N, 2K]`` (real parts first), by the tiled kernel."""
    from benchmark.kge import _triton_kernel as tk

    if q.dtype != torch.float32 or cand.dtype != torch.float32 or q.device != cand.device:
        raise ValueError("complex_distance needs float32 q and cand on one device")
    if q.shape[1] != cand.shape[1] or q.shape[1] % 2:
        raise ValueError(f"q {tuple(q.shape)} and cand {tuple(cand.shape)} need one even width (2K)")
    if q.device.type != "cuda" and not interpreted():
        raise ValueError("on the CPU the tiled kernel runs only in Triton's interpreter: set TRITON_INTERPRET=1 "
                         "before triton is first imported")
    qt, ct = q.t().contiguous(), _coordinate_major(cand)
    B, N, K = q.shape[0], cand.shape[0], q.shape[1] // 2
    out = torch.empty(B, N, dtype=torch.float32, device=q.device)
    grid = (tk.cdiv(B, tile.block_q), tk.cdiv(N, tile.block_n))
    tk.KERNEL[grid](qt, ct, out, B, N, K, qt.stride(0), ct.stride(0), out.stride(0),
                    BLOCK_Q=tile.block_q, BLOCK_N=tile.block_n, num_warps=tile.warps)
    return out


def interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _tiled_block(q: Tensor, cand: Tensor, kind: str, tile: Tile = DEFAULT_TILE) -> Tensor:
    if (kind == "complex" and cand.dim() == 2 and q.dtype == cand.dtype == torch.float32
            and (q.device.type == "cuda" or interpreted())):
        return complex_distance(q, cand, tile)
    return ops._distance_block_pure(q, cand, kind)


@contextmanager
def tiled_forward(tile: Tile = DEFAULT_TILE) -> Iterator[None]:
    """Within the block, ``ops.pairwise_distance``'s forward pass over a shared candidate
    table uses the tiled kernel with ``tile`` (for measurement: see the module docstring)."""
    if not available():
        raise RuntimeError("the tiled distance kernel needs Triton (it ships with PyTorch's CUDA wheels)")
    previous = ops._forward_block
    ops._forward_block = partial(_tiled_block, tile=tile)
    try:
        yield
    finally:
        ops._forward_block = previous
        _transposed.clear()
