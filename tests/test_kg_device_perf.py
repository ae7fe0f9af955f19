"""KG track on any device and at GPU-friendly granularity: ids on another device than the
model, negatives drawn on the generator's device, chunk sizing, and aten ops per training
step against the bare reference of ``bench kg``.

Runs on ``FEDMM_TEST_DEVICE`` (default cpu; ``cuda`` on a GPU machine)."""

from __future__ import annotations

import pytest
import torch

from fedmm_bench.bench import kg_harness_setup as harness_setup
from benchmark.bench_kg import BareRotatE, KGData, KGSizes, count_ops, harness_step_fn, reference_step_fn
from benchmark.kge import FilterIndex, KGEModel, evaluate_filtered, kge_loss, make_queries
from benchmark.kge.losses import sample_negatives
from benchmark.kge.ops import (
    CHUNK_ELEMENTS, CUDA_MEMORY_FRACTION, WORKING_COPIES, chunk_elements_for, chunk_elements_from_free, pairwise_distance,
    pairwise_distance_reference,
)
from benchmark.tasks.kg_completion import KGCompletion
from tests.devices import test_device as device_under_test

DEV = device_under_test()


def random_kg(num_entities: int = 60, num_relations: int = 4, n: int = 400, seed: int = 0) -> KGData:
    g = torch.Generator().manual_seed(seed)
    t = torch.stack([torch.randint(0, num_entities, (n,), generator=g), torch.randint(0, num_relations, (n,), generator=g),
                     torch.randint(0, num_entities, (n,), generator=g)], 1)
    t = torch.unique(t, dim=0)
    t = t[torch.randperm(len(t), generator=g)]
    a, b = int(0.8 * len(t)), int(0.9 * len(t))
    return KGData("random", num_entities, num_relations, t[:a], t[a:b], t[b:])


# --------------------------------------------------------------------------- devices


@pytest.mark.parametrize("query_device", ["cpu", "model"])
def test_evaluate_filtered_takes_queries_on_any_device(query_device):
    """CPU queries with a model on DEV, and queries on DEV, give the CPU model's metrics."""
    data = random_kg()
    model = KGEModel(data.num_entities, data.num_relations, "rotate", dim=8, seed=0)
    index = FilterIndex(torch.cat([data.train, data.valid, data.test]), data.num_entities, data.num_relations)
    want = evaluate_filtered(model.scorer(), data.test, index, batch_size=7)
    model = model.to(DEV)
    triples = data.test if query_device == "cpu" else data.test.to(DEV)
    cands = torch.arange(data.num_entities, device=triples.device)
    got = evaluate_filtered(model.scorer(cands), triples, index, candidates=cands, batch_size=7)
    for key in ("mrr", "mr", "hits@1", "hits@10"):
        assert got[key] == pytest.approx(want[key], rel=1e-6, abs=1e-9)
    assert got["count"] == 2 * len(data.test)


def test_fused_kernel_takes_a_cpu_index_with_tables_on_the_device():
    g = torch.Generator().manual_seed(3)
    q = torch.randn(5, 8, generator=g).to(DEV)
    c = torch.randn(11, 8, generator=g).to(DEV)
    idx = torch.randint(0, 11, (5, 4), generator=g)  # on the CPU
    got = pairwise_distance(q, c, idx, "complex")
    assert got.device == q.device
    assert torch.allclose(got, pairwise_distance_reference(q, c, idx.to(DEV), "complex"), atol=1e-5)


def test_negatives_are_drawn_on_the_generators_device():
    gen = torch.Generator(device=DEV).manual_seed(5)
    neg = sample_negatives(6, 9, 40, False, gen, DEV)
    want = torch.randint(0, 40, (6, 9), generator=torch.Generator(device=DEV).manual_seed(5), device=DEV)
    assert neg.device.type == DEV.type and torch.equal(neg, want)
    # a CPU generator keeps drawing its CPU numbers, delivered on the requested device
    cpu = sample_negatives(6, 9, 40, False, torch.Generator().manual_seed(5), DEV)
    assert cpu.device.type == DEV.type
    assert torch.equal(cpu.cpu(), torch.randint(0, 40, (6, 9), generator=torch.Generator().manual_seed(5)))


def test_batch_loss_uses_the_cpu_generators_draws_unchanged():
    """The CPU numbers of committed results: batch_loss's negatives are exactly the CPU
    generator's ``randint`` draws, and the loss is softmax CE over them."""
    data = random_kg()
    model = KGEModel(data.num_entities, data.num_relations, "rotate", dim=8, seed=1)
    task = KGCompletion(KGCompletion.Config(dim=8, num_negatives=12))
    queries = make_queries(data.train, data.num_relations)[:32]
    got = task.batch_loss(model, None, queries, torch.Generator().manual_seed(7), entities=model.entity)
    neg = torch.randint(0, data.num_entities, (32, 12), generator=torch.Generator().manual_seed(7))
    h, r, t = queries.T
    q = model.decoder.query(model.entity[h], r)
    want = kge_loss("softmax_ce", model.decoder._score_pairs(q, model.entity[t]),
                    model.decoder.score_query(q, model.entity, neg), neg == t.unsqueeze(1))
    assert torch.allclose(got, want)


