"""`bench kg`: KG-track training throughput and filtered evaluation time, harness vs a bare
PyTorch RotatE step, in one process on the same data and sizes.

Why a reference: a positives/s number alone does not say whether the harness is slow; the
ratio to a plain vectorized step (no algorithm, task, views or fused kernel) does. The
harness side is the engine's code path: an S-Ind client built by ``KGAlgorithm.new_model``
and trained by ``KGAlgorithm.batch_objective`` through the core loop (``LocalLoop``), in
blocks of ``KGSizes.block`` batches read back once per block as an epoch is. Aten ops per training step are counted for both
(a ``TorchDispatchMode``): on a GPU every op is at least one kernel launch, so the count
predicts launch overhead even where it cannot be timed.

``bench kg --imputers`` (``bench_imputers``) instead times the imputers' cost on the engine's
multimodal path: seconds per training batch of MMFedE-AE and MMFeD3-HidE on the same
federation (FB15K-237-Fed3 by default), client and sizes, and their ratio (issue 27: HidE at
most 3x MMFedE-AE). ``--profile N`` adds, for each method, one block under ``torch.profiler``:
its wall time, the device's busy time and kernel launches (on CUDA: whether a step is bound by
launches or by kernels), and the N ops that took the most (device, else CPU) time.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from benchmark.kge import triton_ops
from benchmark.kge.triton_training import select_distance_kernel
from benchmark.kge.ops import chunk_elements_for, compiled_forward
from benchmark.training import LocalLoop


@dataclass
class KGData:
    """Triples in global ids and where they came from."""

    source: str
    num_entities: int
    num_relations: int
    train: Tensor
    valid: Tensor
    test: Tensor


# --------------------------------------------------------------------------- the reference


class BareRotatE(nn.Module):
    """The reference: RotatE with per-query uniform negatives and softmax cross-entropy,
    written as plain broadcasting (no chunking, no custom autograd)."""

    def __init__(self, num_entities: int, num_relation_ids: int, dim: int, gamma: float, seed: int) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.rng, self.gamma, self.dim = (gamma + 2.0) / dim, gamma, dim
        self.entity = nn.Parameter(torch.empty(num_entities, 2 * dim).uniform_(-self.rng, self.rng, generator=g))
        self.relation = nn.Parameter(torch.empty(num_relation_ids, dim).uniform_(-self.rng, self.rng, generator=g))

    def loss(self, batch: Tensor, num_negatives: int, gen: torch.Generator) -> Tensor:
        h, r, t = batch[:, 0], batch[:, 1], batch[:, 2]
        neg = torch.randint(0, self.entity.shape[0], (len(batch), num_negatives), generator=gen, device=gen.device)
        phase = self.relation[r] * (math.pi / self.rng)
        rot = torch.polar(torch.ones_like(phase), phase)
        q = torch.view_as_complex(self.entity[h].view(-1, 2, self.dim).transpose(1, 2).contiguous()) * rot
        cand = self.entity[torch.cat([t.unsqueeze(1), neg], 1)].view(len(batch), -1, 2, self.dim)
        diff_re = q.real.unsqueeze(1) - cand[:, :, 0]
        diff_im = q.imag.unsqueeze(1) - cand[:, :, 1]
        score = self.gamma - (diff_re.square() + diff_im.square()).clamp_min(1e-30).sqrt().sum(-1)  # [B, 1 + N]
        score = torch.cat([score[:, :1], score[:, 1:].masked_fill(neg == t.unsqueeze(1), float("-inf"))], 1)
        return (torch.logsumexp(score, 1) - score[:, 0]).mean()


# --------------------------------------------------------------------------- measuring


class OpCounter(TorchDispatchMode):
    """Counts aten operator calls (forward, backward and optimizer alike)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += 1
        return func(*args, **(kwargs or {}))


def count_ops(step: Callable[[], object]) -> int:
    """Aten ops of one call of ``step``."""
    with OpCounter() as c:
        step()
    return c.count


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(steps: list[Callable[[], object]], device: torch.device, warmup: int, timed: int) -> list[float]:
    """Median wall time of each step over ``timed`` calls after ``warmup`` calls; the steps
    take turns, so a shared machine's load changes hit them alike."""
    for _ in range(warmup):
        for step in steps:
            step()
    times: list[list[float]] = [[] for _ in steps]
    for _ in range(timed):
        for step, out in zip(steps, times):
            _sync(device)
            t0 = time.perf_counter()
            step()
            _sync(device)
            out.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


