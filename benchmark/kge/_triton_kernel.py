"""The Triton source of ``triton_ops``' tiled RotatE distance (imported only where Triton is
installed; ``triton_ops`` says why it exists and how it is used)."""

from __future__ import annotations

import triton
import triton.language as tl


def rotate_distance_tiles(q, c, out, B, N, K, stride_q, stride_c, stride_o,  # noqa: ANN001, N803
                          BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # noqa: N803
    """``out[i, j] = sum_k |q_ik - c_jk|`` over complex coordinates (real parts in the first K
    columns, imaginary parts in the next K) for one BLOCK_Q x BLOCK_N tile of queries and
    candidates, BLOCK_K coordinates at a time."""
    rq = tl.program_id(0) * BLOCK_Q + tl.arange(0, BLOCK_Q)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mq = rq < B
    mn = rn < N
    acc = tl.zeros((BLOCK_Q, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        mk = rk < K
        q_at = q + rq[:, None] * stride_q + rk[None, :]
        c_at = c + rn[:, None] * stride_c + rk[None, :]
        q_mask = mq[:, None] & mk[None, :]
        c_mask = mn[:, None] & mk[None, :]
        # a masked lane loads 0 on both sides and adds |0| = 0
        dr = tl.load(q_at, mask=q_mask, other=0.0)[:, None, :] - tl.load(c_at, mask=c_mask, other=0.0)[None, :, :]
        di = tl.load(q_at + K, mask=q_mask, other=0.0)[:, None, :] - tl.load(c_at + K, mask=c_mask, other=0.0)[None, :, :]
        acc += tl.sum(tl.sqrt(dr * dr + di * di), axis=2)
    tl.store(out + rq[:, None] * stride_o + rn[None, :], acc, mask=mq[:, None] & mn[None, :])


#: compiled for CUDA tensors; Triton's interpreter instead when TRITON_INTERPRET=1 was set
#: before triton was first imported (how the tests run it on the CPU)
KERNEL = triton.jit(rotate_distance_tiles)
cdiv = triton.cdiv