def test_batch_loss_makes_no_copy_when_the_generator_is_on_the_model_device():
    data = random_kg()
    model = KGEModel(data.num_entities, data.num_relations, "rotate", dim=8, seed=1).to(DEV)
    task = KGCompletion(KGCompletion.Config(dim=8, num_negatives=12))
    queries = make_queries(data.train, data.num_relations)[:32].to(DEV)
    gen = torch.Generator(device=DEV).manual_seed(7)
    copies = []

    from torch.utils._python_dispatch import TorchDispatchMode

    class Copies(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.startswith("_to_copy"):  # a device-to-device move (copy_ also fills slices)
                copies.append(func.__name__)
            return func(*args, **(kwargs or {}))

    with Copies():
        task.batch_loss(model, None, queries, gen, entities=model.entity)
    assert copies == []


# --------------------------------------------------------------------------- chunk sizing


def test_chunk_sizing_rule():
    assert chunk_elements_for(torch.device("cpu")) == CHUNK_ELEMENTS
    assert chunk_elements_from_free(0) == CHUNK_ELEMENTS  # never below the CPU chunk
    free = 40 * 2**30
    assert chunk_elements_from_free(free) == int(free * CUDA_MEMORY_FRACTION) // (4 * WORKING_COPIES)
    assert chunk_elements_from_free(free, itemsize=8) == int(free * CUDA_MEMORY_FRACTION) // (8 * WORKING_COPIES)
    # a paper-size batch (1,024 queries x 256 negatives x 512) is one chunk with 40 GiB free
    assert chunk_elements_from_free(free) >= 1024 * 256 * 512
    if DEV.type == "cuda":
        assert chunk_elements_for(DEV) >= CHUNK_ELEMENTS


@pytest.mark.parametrize("kind", ["complex", "l1", "l2"])
def test_one_chunk_kernel_matches_reference_gradients(kind):
    """The GPU path (the whole batch in one chunk) against plain broadcasting."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(6, 10, dtype=torch.double, generator=g).to(DEV).requires_grad_()
    c = torch.randn(13, 10, dtype=torch.double, generator=g).to(DEV).requires_grad_()
    idx = torch.randint(0, 13, (6, 5), generator=g).to(DEV)
    got = pairwise_distance(q, c, idx, kind, chunk_elements=1 << 30)
    ref = pairwise_distance_reference(q, c, idx, kind)
    assert torch.allclose(got, ref)
    w = torch.randn(got.shape, dtype=torch.double, generator=g).to(DEV)
    for a, b in zip(torch.autograd.grad((got * w).sum(), (q, c)), torch.autograd.grad((ref * w).sum(), (q, c))):
        assert torch.allclose(a, b, atol=1e-10)


# --------------------------------------------------------------------------- op counts


def test_harness_kg_step_op_count_within_1_5x_of_the_bare_reference():
    """Aten ops per KG training step (the engine's path: S-Ind's batch_objective through the
    core loop) are at most 1.5x the bare vectorized RotatE step's; each op is a kernel launch
    on a GPU."""
    data = random_kg(num_entities=200, num_relations=5, n=1500)
    sizes = KGSizes(dim=16, batch=64, negatives=16)
    queries = make_queries(data.train, data.num_relations).to(DEV)
    algo, task, client, model, opt = harness_setup(data, sizes, DEV)
    h_step = harness_step_fn(algo, client, model, opt, queries, torch.Generator(device=DEV).manual_seed(0),
                             sizes.batch, sizes.block)
    ref = BareRotatE(data.num_entities, 2 * data.num_relations, sizes.dim, sizes.gamma, 0).to(DEV)
    r_step = reference_step_fn(ref, torch.optim.Adam(ref.parameters(), lr=sizes.lr), queries,
                               torch.Generator(device=DEV).manual_seed(0), sizes.batch, sizes.negatives, sizes.block)
    h_step(), r_step()  # Adam's state exists from the second step on
    harness, reference = count_ops(h_step), count_ops(r_step)
    assert harness == count_ops(h_step)  # deterministic
    assert harness <= 1.5 * reference, (harness, reference)


@pytest.mark.parametrize("kind", ["complex", "l1", "l2"])
def test_compiled_forward_gives_the_eager_distances_and_restores_them(kind):
    """``compiled_forward`` (bench kg's fused-kernel evaluation row) swaps in a compiled block
    for the forward pass only, scores what the eager kernel scores, and puts the eager one
    back, so no record is ever scored by it. The "eager" backend exercises the swap cheaply
    here; bench kg compiles with inductor on CUDA."""
    from benchmark.kge import ops

    g = torch.Generator().manual_seed(3)
    q, c = torch.randn(9, 16, generator=g).to(DEV), torch.randn(30, 16, generator=g).to(DEV)
    eager = pairwise_distance(q, c, kind=kind)
    calls = []
    with ops.compiled_forward(backend="eager"):
        assert ops._forward_block is not ops._distance_block
        inner = ops._forward_block
        ops._forward_block = lambda *a: calls.append(1) or inner(*a)
        fused = pairwise_distance(q, c, kind=kind, chunk_elements=16 * 30 * 4)  # several chunks, the last one short
    assert ops._forward_block is ops._distance_block and len(calls) == 3
    torch.testing.assert_close(fused, eager)
