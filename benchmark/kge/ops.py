"""Fused, cache-blocked distance kernels for scoring many candidates per query.

Why: RotatE's score ``gamma - sum_k |q_k - t_k|`` (complex modulus per coordinate) has no
matrix-product form, so scoring B queries against N candidates costs B*N*k elementwise
work. Written with plain broadcasting (as most libraries do), autograd materializes and
keeps several ``[B, N, k]`` tensors (the difference, its modulus, their gradients) that
are hundreds of MB at paper sizes (B = 1,024, N = 256, k = 256): the work is then bound by
memory traffic, not arithmetic. Here a custom autograd Function computes the forward pass
in row chunks small enough to stay in cache, saves only its inputs, and recomputes the
chunk in the backward pass with the analytic gradient

    d/dq |q - t| = (q - t) / |q - t|,   d/dt = -(q - t) / |q - t|

(0 where ``q == t``, a valid subgradient). Per-query candidate sets (``index`` of shape
``[B, N]``) are gathered chunk by chunk and their gradients scattered with ``index_add_``,
so the ``[B, N, d]`` gathered tensor never exists either.

Chunk size (``chunk_elements_for``): on the CPU, cache-sized chunks (the fastest there:
the working set stays in cache). On CUDA, chunks are sized from the free device memory,
so at paper sizes the whole batch is one chunk: a handful of large kernels per batch
instead of thousands of tiny launches, which is what a GPU needs.

Devices: an ``index`` on another device than the candidate table is moved to it, so CPU
ids work with a CUDA table.

Layout: vectors are ``[..., 2k]`` with the real parts first and the imaginary parts second
(the RotatE code's ``torch.chunk(x, 2, dim=-1)`` convention). ``kind`` selects the
per-coordinate distance: ``complex`` (modulus of each complex coordinate, RotatE), ``l1``
(TransE with norm 1), ``l2`` (Euclidean norm of the whole vector, TransE with norm 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

#: elements of one chunk's ``[rows, N, d]`` working tensor on the CPU (~4 MB of float32):
#: small enough for a core's cache, large enough that per-op overhead is negligible.
CHUNK_ELEMENTS = 1 << 20
#: share of the free CUDA memory one chunk's working tensors may take
CUDA_MEMORY_FRACTION = 0.5
#: ``[rows, N, d]``-sized tensors alive at once in the backward pass (gathered candidates,
#: difference, its square, the half-width scale): the divisor of the memory budget
WORKING_COPIES = 4
_EPS = 1e-12
KINDS = ("complex", "l1", "l2")


def chunk_elements_from_free(free_bytes: int, itemsize: int = 4) -> int:
    """Elements of one chunk given ``free_bytes`` of device memory: ``CUDA_MEMORY_FRACTION``
    of it shared by ``WORKING_COPIES`` working tensors, never below the CPU chunk."""
    budget = int(free_bytes * CUDA_MEMORY_FRACTION) // (itemsize * WORKING_COPIES)
    return max(CHUNK_ELEMENTS, budget)


def chunk_elements_for(device: torch.device, itemsize: int = 4) -> int:
    """The chunk size on ``device``: cache-sized on the CPU (``CHUNK_ELEMENTS``); on CUDA,
    from the memory free for new tensors (the driver's free memory plus what PyTorch's
    caching allocator holds unused), so a paper-size batch is a single chunk."""
    if device.type != "cuda":
        return CHUNK_ELEMENTS
    free, _ = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return chunk_elements_from_free(free + cached, itemsize)


def _rows_per_chunk(n: int, d: int, chunk_elements: int) -> int:
    return max(1, chunk_elements // max(1, n * d))


def _distance_block(q: Tensor, cand: Tensor, kind: str) -> Tensor:
    """``[rows, N]`` distances of q ``[rows, d]`` to cand ``[N, d]`` or ``[rows, N, d]``."""
    diff = q.unsqueeze(1) - cand  # [rows, N, d]
    if kind == "l1":
        return diff.abs_().sum(-1)
    diff.mul_(diff)
    if kind == "l2":
        return diff.sum(-1).sqrt_()
    k = diff.shape[-1] // 2
    mod = diff[..., :k] + diff[..., k:]
    return mod.sqrt_().sum(-1)


def _distance_block_pure(q: Tensor, cand: Tensor, kind: str) -> Tensor:
    """``_distance_block`` without in-place ops: the form ``torch.compile`` fuses into one
    reduction kernel, so no ``[rows, N, d]`` temporary is written to memory."""
    diff = q.unsqueeze(1) - cand
    if kind == "l1":
        return diff.abs().sum(-1)
    if kind == "l2":
        return (diff * diff).sum(-1).sqrt()
    k = diff.shape[-1] // 2
    return (diff[..., :k] * diff[..., :k] + diff[..., k:] * diff[..., k:]).sqrt().sum(-1)


#: the forward pass's distance block (swapped by ``compiled_forward`` and ``triton_ops.tiled_forward``
#: for measurement, and by ``triton_training.select_distance_kernel`` for a triton run)
_forward_block = _distance_block

#: training's per-query candidates under ``train.distance_kernel: triton``
#: (``triton_training.select_distance_kernel``): ``(q, c, index, kind)`` -> distances, or None where
#: it does not apply (the Function below then runs); None: always the Function
_per_query_kernel: Callable[[Tensor, Tensor, Tensor, str], Tensor | None] | None = None


@contextmanager
def compiled_forward(backend: str = "inductor") -> Iterator[None]:
    """Within the block, the forward pass's distances are computed by a ``torch.compile``d
    kernel (one fused kernel per chunk on CUDA instead of eager ops that stream ``[rows, N,
    d]`` temporaries through memory: what filtered evaluation over every entity is bound by).

    For measurement only (``bench kg`` times evaluation with it on CUDA): no record uses it,
    because a fused reduction sums in another order than the eager kernels, so scores differ
    in their last bits and a stored cell would no longer reproduce exactly."""
    global _forward_block
    previous = _forward_block
    _forward_block = torch.compile(_distance_block_pure, backend=backend, dynamic=True)
    try:
        yield
    finally:
        _forward_block = previous


class _PairwiseDistance(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, c: Tensor, index: Tensor | None, kind: str, chunk_elements: int) -> Tensor:  # type: ignore[override]
        B, d = q.shape
        shared_subset = index is not None and index.dim() == 1
        cand_all = c[index] if shared_subset else c
        n = cand_all.shape[0] if (index is None or shared_subset) else index.shape[1]
        rows = _rows_per_chunk(n, d, chunk_elements)
        out = q.new_empty(B, n)
        for s in range(0, B, rows):
            e = min(B, s + rows)
            cand = cand_all if (index is None or shared_subset) else c[index[s:e]]
            out[s:e] = _forward_block(q[s:e], cand, kind)
        ctx.save_for_backward(q, c, index if index is not None else torch.empty(0, dtype=torch.long))
        ctx.kind, ctx.chunk_elements, ctx.has_index = kind, chunk_elements, index is not None
        ctx.n = n
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        q, c, index = ctx.saved_tensors
        index = index if ctx.has_index else None
        kind = ctx.kind
        B, d = q.shape
        k = d // 2
        shared_subset = index is not None and index.dim() == 1
        per_query = index is not None and index.dim() == 2
        cand_all = c[index] if shared_subset else c
        need_q, need_c = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        gq = torch.empty_like(q) if need_q else None
        gcand = torch.zeros_like(cand_all) if (need_c and not per_query) else None
        gc = torch.zeros_like(c) if (need_c and per_query) else None
        rows = _rows_per_chunk(ctx.n, d, ctx.chunk_elements)
        grad = grad.contiguous()
        for s in range(0, B, rows):
            e = min(B, s + rows)
            cand = c[index[s:e]] if per_query else cand_all
            diff = q[s:e].unsqueeze(1) - cand  # [rows, N, d]
            g = grad[s:e].unsqueeze(-1)  # [rows, N, 1]
            if kind == "l1":
                diff.sign_().mul_(g)
            elif kind == "l2":
                scale = (diff * diff).sum(-1, keepdim=True).clamp_min_(_EPS).rsqrt_().mul_(g)
                diff.mul_(scale)
            else:
                sq = diff * diff
                scale = (sq[..., :k] + sq[..., k:]).clamp_min_(_EPS).rsqrt_().mul_(g)  # [rows, N, k]
                diff.view(e - s, -1, 2, k).mul_(scale.unsqueeze(2))
            if gq is not None:
                torch.sum(diff, 1, out=gq[s:e])
            if gcand is not None:
                gcand.sub_(diff.sum(0))
            elif gc is not None:
                gc.index_add_(0, index[s:e].reshape(-1), diff.view(-1, d), alpha=-1.0)
        if gcand is not None:
            if shared_subset:
                gc = torch.zeros_like(c).index_add_(0, index, gcand)
            else:
                gc = gcand
        return gq, gc, None, None, None


def pairwise_distance(
    q: Tensor, c: Tensor, index: Tensor | None = None, kind: str = "complex", chunk_elements: int | None = None
) -> Tensor:
    """Distances between queries and candidates, differentiable in ``q`` and ``c``.

    ``q``: ``[B, d]``; ``c``: ``[M, d]`` candidate table. ``index``: ``None`` (every row of
    ``c`` is a candidate for every query, output ``[B, M]``), a ``[N]`` long tensor (one
    shared candidate subset, ``[B, N]``) or a ``[B, N]`` long tensor (per-query candidates,
    ``[B, N]``). See the module docstring for ``kind``. ``chunk_elements``: elements of one
    chunk's working tensor; ``None`` takes ``chunk_elements_for(q.device)``.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown distance kind '{kind}'; valid: {', '.join(KINDS)}")
    if q.dim() != 2 or c.dim() != 2 or q.shape[1] != c.shape[1]:
        raise ValueError(f"expected q [B, d] and c [M, d], got {tuple(q.shape)} and {tuple(c.shape)}")
    if kind == "complex" and q.shape[1] % 2:
        raise ValueError("complex distances need an even width (real parts, then imaginary parts)")
    if index is not None and index.dim() == 2 and index.shape[0] != q.shape[0]:
        raise ValueError(f"per-query index has {index.shape[0]} rows for {q.shape[0]} queries")
    if q.dtype != c.dtype:
        c = c.to(q.dtype)
    if index is not None and index.device != c.device:
        index = index.to(c.device)
    if _per_query_kernel is not None and index is not None and index.dim() == 2:
        out = _per_query_kernel(q, c, index, kind)
        if out is not None:
            return out
    if chunk_elements is None:
        chunk_elements = chunk_elements_for(q.device, q.element_size())
    return _PairwiseDistance.apply(q.contiguous(), c.contiguous(), index, kind, chunk_elements)


def pairwise_distance_reference(q: Tensor, c: Tensor, index: Tensor | None = None, kind: str = "complex") -> Tensor:
    """The same quantity by plain broadcasting (autograd does the rest): the ground truth
    the fused kernel is tested against."""
    if index is not None:
        index = index.to(c.device)
    if index is None:
        cand = c.unsqueeze(0)
    elif index.dim() == 1:
        cand = c[index].unsqueeze(0)
    else:
        cand = c[index]
    diff = q.unsqueeze(1) - cand
    if kind == "l1":
        return diff.abs().sum(-1)
    if kind == "l2":
        return diff.pow(2).sum(-1).clamp_min(_EPS).sqrt()
    k = diff.shape[-1] // 2
    return (diff[..., :k].pow(2) + diff[..., k:].pow(2)).clamp_min(_EPS).sqrt().sum(-1)
