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


@triton.jit
def _minus_candidates(qr, qi, c, rows, rk, m2, K, stride_c):  # noqa: ANN001, N803
    """``(q - c_row)`` real and imaginary parts for a ``[rows, coordinates]`` tile of candidate
    rows read in place (masked lanes load 0)."""
    c_at = c + rows[:, None] * stride_c + rk[None, :]
    return (qr[None, :] - tl.load(c_at, mask=m2, other=0.0),
            qi[None, :] - tl.load(c_at + K, mask=m2, other=0.0))


def rotate_gather_forward(q, c, idx, out, N, K, stride_q, stride_c, stride_i, stride_o,  # noqa: ANN001, N803
                          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # noqa: N803
    """Training distances to per-query candidates: ``out[b, n] = sum_k |q_bk - c_{idx[b, n], k}|``
    for query ``b`` and ``BLOCK_N`` of its candidates, whose rows are read where they are in the
    table (no gathered ``[B, N, 2K]`` copy, no ``[B, N, K]`` temporaries)."""
    b = tl.program_id(0).to(tl.int64)  # offsets in int64: B * N * 2K can pass 2**31
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mn = rn < N
    rows = tl.load(idx + b * stride_i + rn, mask=mn, other=0)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        mk = rk < K
        m2 = mn[:, None] & mk[None, :]
        qr = tl.load(q + b * stride_q + rk, mask=mk, other=0.0)
        qi = tl.load(q + b * stride_q + K + rk, mask=mk, other=0.0)
        dr, di = _minus_candidates(qr, qi, c, rows, rk, m2, K, stride_c)
        acc += tl.sum(tl.sqrt(dr * dr + di * di), axis=1)
    tl.store(out + b * stride_o + rn, acc, mask=mn)


def rotate_gather_backward(q, c, idx, g, gq, gcand, N, K, stride_q, stride_c, stride_i,  # noqa: ANN001, N803
                           stride_g, EPS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # noqa: N803
    """The backward pass of ``rotate_gather_forward`` for query ``b`` and ``BLOCK_K`` complex
    coordinates: with ``w = g_bn (q_b - c_n) / max(|q_b - c_n|_k, sqrt(EPS))`` (the eager
    kernel's subgradient and floor), ``gq[b] = sum_n w`` and ``gcand[b, n] = -w``, which the
    caller adds into the table's gradient at ``idx`` (deterministically, by ``index_add_``)."""
    b = tl.program_id(0).to(tl.int64)  # offsets in int64: B * N * 2K can pass 2**31
    rk = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    mk = rk < K
    qr = tl.load(q + b * stride_q + rk, mask=mk, other=0.0)
    qi = tl.load(q + b * stride_q + K + rk, mask=mk, other=0.0)
    accr = tl.zeros((BLOCK_K,), dtype=tl.float32)
    acci = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for n0 in range(0, N, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        mn = rn < N
        m2 = mn[:, None] & mk[None, :]
        rows = tl.load(idx + b * stride_i + rn, mask=mn, other=0)
        gg = tl.load(g + b * stride_g + rn, mask=mn, other=0.0)
        dr, di = _minus_candidates(qr, qi, c, rows, rk, m2, K, stride_c)
        scale = gg[:, None] / tl.sqrt(tl.maximum(dr * dr + di * di, EPS))
        wr = dr * scale
        wi = di * scale
        accr += tl.sum(wr, axis=0)
        acci += tl.sum(wi, axis=0)
        out_at = gcand + (b * N + rn[:, None]) * (2 * K) + rk[None, :]
        tl.store(out_at, -wr, mask=m2)
        tl.store(out_at + K, -wi, mask=m2)
    tl.store(gq + b * (2 * K) + rk, accr, mask=mk)
    tl.store(gq + b * (2 * K) + K + rk, acci, mask=mk)


#: compiled for CUDA tensors; Triton's interpreter instead when TRITON_INTERPRET=1 was set
#: before triton was first imported (how the tests run it on the CPU)
KERNEL = triton.jit(rotate_distance_outer)
GATHER_FORWARD = triton.jit(rotate_gather_forward)
GATHER_BACKWARD = triton.jit(rotate_gather_backward)
cdiv = triton.cdiv
