"""The Triton source of ``triton_ops``' tiled RotatE distance (imported only where Triton is
installed; ``triton_ops`` says why it exists and how it is used)."""

from __future__ import annotations

import triton
import triton.language as tl


def rotate_distance_outer(qt, ct, out, B, N, K, stride_qt, stride_ct, stride_o,  # noqa: ANN001, N803
                          BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr):  # noqa: N803
    """``out[i, j] = sum_k |q_ik - c_jk|`` for one ``BLOCK_Q x BLOCK_N`` tile, one complex
    coordinate per step, as an outer product: ``qt`` ``[2K, B]`` and ``ct`` ``[2K, N]`` are
    coordinate-major (real parts in rows ``0..K-1``, imaginary parts in ``K..2K-1``), so each
    step loads four contiguous vectors (``2 * (BLOCK_Q + BLOCK_N)`` floats) and updates
    ``BLOCK_Q * BLOCK_N`` accumulators from registers: arithmetic, not memory, bounds it."""
    rq = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mq = rq < B
    mn = rn < N
    acc = tl.zeros((BLOCK_Q, BLOCK_N), dtype=tl.float32)
    for k in range(0, K):
        # a masked lane loads 0 on both sides and adds |0| = 0 (its output is never stored anyway)
        qr = tl.load(qt + k * stride_qt + rq, mask=mq, other=0.0)
        qi = tl.load(qt + (k + K) * stride_qt + rq, mask=mq, other=0.0)
        cr = tl.load(ct + k * stride_ct + rn, mask=mn, other=0.0)
        ci = tl.load(ct + (k + K) * stride_ct + rn, mask=mn, other=0.0)
        dr = qr[:, None] - cr[None, :]
        di = qi[:, None] - ci[None, :]
        acc += tl.sqrt(dr * dr + di * di)
    tl.store(out + rq[:, None] * stride_o + rn[None, :], acc, mask=mq[:, None] & mn[None, :])


#: compiled for CUDA tensors; Triton's interpreter instead when TRITON_INTERPRET=1 was set
#: before triton was first imported (how the tests run it on the CPU)
KERNEL = triton.jit(rotate_distance_outer)
cdiv = triton.cdiv
