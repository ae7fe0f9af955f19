"""The tiled Triton RotatE distance (benchmark/kge/triton_ops.py): the numbers of the eager
kernel. On CUDA Triton compiles it; on the CPU the same checks run in a subprocess under
Triton's interpreter (TRITON_INTERPRET=1 must be set before triton is first imported)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmark.kge import ops, triton_ops
from benchmark.kge.evaluation import FilterIndex, evaluate_filtered

pytestmark = pytest.mark.skipif(not triton_ops.available(), reason="Triton is not installed (it is with CUDA torch)")
ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(5, 37, 10), (33, 65, 8), (1, 1, 3), (40, 130, 17)]


def check_distances(device: torch.device) -> None:
    """Shapes off the tile sizes (partial tiles in every direction, K not a multiple of
    BLOCK_K) and a candidate equal to a query (a zero modulus adds 0)."""
    for B, N, K in SHAPES:
        g = torch.Generator().manual_seed(B * N + K)
        q = torch.randn(B, 2 * K, generator=g).to(device)
        c = torch.randn(N, 2 * K, generator=g).to(device)
        c[0] = q[0]
        got = triton_ops.complex_distance(q, c)
        want = ops._distance_block(q, c, "complex")
        assert got.shape == (B, N) and got.device == q.device, (B, N, K)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (B, N, K)
        assert float(got[0, 0]) == 0.0


def check_routing(device: torch.device) -> None:
    """tiled_forward sends shared candidate tables to the kernel, the rest to the eager block,
    and restores the eager block after."""
    q = torch.randn(6, 8, device=device)
    c = torch.randn(20, 8, device=device)
    idx = torch.randint(0, 20, (6, 4), device=device)
    eager = ops.pairwise_distance(q, c)
    with triton_ops.tiled_forward():
        assert ops._forward_block is triton_ops._tiled_block
        tiled = ops.pairwise_distance(q, c)
        per_query = ops.pairwise_distance(q, c, idx)
        l1 = ops.pairwise_distance(q, c, kind="l1")
    assert ops._forward_block is ops._distance_block
    assert torch.allclose(tiled, eager, rtol=1e-5, atol=1e-5)
    assert torch.equal(per_query, ops.pairwise_distance(q, c, idx))
    assert torch.allclose(l1, ops.pairwise_distance(q, c, kind="l1"))


def check_evaluation(device: torch.device) -> None:
    """The filtered evaluation bench kg times with the kernel gives the eager one's metrics."""
    g = torch.Generator().manual_seed(3)
    E, R, K = 50, 4, 6
    ent = torch.randn(E, 2 * K, generator=g).to(device)
    rel = torch.randn(2 * R, 2 * K, generator=g).to(device)
    triples = torch.stack([torch.randint(0, E, (30,), generator=g), torch.randint(0, R, (30,), generator=g),
                           torch.randint(0, E, (30,), generator=g)], dim=1)
    index = FilterIndex(triples, E, R)

    def score(h: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        h, r = h.to(device), r.to(device)
        return -ops.pairwise_distance(ent[h] + rel[r], ent)

    eager = evaluate_filtered(score, triples, index)
    with triton_ops.tiled_forward():
        tiled = evaluate_filtered(score, triples, index)
    assert abs(tiled["mrr"] - eager["mrr"]) < 1e-12 and tiled["hits@1"] == eager["hits@1"]


CHECKS = (check_distances, check_routing, check_evaluation)


@pytest.mark.parametrize("check", CHECKS, ids=lambda f: f.__name__)
def test_tiled_kernel(check, device: torch.device) -> None:
    if device.type == "cuda":
        check(device)
        return
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    done = subprocess.run([sys.executable, str(Path(__file__)), check.__name__], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout[-2000:] + done.stderr[-4000:]


def test_the_cpu_without_the_interpreter_keeps_the_eager_block() -> None:
    q, c = torch.randn(3, 8), torch.randn(5, 8)
    if not triton_ops.interpreted():
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            triton_ops.complex_distance(q, c)
        with triton_ops.tiled_forward():
            assert torch.equal(ops.pairwise_distance(q, c), ops._distance_block(q, c, "complex"))


if __name__ == "__main__":  # the CPU run of one check, under TRITON_INTERPRET=1 (see test_tiled_kernel)
    assert triton_ops.interpreted()
    {f.__name__: f for f in CHECKS}[sys.argv[1]](torch.device("cpu"))
    print("ok")
