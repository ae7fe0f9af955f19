"""Opt-in Triton distance kernels for KG runs (``train.distance_kernel: triton``): gathering
kernels for training's per-query negatives, and ``triton_ops``' tiled kernel for the forward
pass over a shared candidate table (filtered evaluation over every entity).

CUDA only, off by default: the engine's per-query negatives (``index`` ``[B, N]``) are scored
by ``gathered_distance``, whose kernels read each candidate row where it is in the table and
write only ``[B, N]`` forward, ``[B, N, 2K]`` backward (added into the table's gradient by ``index_add_``, deterministic in
deterministic mode): the eager Function streams about ten ``[B, N, K]`` temporaries per view
and batch, 22.9 of the 57.3 GB a paper-size MMFeD3-HidE batch moves
(``benchmarks/kg_cost_model.py``). Sums run in another order than the eager kernels', so a
record made with it carries the setting in its config (it is part of the protocol) and
differs from eager CUDA records in the last bits; the CPU always runs the eager kernels.

On the CPU the kernels run only in Triton's interpreter (``triton_ops.interpreted``), which
is how the tests check them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from benchmark.errors import ConfigError
from benchmark.kge import ops
from benchmark.kge.triton_ops import _tiled_block, _transposed, available, interpreted


class _GatheredDistance(torch.autograd.Function):
    """``sum_k |q_bk - c_{idx[b, n], k}|`` and its gradients by the gathering kernels."""

    @staticmethod
    def forward(ctx, q: Tensor, c: Tensor, index: Tensor) -> Tensor:  # type: ignore[override]
        from benchmark.kge import _triton_kernel as tk

        B, N, K = index.shape[0], index.shape[1], q.shape[1] // 2
        out = torch.empty(B, N, dtype=torch.float32, device=q.device)
        grid = (B, tk.cdiv(N, GATHER_BLOCK_N))
        tk.GATHER_FORWARD[grid](q, c, index, out, N, K, q.stride(0), c.stride(0), index.stride(0), out.stride(0),
                                BLOCK_N=GATHER_BLOCK_N, BLOCK_K=GATHER_BLOCK_K)
        ctx.save_for_backward(q, c, index)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        from benchmark.kge import _triton_kernel as tk

        q, c, index = ctx.saved_tensors
        grad = grad.contiguous()
        B, N, K = index.shape[0], index.shape[1], q.shape[1] // 2
        gq = torch.empty_like(q)
        gcand = torch.empty(B, N, 2 * K, dtype=torch.float32, device=q.device)
        grid = (B, tk.cdiv(K, GATHER_BLOCK_K))
        tk.GATHER_BACKWARD[grid](q, c, index, grad, gq, gcand, N, K, q.stride(0), c.stride(0), index.stride(0),
                                 grad.stride(0), EPS=ops._EPS, BLOCK_N=GATHER_BLOCK_N, BLOCK_K=GATHER_BLOCK_K)
        gc = torch.zeros_like(c).index_add_(0, index.reshape(-1), gcand.view(-1, 2 * K)) \
            if ctx.needs_input_grad[1] else None
        return (gq if ctx.needs_input_grad[0] else None), gc, None


#: the gathering kernels' tiles: candidates per step and complex coordinates per step
GATHER_BLOCK_N = 32
GATHER_BLOCK_K = 64


def gathered_distance(q: Tensor, c: Tensor, index: Tensor) -> Tensor:
    """``[B, N]`` RotatE distances of float32 ``q`` ``[B, 2K]`` to the rows ``index`` ``[B, N]``
    of ``c`` ``[E, 2K]``, differentiable in ``q`` and ``c``, by the gathering kernels."""
    if q.dtype != torch.float32 or c.dtype != torch.float32 or not (q.device == c.device == index.device):
        raise ValueError("gathered_distance needs float32 q and c and the index on one device")
    if q.device.type != "cuda" and not interpreted():
        raise ValueError("on the CPU the gathering kernels run only in Triton's interpreter: set TRITON_INTERPRET=1 "
                         "before triton is first imported")
    if index.dim() != 2 or index.shape[0] != q.shape[0] or q.shape[1] != c.shape[1] or q.shape[1] % 2:
        raise ValueError(f"expected q [B, 2K], c [E, 2K], index [B, N]; got {tuple(q.shape)}, {tuple(c.shape)}, "
                         f"{tuple(index.shape)}")
    return _GatheredDistance.apply(q.contiguous(), c.contiguous(), index.long().contiguous())


def _training_hook(q: Tensor, c: Tensor, index: Tensor, kind: str) -> Tensor | None:
    """``ops.pairwise_distance``'s per-query path under ``train.distance_kernel: triton``: the
    gathering kernels where they apply (complex, float32, on CUDA or interpreted), else None
    (the eager Function)."""
    if (kind == "complex" and q.dtype == c.dtype == torch.float32
            and (q.device.type == "cuda" or interpreted())):
        return gathered_distance(q, c, index)
    return None


#: ``train.distance_kernel`` values
DISTANCE_KERNELS = ("eager", "triton")


def select_distance_kernel(name: str, device: torch.device) -> None:
    """Install (``triton``) or remove (``eager``) the Triton kernels: the gathering ones for
    training's per-query candidates, the tiled one (``triton_ops.DEFAULT_TILE``) for forward
    passes over a shared table. A run's engine, and each Flower client, calls it with its
    config, so the choice is the run's own."""
    if name not in DISTANCE_KERNELS:
        raise ConfigError(f"train.distance_kernel must be one of {', '.join(DISTANCE_KERNELS)}, got '{name}'")
    if name == "eager":
        ops._per_query_kernel = None
        ops._forward_block = ops._distance_block
        _transposed.clear()  # (the tiled kernel's cached table)
        return
    if not available() or (device.type != "cuda" and not interpreted()):
        raise ConfigError("train.distance_kernel: triton needs Triton and a CUDA device (on the CPU only Triton's "
                          "interpreter runs it, TRITON_INTERPRET=1); use eager")
    ops._per_query_kernel = _training_hook
    ops._forward_block = _tiled_block
