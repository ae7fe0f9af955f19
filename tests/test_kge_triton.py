"""The Triton RotatE distances (benchmark/kge/triton_ops.py, triton_training.py): the numbers
of the eager kernels. On CUDA Triton compiles them; on the CPU the same checks run in one
subprocess under Triton's interpreter (TRITON_INTERPRET=1 must be set before triton is first
imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmark.kge import ops, triton_ops, triton_training
from benchmark.kge.evaluation import FilterIndex, evaluate_filtered

pytestmark = pytest.mark.skipif(not triton_ops.available(), reason="Triton is not installed (it is with CUDA torch)")
ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(5, 37, 10), (33, 65, 8), (1, 1, 3), (40, 130, 17)]


def check_distances(device: torch.device) -> None:
    """Every tile shape bench kg times, on shapes off the tile sizes (partial tiles in every
    direction), and a candidate equal to a query (a zero modulus adds 0)."""
    for tile in triton_ops.TILES:
        for B, N, K in SHAPES:
            g = torch.Generator().manual_seed(B * N + K)
            q = torch.randn(B, 2 * K, generator=g).to(device)
            c = torch.randn(N, 2 * K, generator=g).to(device)
            c[0] = q[0]
            got = triton_ops.complex_distance(q, c, tile)
            want = ops._distance_block(q, c, "complex")
            assert got.shape == (B, N) and got.device == q.device, (tile, B, N, K)
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (tile, B, N, K)
            assert float(got[0, 0]) == 0.0


def check_candidate_cache(device: torch.device) -> None:
    """The coordinate-major copy of a candidate table is reused for the same table only: an
    in-place change or another table (even one at a freed table's address) is transposed anew."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn(7, 12, generator=g).to(device)
    c = torch.randn(30, 12, generator=g).to(device)
    first = triton_ops.complex_distance(q, c)
    assert triton_ops._transposed["source"] is c
    c.mul_(2.0)  # same object, new contents
    assert torch.allclose(triton_ops.complex_distance(q, c), ops._distance_block(q, c, "complex"), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(first, triton_ops.complex_distance(q, c))
    for seed in range(3):  # fresh tables, possibly at a recycled address
        other = torch.randn(30, 12, generator=torch.Generator().manual_seed(seed)).to(device)
        assert torch.allclose(triton_ops.complex_distance(q, other), ops._distance_block(q, other, "complex"),
                              rtol=1e-5, atol=1e-5)
        del other


def check_routing(device: torch.device) -> None:
    """tiled_forward sends shared candidate tables to the kernel, the rest to the eager block,
    and restores the eager block after."""
    q = torch.randn(6, 8, device=device)
    c = torch.randn(20, 8, device=device)
    idx = torch.randint(0, 20, (6, 4), device=device)
    eager = ops.pairwise_distance(q, c)
    with triton_ops.tiled_forward():
        assert ops._forward_block.func is triton_ops._tiled_block
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


def check_bench_rows(device: torch.device) -> None:
    """bench kg's alternative-kernel rows (on by default on CUDA only): one timed evaluation per
    tile shape, and the harness's training step with the Triton training kernels."""
    from benchmark.bench_kg import KGData, KGSizes, bench_kg
    from fedmm_bench.bench import kg_harness_setup

    g = torch.Generator().manual_seed(0)
    t = torch.unique(torch.stack([torch.randint(0, 40, (300,), generator=g), torch.randint(0, 3, (300,), generator=g),
                                  torch.randint(0, 40, (300,), generator=g)], 1), dim=0)
    data = KGData("random", 40, 3, t[:200], t[200:230], t[230:260])
    sizes = KGSizes(dim=8, batch=32, negatives=8, block=2, warmup=1, timed=1, eval_batch=16)
    out = bench_kg(data, kg_harness_setup(data, sizes, device), sizes, device, alternatives=True,
                   compile_backend="eager")
    assert list(out["tiled_eval_s_by_tile"]) == [tile.name for tile in triton_ops.TILES]
    assert out["tiled_eval_s"] == min(out["tiled_eval_s_by_tile"].values()) > 0 and out["compiled_eval_s"] > 0
    assert out["triton_train_pos_per_s"] > 0 and ops._per_query_kernel is None  # timed, then eager again


def check_gathered_training_kernel(device: torch.device) -> None:
    """The gathering kernels (train.distance_kernel: triton): the eager Function's distances and
    gradients in q and c for per-query candidates, with repeated candidates (their gradients
    add up), a candidate equal to its query (the eager subgradient, 0), and sizes off the tiles."""
    for B, N, K, E in [(3, 5, 7, 9), (4, 40, 70, 12), (1, 1, 1, 2)]:
        g = torch.Generator().manual_seed(B * N + K)
        q = torch.randn(B, 2 * K, generator=g).to(device).requires_grad_()
        c = torch.randn(E, 2 * K, generator=g).to(device).requires_grad_()
        idx = torch.randint(0, E, (B, N), generator=g).to(device)
        idx[0, :min(N, 2)] = 0  # a repeated candidate
        with torch.no_grad():
            c[0] = q[0]  # and one at distance 0
        w = torch.randn(B, N, generator=g).to(device)
        got = triton_training.gathered_distance(q, c, idx)
        want = ops.pairwise_distance(q, c, idx)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (B, N, K)
        gq, gc = torch.autograd.grad((got * w).sum(), (q, c))
        wq, wc = torch.autograd.grad((want * w).sum(), (q, c))
        assert torch.allclose(gq, wq, rtol=1e-4, atol=1e-5) and torch.allclose(gc, wc, rtol=1e-4, atol=1e-5), (B, N, K)


def check_distance_kernel_setting(device: torch.device) -> None:
    """``select_distance_kernel`` routes pairwise_distance's per-query path to the gathering
    kernels and its shared-table forward pass to the tiled one, and back; a KG run with the
    setting trains (through the kernels) and scores like the eager one."""
    from benchmark.config import load_config
    from benchmark.engine import Engine

    q, c = torch.randn(4, 12, device=device), torch.randn(9, 12, device=device)
    idx = torch.randint(0, 9, (4, 6), device=device)
    triton_training.select_distance_kernel("triton", device)
    try:
        assert ops._per_query_kernel is triton_training._training_hook
        assert ops._forward_block is triton_ops._tiled_block  # a shared table: the tiled kernel
        assert torch.allclose(ops.pairwise_distance(q, c, idx), ops.pairwise_distance_reference(q, c, idx), atol=1e-5)
        assert torch.allclose(ops.pairwise_distance(q, c), ops.pairwise_distance_reference(q, c), atol=1e-5)
        assert torch.allclose(ops.pairwise_distance(q, c, kind="l1"), ops.pairwise_distance_reference(q, c, kind="l1"))
    finally:
        triton_training.select_distance_kernel("eager", device)
    assert ops._per_query_kernel is None and ops._forward_block is ops._distance_block
    import tempfile

    records = []
    cache = tempfile.mkdtemp(prefix="fedmm_triton_")
    calls = []
    kernel_fn = triton_training.gathered_distance
    triton_training.gathered_distance = lambda *a: calls.append(1) or kernel_fn(*a)
    for kernel in ("eager", "triton"):
        cfg = load_config(None, ["dataset.name=synthetic_kg", "dataset.num_entities=60", "partition.name=relation_id",
                                 "partition.num_clients=2", "missing.name=kg_items", "missing.rate=0.5",
                                 f"output.cache_dir={cache}", f"output.checkpoint_dir={cache}/ckpt",
                                 "task.name=kg_completion", "task.dim=8",
                                 "task.num_negatives=8", "task.batch_size=128", "algorithm.name=fede", "train.rounds=1",
                                 "train.local_epochs=1", f"train.device={device.type}",
                                 f"train.distance_kernel={kernel}"])
        records.append(Engine(cfg).run(resume=False))
        assert ops._per_query_kernel is (None if kernel == "eager" else triton_training._training_hook)
    triton_training.select_distance_kernel("eager", device)
    triton_training.gathered_distance = kernel_fn
    assert calls  # the triton run's training went through the kernels
    eager, tiled = (r["metrics"]["test/mrr"] for r in records)
    assert records[1]["status"] == "ok" and abs(eager - tiled) < 1e-3, (eager, tiled)


CHECKS = (check_distances, check_candidate_cache, check_routing, check_evaluation, check_bench_rows,
          check_gathered_training_kernel, check_distance_kernel_setting)


@pytest.fixture(scope="module")
def interpreted() -> dict[str, str]:
    """On the CPU: every check once, in one subprocess under TRITON_INTERPRET=1 (one start-up of
    torch and Triton for all of them): check name -> "ok" or its traceback."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    done = subprocess.run([sys.executable, str(Path(__file__))], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    results = {name: json.loads(outcome) for name, _, outcome in
               (line[len("RESULT "):].partition(" ") for line in done.stdout.splitlines() if line.startswith("RESULT "))}
    results["(the run)"] = f"exit {done.returncode}: {done.stderr[-4000:]}"
    return results


@pytest.mark.parametrize("check", CHECKS, ids=lambda f: f.__name__)
def test_tiled_kernel(check, device: torch.device, request: pytest.FixtureRequest) -> None:
    if device.type == "cuda":
        check(device)
        return
    results = request.getfixturevalue("interpreted")
    assert results.get(check.__name__) == "ok", results.get(check.__name__) or results["(the run)"]


def test_the_triton_distance_kernel_is_refused_where_it_cannot_run() -> None:
    from benchmark.errors import ConfigError

    if not triton_ops.interpreted():
        with pytest.raises(ConfigError, match="needs Triton and a CUDA device"):
            triton_training.select_distance_kernel("triton", torch.device("cpu"))
    with pytest.raises(ConfigError, match="must be one of eager, triton"):
        triton_training.select_distance_kernel("fused", torch.device("cpu"))
    assert ops._per_query_kernel is None


def test_the_cpu_without_the_interpreter_keeps_the_eager_block() -> None:
    q, c = torch.randn(3, 8), torch.randn(5, 8)
    if not triton_ops.interpreted():
        with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
            triton_ops.complex_distance(q, c)
        with triton_ops.tiled_forward():
            assert torch.equal(ops.pairwise_distance(q, c), ops._distance_block(q, c, "complex"))


if __name__ == "__main__":  # the CPU run of every check, under TRITON_INTERPRET=1 (see ``interpreted``)
    import traceback

    assert triton_ops.interpreted()
    for check in CHECKS:
        try:
            check(torch.device("cpu"))
            outcome = "ok"
        except Exception:  # noqa: BLE001 - reported to the test of this check
            outcome = traceback.format_exc()
        finally:
            triton_training.select_distance_kernel("eager", torch.device("cpu"))
        print(f"RESULT {check.__name__} {json.dumps(outcome)}", flush=True)
