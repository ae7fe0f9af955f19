"""A tiled Triton kernel for RotatE's distances to every entity (filtered evaluation).

Why: RotatE's distance ``sum_k |q_k - t_k|`` has no matrix-product form. Evaluated eagerly,
each chunk writes and re-reads ``[rows, N, d]`` temporaries (3.2 s for the FB15K-237 test
set on an H200); ``torch.compile`` fuses them into one reduction (0.65 s) but still loads
every candidate row once per query. This kernel tiles the work like a matrix product: one
program holds ``BLOCK_Q`` queries and ``BLOCK_N`` candidates and walks the ``k`` complex
coordinates ``BLOCK_K`` at a time, so each loaded coordinate is reused ``BLOCK_N`` (or
``BLOCK_Q``) times from registers and the kernel is bound by arithmetic, not memory.

Scope: the forward pass only, ``kind="complex"``, one candidate table shared by every query
(``[N, d]``): what all-entity evaluation computes. Anything else falls back to the eager
block (and so does a CPU tensor, unless Triton runs in its interpreter). Each output is summed by one program in a fixed order, so it is deterministic, but
in another order than the eager kernels, so scores differ from theirs in the last bits:
like ``ops.compiled_forward``, it is for measurement (``bench kg`` on CUDA) and no record
is scored by it. On the CPU the same kernel runs in Triton's interpreter, which is how the
tests check it without a GPU.

Triton ships with PyTorch's CUDA wheels; on a CPU-only install it is optional
(``available()``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
import torch
from torch import Tensor

from benchmark.kge import ops

#: tile sizes: queries and candidates per program, complex coordinates per step
BLOCK_Q = 32
BLOCK_N = 32
BLOCK_K = 8


def available() -> bool:
    """Whether Triton is installed (it is with PyTorch's CUDA wheels)."""
    return importlib.util.find_spec("triton") is not None


def complex_distance(q: Tensor, cand: Tensor) -> Tensor:
    """``[B, N]`` RotatE distances ``sum_k |q_k - c_k|`` of float32 ``q`` ``[B, 2K]`` to every
    row of ``cand`` ``[N, 2K]`` (real parts first), by the tiled kernel."""
    from benchmark.kge import _triton_kernel as tk

    if q.dtype != torch.float32 or cand.dtype != torch.float32 or q.device != cand.device:
        raise ValueError("complex_distance needs float32 q and cand on one device")
    if q.device.type != "cuda" and not interpreted():
        raise ValueError("on the CPU the tiled kernel runs only in Triton's interpreter: set TRITON_INTERPRET=1 "
                         "before triton is first imported")
    q, cand = q.contiguous(), cand.contiguous()
    B, d = q.shape
    N, K = cand.shape[0], d // 2
    out = torch.empty(B, N, dtype=torch.float32, device=q.device)
    grid = (tk.cdiv(B, BLOCK_Q), tk.cdiv(N, BLOCK_N))
    tk.KERNEL[grid](q, cand, out, B, N, K, q.stride(0), cand.stride(0), out.stride(0),
                                            BLOCK_Q=BLOCK_Q, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return out


def interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _tiled_block(q: Tensor, cand: Tensor, kind: str) -> Tensor:
    if (kind == "complex" and cand.dim() == 2 and q.dtype == cand.dtype == torch.float32
            and (q.device.type == "cuda" or interpreted())):
        return complex_distance(q, cand)
    return ops._distance_block_pure(q, cand, kind)


@contextmanager
def tiled_forward() -> Iterator[None]:
    """Within the block, ``ops.pairwise_distance``'s forward pass over a shared candidate
    table uses the tiled kernel (for measurement: see the module docstring)."""
    if not available():
        raise RuntimeError("the tiled distance kernel needs Triton (it ships with PyTorch's CUDA wheels)")
    previous = ops._forward_block
    ops._forward_block = _tiled_block
    try:
        yield
    finally:
        ops._forward_block = previous