@dataclass(frozen=True)
class StepProfile:
    """One call of a step under ``torch.profiler``: what bounds it on a GPU."""

    wall_s: float          # under the profiler (which adds its own overhead)
    device_busy_s: float   # kernel time summed over ops (0 on the CPU)
    launches: int          # kernel launches (CUDA runtime calls; 0 on the CPU)
    ops: int               # aten calls, nested ones included (the CPU side of every launch)
    table: str             # the top ops, by self device time on CUDA, self CPU time otherwise


def profile_step(step: Callable[[], object], device: torch.device, top: int) -> StepProfile:
    """Run ``step`` once under ``torch.profiler`` (CUDA activity too on a GPU) and summarize it."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    _sync(device)
    t0 = time.perf_counter()
    with profile(activities=activities) as prof:
        step()
        _sync(device)
    wall = time.perf_counter() - t0
    events = prof.key_averages()
    busy = sum(e.self_device_time_total for e in events) / 1e6 if cuda else 0.0
    launches = sum(e.count for e in events if "LaunchKernel" in e.key) if cuda else 0
    ops = sum(e.count for e in events if e.key.startswith("aten::"))
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    table = events.table(sort_by=sort, row_limit=top, max_name_column_width=48)
    return StepProfile(wall, busy, launches, ops, table)


@dataclass
class KGSizes:
    """Sizes of a bench run (defaults: the seed paper's setting)."""

    dim: int = 256
    batch: int = 1024
    negatives: int = 256
    gamma: float = 12.0
    lr: float = 1e-3
    eval_batch: int = 256
    warmup: int = 2
    timed: int = 5
    seed: int = 0
    eval_limit: int = 0  # test triples evaluated (0 = all)
    block: int = 8  # batches per timed call: the harness loop reads the device once per call, as once per epoch

    @property
    def positives(self) -> int:
        """Training positives of one timed call."""
        return self.batch * self.block


def deterministic_cost(step: Callable[[], object], seconds: float, device: torch.device, sizes: KGSizes) -> str:
    """``step`` timed again with deterministic algorithms flipped, as a printable line (or
    why it cannot run that way: some CUDA kernels have no deterministic variant)."""
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(not was)
    try:
        (flipped,) = median_seconds([step], device, 1, sizes.timed)
    except RuntimeError as e:
        return f"not runnable with the mode {'off' if was else 'on'}: {str(e).splitlines()[0]}"
    finally:
        torch.use_deterministic_algorithms(was)
    on, off = (seconds, flipped) if was else (flipped, seconds)
    return f"{sizes.positives / on:,.0f} vs {sizes.positives / off:,.0f} positives/s ({on / off:.2f}x time)"


def _next_batches(queries: Tensor, batch: int, block: int, pos: list[int]) -> list[Tensor]:
    """``block`` successive batches of ``queries``, wrapping around."""
    out = []
    for _ in range(block):
        s = pos[0]
        pos[0] = (s + batch) % max(1, len(queries) - batch)
        out.append(queries[s:s + batch])
    return out


def harness_step_fn(algo, client, model, opt, queries: Tensor, gen: torch.Generator,  # type: ignore[no-untyped-def]
                    batch: int, block: int) -> Callable[[], object]:
    """``block`` batches of the engine's own KG training: ``KGAlgorithm.batch_objective``
    through the core loop (``LocalLoop``), which reads the device once per epoch; here an
    epoch is the block, as a client's epoch is its many batches."""
    loop, loss_fn, pos = LocalLoop(epochs=1), algo.batch_objective(client, model, gen), [0]

    def step() -> object:
        chunk = _next_batches(queries, batch, block, pos)
        return loop.run(loss_fn, opt, [], cid=client.cid, batches=lambda _: chunk)

    return step


def reference_step_fn(ref: BareRotatE, opt: torch.optim.Optimizer, queries: Tensor, gen: torch.Generator,
                      batch: int, negatives: int, block: int) -> Callable[[], object]:
    """``block`` steps of the bare reference on successive batches of ``queries`` (no host
    reads at all: the floor the harness is held against)."""
    pos = [0]

    def step() -> object:
        for b in _next_batches(queries, batch, block, pos):
            opt.zero_grad(set_to_none=True)
            ref.loss(b, negatives, gen).backward()
            opt.step()
        return None

    return step


def reference_eval(ref: BareRotatE, triples: Tensor, known: Tensor, num_relations: int, eval_batch: int) -> float:
    """Filtered MRR of both directions by plain tensor code (the reference's evaluation):
    a dense ``[B, E]`` score matrix per batch, known answers masked by a dense lookup."""
    E, R = ref.entity.shape[0], num_relations
    dev = ref.entity.device
    k = known.to(dev)
    keys = torch.cat([(k[:, 0] * 2 * R + k[:, 1]) * E + k[:, 2], (k[:, 2] * 2 * R + k[:, 1] + R) * E + k[:, 0]]).unique()
    t = triples.to(dev)
    qs = torch.cat([t, torch.stack([t[:, 2], t[:, 1] + R, t[:, 0]], 1)])
    ent = ref.entity.detach().view(E, 2, ref.dim)
    total = 0.0
    with torch.no_grad():
        for s in range(0, len(qs), eval_batch):
            q3 = qs[s:s + eval_batch]
            phase = ref.relation[q3[:, 1]] * (math.pi / ref.rng)
            h = ent[q3[:, 0]]
            qr = h[:, 0] * phase.cos() - h[:, 1] * phase.sin()
            qi = h[:, 0] * phase.sin() + h[:, 1] * phase.cos()
            rows = max(1, chunk_elements_for(dev) // (E * ref.dim))  # [rows, E, k] temporaries sized like the harness's
            score = torch.cat([ref.gamma - ((qr[i:i + rows, None] - ent[:, 0]).square()
                                            + (qi[i:i + rows, None] - ent[:, 1]).square()).sqrt().sum(-1)
                               for i in range(0, len(q3), rows)])
            cand = (q3[:, 0] * 2 * R + q3[:, 1]).unsqueeze(1) * E + torch.arange(E, device=dev)
            pos = torch.searchsorted(keys, cand).clamp_max(len(keys) - 1)
            is_known = keys[pos] == cand
            is_known[torch.arange(len(q3), device=dev), q3[:, 2]] = False
            target = score.gather(1, q3[:, 2:3])
            score = score.masked_fill(is_known, float("-inf"))
            rank = 1 + (score > target).sum(1) + 0.5 * ((score == target).sum(1) - 1)
            total += float((1.0 / rank.double()).sum())
    return total / max(1, len(qs))


def bench_kg(data: KGData, harness: tuple, sizes: KGSizes, dev: torch.device, alternatives: bool | None = None,
             compile_backend: str = "inductor") -> dict:
    """Measure and print the engine's KG step (``harness``: algorithm, task, client, model
    and optimizer, built by the ``bench`` verb the way the engine builds them) against the
    bare reference on ``data``; returns the numbers.

    ``alternatives`` (default: on CUDA only) also times the evaluation with the fused
    (``torch.compile`` with ``compile_backend``) and the tiled Triton distance kernels, one
    row per tile shape; the tests turn it on for the CPU under Triton's interpreter."""
    from tabulate import tabulate

    from benchmark.kge import FilterIndex, evaluate_filtered, make_queries, views_scorer

    queries = make_queries(data.train, data.num_relations)
    perm = torch.randperm(len(queries), generator=torch.Generator().manual_seed(sizes.seed))
    queries = queries[perm].to(dev)

    algo, task, client, model, opt = harness
    h_gen = torch.Generator(device=dev).manual_seed(sizes.seed)
    h_step = harness_step_fn(algo, client, model, opt, queries, h_gen, sizes.batch, sizes.block)
    ref = BareRotatE(data.num_entities, 2 * data.num_relations, sizes.dim, sizes.gamma, sizes.seed).to(dev)
    r_opt = torch.optim.Adam(ref.parameters(), lr=sizes.lr)
    r_gen = torch.Generator(device=dev).manual_seed(sizes.seed)
    r_step = reference_step_fn(ref, r_opt, queries, r_gen, sizes.batch, sizes.negatives, sizes.block)

    h_step(), r_step()  # the first step creates Adam's state: count a steady-state step
    h_ops, r_ops = count_ops(h_step) / sizes.block, count_ops(r_step) / sizes.block  # per training step
    h_s, r_s = median_seconds([h_step, r_step], dev, sizes.warmup, sizes.timed)
    det_line = deterministic_cost(h_step, h_s, dev, sizes)

    known = torch.cat([data.train, data.valid, data.test])

    def harness_eval(triples: Tensor) -> float:
        model.eval()
        with torch.no_grad():
            index = FilterIndex(client.known_triples(), client.num_entities, client.num_relations)
            mrr = evaluate_filtered(views_scorer(task.views(model, client)), triples, index, None, sizes.eval_batch)["mrr"]
        model.train()
        return mrr

    # one batch of each first: whichever ran first paid the device's one-off costs (allocator
    # growth, kernel loading) in its timing, not the evaluation's
    harness_eval(client.test_triples[:sizes.eval_batch])
    reference_eval(ref, data.test[:sizes.eval_batch], known, data.num_relations, sizes.eval_batch)
    _sync(dev)
    t0 = time.perf_counter()
    h_mrr = harness_eval(client.test_triples)
    _sync(dev)
    h_eval = time.perf_counter() - t0
    t0 = time.perf_counter()
    r_mrr = reference_eval(ref, data.test, known, data.num_relations, sizes.eval_batch)
    _sync(dev)
    r_eval = time.perf_counter() - t0

    def timed_eval_within(context: AbstractContextManager[None]) -> tuple[float, float]:
        """(seconds, MRR) of the harness evaluation with another distance kernel, after one
        batch that compiles it (measured, never recorded)."""
        with context:
            harness_eval(client.test_triples[:sizes.eval_batch])
            _sync(dev)
            t0 = time.perf_counter()
            mrr = harness_eval(client.test_triples)
            _sync(dev)
            return time.perf_counter() - t0, mrr

    c_eval = c_mrr = t_train_s = None
    tiled: dict[str, tuple[float, float]] = {}  # tile name -> (seconds, MRR)
    if dev.type == "cuda" if alternatives is None else alternatives:  # a fused distance kernel, then tiled ones
        c_eval, c_mrr = timed_eval_within(compiled_forward(compile_backend))
        if triton_ops.available():
            for tile in triton_ops.TILES:
                tiled[tile.name] = timed_eval_within(triton_ops.tiled_forward(tile))
            # the harness step again with train.distance_kernel: triton (the gathering kernels)
            select_distance_kernel("triton", dev)
            try:
                t_train_s = median_seconds([h_step], dev, sizes.warmup, sizes.timed)[0]
            finally:
                select_distance_kernel("eager", dev)

    print(f"bench kg: {data.source}: {data.num_entities} entities, {data.num_relations} relations, "
          f"{len(queries)} training queries (triples + inverses); RotatE complex dim {sizes.dim}, batch {sizes.batch}, "
          f"{sizes.negatives} negatives per query, softmax CE; {len(data.test)} test triples evaluated; device {dev}, torch threads {torch.get_num_threads()}, "
          f"matmul precision {torch.get_float32_matmul_precision()}, deterministic {torch.are_deterministic_algorithms_enabled()}; "
          f"median of {sizes.timed} blocks of {sizes.block} batches after {sizes.warmup} warm-up")
    rows = [
        ["harness (S-Ind client: batch_objective through the core loop)", f"{sizes.positives / h_s:,.0f}", f"{h_ops:,.0f}", f"{h_eval:.2f}",
         f"{h_mrr:.4f}"],
        ["bare PyTorch RotatE reference", f"{sizes.positives / r_s:,.0f}", f"{r_ops:,.0f}", f"{r_eval:.2f}", f"{r_mrr:.4f}"],
        ["ratio harness / reference", f"{r_s / h_s:.2f}x", f"{h_ops / r_ops:.2f}x", f"{h_eval / r_eval:.2f}x", ""],
    ]
    if t_train_s is not None:
        rows.append(["harness training, train.distance_kernel: triton (ratio: its time / the eager harness's)",
                     f"{sizes.positives / t_train_s:,.0f} ({t_train_s / h_s:.2f}x)", "", "", ""])
    if c_eval is not None:
        rows.append(["harness evaluation, distances by a torch.compile'd kernel", "", "", f"{c_eval:.2f}", f"{c_mrr:.4f}"])
    for name, (t_eval, t_mrr) in tiled.items():
        rows.append([f"harness evaluation, distances by the tiled Triton kernel ({name})", "", "", f"{t_eval:.3f}",
                     f"{t_mrr:.4f}"])
    print(tabulate(rows, headers=["run", "positives/s", "aten ops / step", "test eval s (filtered, both directions)", "test MRR"],
                   tablefmt="github"))
    print(f"train.deterministic cost (harness step, torch.use_deterministic_algorithms on vs off): {det_line}")
    return {"source": data.source, "device": str(dev), "harness_pos_per_s": sizes.positives / h_s,
            "reference_pos_per_s": sizes.positives / r_s, "harness_ops": h_ops, "reference_ops": r_ops,
            "harness_eval_s": h_eval, "reference_eval_s": r_eval, "compiled_eval_s": c_eval,
            "tiled_eval_s": min((t for t, _ in tiled.values()), default=None),
            "tiled_eval_s_by_tile": {name: t for name, (t, _) in tiled.items()},
            "triton_train_pos_per_s": None if t_train_s is None else sizes.positives / t_train_s, "deterministic": det_line}


# --------------------------------------------------------------------------- imputer cost
# ``bench kg --imputers``: per-batch seconds of MMFedE-AE and MMFeD3-HidE side by side (issue
# 27: HidE's training batch must cost at most 3x MMFedE-AE's). Both run the engine's own
# client code (``Algorithm.client_update``) on the same federation, client and sizes; the
# engine builds the federation through its registered builder, so this core module still
# imports nothing from the data or algorithm layers.

IMPUTER_PAIRS: tuple[tuple[str, str], ...] = (("mmfede", "ae"), ("mmfed3", "hide"))
IMPUTER_LABELS = {("mmfede", "ae"): "MMFedE-AE", ("mmfed3", "hide"): "MMFeD3-HidE"}
# FB15K-237-Fed3 as the mmfed3 suites build it (r = 50%, alpha = 0.1, random fill); hashing
# text features (offline and fast; the encoder changes the projections' width only, which
# both methods share, not the imputers' cost)
IMPUTER_DATA: tuple[str, ...] = (
    "dataset.name=fb15k237", "dataset.text_encoder=hashing", "partition.name=relation_id", "partition.num_clients=3",
    "missing.name=kg_items", "missing.alpha=0.1", "missing.rate=0.5", "missing.fill=random",
)


class _QueryWindow:
    """The engine's task with ``train_queries`` cut to a moving window of ``size`` queries,
    so one ``client_update`` (one local epoch) is exactly one timed block of batches; every
    other attribute is the task's own."""

    def __init__(self, task, size: int) -> None:  # type: ignore[no-untyped-def]
        self._task, self._size, self._pos, self._full = task, size, 0, None

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._task, name)

    def train_queries(self, client) -> Tensor:  # type: ignore[no-untyped-def]
        if self._full is None:
            self._full = self._task.train_queries(client)
        full, s = self._full, self._pos
        idx = torch.arange(s, s + self._size, device=full.device) % len(full)
        self._pos = (s + self._size) % len(full)
        return full[idx]


def imputer_step_fn(engine, cid: int, sizes: KGSizes) -> Callable[[], object]:  # type: ignore[no-untyped-def]
    """One local epoch of ``sizes.block`` batches of client ``cid`` through the algorithm's
    ``client_update`` (the engine's call), with a persistent client state (model, optimizer)."""
    import dataclasses

    ctx = engine._context()
    ctx = dataclasses.replace(ctx, task=_QueryWindow(ctx.task, sizes.batch * sizes.block))
    algo = engine.algo_cls(engine.algo_cfg, ctx)
    client = next(c for c in engine.clients if c.cid == cid)
    state: dict = {}
    rnd = [0]

    def step() -> object:
        rnd[0] += 1
        return algo.client_update(client, state, {}, rnd[0])

    return step


def bench_imputers(sizes: KGSizes, device: str = "cpu", data: tuple[str, ...] | list[str] = IMPUTER_DATA,
                   pairs: tuple[tuple[str, str], ...] = IMPUTER_PAIRS, cid: int = 0, profile_top: int = 0) -> dict:
    """Per-batch training seconds of each ``(algorithm, imputer)`` of ``pairs`` (default
    MMFedE-AE and MMFeD3-HidE) on client ``cid`` of the federation ``data`` names, the steps
    taking turns (``median_seconds``), and each one's ratio to the first; prints a table and
    returns the numbers. ``profile_top`` > 0 then profiles one block of each
    (``profile_step``) and prints its summary and top ops."""
    from tabulate import tabulate

    from benchmark.config import load_config
    from benchmark.engine import Engine
    from benchmark.federation import build_federation
    from benchmark.registry import load_plugins

    load_plugins()

    def config(algo: str, imputer: str):  # type: ignore[no-untyped-def]
        return load_config(None, [*data, "task.name=kg_completion", "task.decoder=rotate", "task.loss=softmax_ce",
                                  f"task.dim={sizes.dim}", f"task.gamma={sizes.gamma}", f"task.num_negatives={sizes.negatives}",
                                  f"task.batch_size={sizes.batch}", f"train.lr={sizes.lr}", "train.local_epochs=1",
                                  f"train.device={device}", f"seed={sizes.seed}", f"algorithm.name={algo}",
                                  f"algorithm.imputer={imputer}"])

    cfgs = [config(a, i) for a, i in pairs]
    t0 = time.perf_counter()
    fed = build_federation(cfgs[0])
    build_s = time.perf_counter() - t0
    engines = [Engine(cfg, fed=fed, audit=False) for cfg in cfgs]
    steps = [imputer_step_fn(e, cid, sizes) for e in engines]
    client = next(c for c in engines[0].clients if c.cid == cid)
    dev = engines[0].device
    for step in steps:
        step()  # the first call creates the models and Adam's state
    ops = [count_ops(step) / sizes.block for step in steps]
    secs = [s / sizes.block for s in median_seconds(steps, dev, sizes.warmup, sizes.timed)]
    labels = [IMPUTER_LABELS.get(p, f"{p[0]} ({p[1]})") for p in pairs]
    print(f"bench kg --imputers: {cfgs[0].dataset.name}, {len(fed.clients)} clients ({fed.meta().modalities}); "
          f"client {cid}: {client.num_entities} entities, {client.num_train} training triples; RotatE dim {sizes.dim}, "
          f"batch {sizes.batch}, {sizes.negatives} negatives; device {dev}, torch threads {torch.get_num_threads()}; "
          f"federation built in {build_s:.1f}s; median of {sizes.timed} local epochs of {sizes.block} batches "
          f"(client_update) after {sizes.warmup} warm-up, the methods taking turns")
    rows = [[lab, f"{s:.4f}", f"{s / secs[0]:.2f}x", f"{o:,.0f}"] for lab, s, o in zip(labels, secs, ops)]
    print(tabulate(rows, headers=["run", "s / batch (median)", f"ratio to {labels[0]}", "aten ops / batch"],
                   tablefmt="github"))
    profiles = {}
    for label, step in zip(labels if profile_top > 0 else [], steps):
        prof = profile_step(step, dev, profile_top)
        profiles[label] = prof
        busy = f"device busy {prof.device_busy_s:.3f} s ({prof.device_busy_s / prof.wall_s:.0%}), " if dev.type == "cuda" else ""
        print(f"\nprofile of one block of {sizes.block} batches, {label}: wall {prof.wall_s:.3f} s under the profiler, "
              f"{busy}{prof.launches:,} kernel launches, {prof.ops:,} aten calls (nested ones included)")
        print(prof.table)
    return {"labels": labels, "seconds_per_batch": secs, "ratio": [s / secs[0] for s in secs], "ops_per_batch": ops,
            "device": str(dev), "entities": client.num_entities, "profiles": profiles}
