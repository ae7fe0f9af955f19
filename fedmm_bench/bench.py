"""`bench`: seconds per round and peak memory of FedAvg-Zero on a large synthetic graph.

The harness run is measured side by side with a reference: a bare PyTorch FedAvg loop over
the same clients and model, with no engine, ledger or audit. Their ratio is the harness's
overhead. Medians over rounds; round 0 (warm-up) excluded when there are more rounds.
The reference loop also runs with ``torch.use_deterministic_algorithms`` on and off: the
cost of ``train.deterministic`` (about nothing on the CPU; deterministic CUDA kernels, such
as sorted scatter-adds, can be slower). The KG track has its own bench: ``benchmark.bench_kg``
measures, and ``run_bench_kg`` here loads the data and builds the engine's client for it
(``fedmm_bench`` sits above the data and algorithm layers; the core may import neither).
"""

from __future__ import annotations

import copy
import statistics
import time
from pathlib import Path

import torch
from tabulate import tabulate

from benchmark.bench_kg import KGData, KGSizes, bench_kg
from benchmark.config import load_config
from benchmark.cost import synchronize
from benchmark.engine import Engine
from benchmark.seeding import seed_globals
from benchmark.memory import PeakMemory
from benchmark.record import Record


def _reference_fedavg(engine: Engine, rounds: int) -> tuple[list[float], float]:
    """A plain FedAvg loop: same model, same local epochs, no harness around it."""
    algo = engine.algo_cls(engine.algo_cfg, engine._context())
    cfg = engine.cfg.train
    glob = algo.build_model()
    models = {c.cid: copy.deepcopy(glob) for c in engine.clients}
    opts = {cid: torch.optim.Adam(m.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay) for cid, m in models.items()}
    times = []
    with PeakMemory(engine.device) as mem:
        for _ in range(rounds):
            t0 = time.perf_counter()
            states, weights = [], []
            for c in engine.clients:
                m, opt = models[c.cid], opts[c.cid]
                m.load_state_dict(glob.state_dict())
                m.train()
                for _ in range(cfg.local_epochs):
                    opt.zero_grad(set_to_none=True)
                    engine.task.loss(m, c).backward()
                    opt.step()
                states.append(m.state_dict())
                weights.append(float(c.num_train))
            total = sum(weights)
            glob.load_state_dict({k: sum(s[k] * (w / total) for s, w in zip(states, weights)) for k in states[0]})
            synchronize(engine.device)  # the round's kernels done, as the engine's round is when timed
            times.append(time.perf_counter() - t0)
    return times, mem.peak_mb


def _median(xs: list[float]) -> float:
    return statistics.median(xs[1:] if len(xs) > 1 else xs)


def harness_stages(record: Record) -> dict[str, float]:
    """Median seconds of each stage of the harness's rounds (``benchmark.cost``), over the rounds
    the bench's median covers: where the harness's time over the bare loop goes. ``clients``
    is their ``client_update`` alone; each upload's audit and the ledger's bookkeeping land in
    ``upload`` and ``other``."""
    rounds = (record.cost or {}).get("rounds", {})
    names = {"download_s": "download", "client_s": "clients", "upload_s": "upload", "server_s": "server",
             "other_s": "other"}
    return {label: _median(rounds[key]) for key, label in names.items() if rounds.get(key)}


def bench_fedavg(num_nodes: int = 20000, num_clients: int = 10, rounds: int = 5, device: str = "auto") -> dict:
    cfg = load_config(None, [
        "dataset.name=synthetic", f"dataset.num_nodes={num_nodes}", f"partition.num_clients={num_clients}",
        "partition.name=dirichlet_label", "missing.rate=0.3", "algorithm.name=fedavg", f"train.rounds={rounds}",
        f"train.eval_every={rounds}", f"train.device={device}",
    ])
    t0 = time.perf_counter()
    engine = Engine(cfg)
    build_s = time.perf_counter() - t0
    seed_globals(cfg.seed)
    was_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(not was_det)
    try:
        flipped: list[float] | None = _reference_fedavg(engine, rounds)[0]
        det_error = ""
    except RuntimeError as e:  # a CUDA kernel without a deterministic variant
        flipped, det_error = None, str(e).splitlines()[0]
    finally:
        torch.use_deterministic_algorithms(was_det)
    seed_globals(cfg.seed)
    ref_times, ref_mem = _reference_fedavg(engine, rounds)
    if flipped is None:
        det_line = f"not runnable with the mode {'off' if was_det else 'on'}: {det_error}"
        det_ratio = float("nan")
    else:
        det_on, det_off = (_median(ref_times), _median(flipped)) if was_det else (_median(flipped), _median(ref_times))
        det_line, det_ratio = f"{det_on:.3f} vs {det_off:.3f} s / round ({det_on / det_off:.2f}x)", det_on / det_off
    record = Record.from_dict(engine.run(resume=False))
    ours = _median(record.curves["seconds"])
    ref = _median(ref_times)
    rows = [
        ["FedAvg-Zero (harness: engine + ledger + audit)", f"{ours:.3f}", f"{record.peak_memory_mb:.0f}"],
        ["FedAvg reference (bare PyTorch loop)", f"{ref:.3f}", f"{ref_mem:.0f}"],
        ["ratio harness / reference", f"{ours / ref:.2f}x", f"{record.peak_memory_mb / ref_mem:.2f}x"],
    ]
    print(f"bench: synthetic graph {num_nodes} nodes, {num_clients} clients, hidden {cfg.model.hidden}, "
          f"{cfg.train.local_epochs} local epochs, device {engine.device}, torch threads {torch.get_num_threads()}; "
          f"artifact build {build_s:.1f}s; median of {max(rounds - 1, 1)} rounds")
    print(tabulate(rows, headers=["run", "s / round (median)", "peak memory (MiB)"], tablefmt="github"))
    print(f"train.deterministic cost (reference loop, torch.use_deterministic_algorithms on vs off): {det_line}")
    stages = harness_stages(record)
    print("harness round by stage (median s over the same rounds): " + ", ".join(f"{k} {v:.4f}" for k, v in stages.items()))
    return {"seconds_per_round": ours, "stages": stages, "reference_seconds_per_round": ref, "peak_memory_mb": record.peak_memory_mb,
            "reference_peak_memory_mb": ref_mem, "bytes_per_round": record.bytes_per_round,
            "deterministic_time_ratio": det_ratio}


# --------------------------------------------------------------------------- bench kg: the wiring
# (this verb module may import the data and algorithm layers; the measuring lives in the
# core module benchmark/bench_kg.py, which does not)


def load_bench_kg(root: str | None = None) -> KGData:
    """Full FB15K-237 from the data root if present, else the embedded subset, else a synthetic KG.

    Only a file that is nowhere falls back, and only when no ``root`` was named: a named root
    that does not exist or lacks the file, or a damaged copy, is a DataError (one line), not a
    silent benchmark of other data.
    """
    from benchmark.errors import BenchmarkError

    path = _full_fb15k237(root)
    if path is not None:
        from data_prep.kg.fb15k237 import build_vocab, read_triples_archive, to_id_tensor

        triples = read_triples_archive(path)
        ents, rels = build_vocab(triples)
        eid, rid = {e: i for i, e in enumerate(ents)}, {r: i for i, r in enumerate(rels)}
        sp = {s: to_id_tensor(rows, eid, rid) for s, rows in triples.items()}
        return KGData(f"FB15K-237 (full, {path})", len(ents), len(rels), sp["train"], sp["valid"], sp["test"])
    try:
        from data_prep.kg.fb15k237_small import load_fb15k237_small

        d = load_fb15k237_small()
        return KGData("FB15K-237 embedded subset (full data not found)", d.num_entities, d.num_relations,
                      d.train, d.valid, d.test)
    except BenchmarkError:
        from data_prep.kg.synthetic import make_synthetic_kg

        d = make_synthetic_kg()
        return KGData("synthetic KG (no FB15K-237 found)", d.num_entities, d.num_relations, d.train, d.valid, d.test)


def _full_fb15k237(root: str | None) -> Path | None:
    """Path of the full archive; None when it is in no searched place and no root was named."""
    from data_prep.kg.fb15k237 import DATASET_DIR, locate
    from data_prep.datasets.sources import search_places

    from benchmark.errors import DataError

    name = "FB15k-237.tar.gz"
    if root is not None and not Path(root).expanduser().is_dir():
        state = "is not a directory" if Path(root).expanduser().exists() else "does not exist"
        raise DataError(f"bench kg --data-root {root}: {state}")
    places = search_places(root)  # $FEDMM_DATA_ROOT set but no directory: DataError naming it
    if root is None and not any((p / DATASET_DIR / name).exists() or (p / name).exists() for p in places):
        return None
    return locate(name, root)  # named root without the file, or a damaged copy: DataError naming it


def kg_harness_setup(data: KGData, sizes: KGSizes, device: torch.device):  # type: ignore[no-untyped-def]
    """An S-Ind algorithm, its one client (every entity and relation), model and optimizer,
    built the way the engine builds them."""
    from baselines.kg.s_ind import SInd
    from benchmark.algorithm import AlgoContext
    from benchmark.config import build_run_config
    from benchmark.tasks.kg_completion import KGCompletion
    from data_prep.kg.federation import make_kg_client

    run = build_run_config({"seed": sizes.seed, "algorithm": {"name": "s_ind"}, "train": {"lr": sizes.lr, "local_epochs": 1},
                            "task": {"name": "kg_completion"}}, validate_components=False)
    task = KGCompletion(KGCompletion.Config(dim=sizes.dim, gamma=sizes.gamma, num_negatives=sizes.negatives,
                                            batch_size=sizes.batch, eval_batch=sizes.eval_batch))
    ctx = AlgoContext(run=run, task=task, modalities=[], feature_dims={}, num_classes=0, num_clients=1, client_ids=[0],
                      num_global_nodes=data.num_entities, device=device, seed=sizes.seed)
    algo = SInd(None, ctx)
    client = make_kg_client(0, torch.arange(data.num_entities), torch.arange(data.num_relations),
                            (data.train, data.valid, data.test), {}, torch.zeros(data.num_entities, 0)).to(device)
    model = algo.new_model(client)
    opt = algo.optimizer(model, {})
    return algo, task, client, model, opt


def run_bench_kg(device: str = "auto", sizes: KGSizes | None = None, root: str | None = None) -> dict:
    """``bench kg``: load the KG, build the engine's S-Ind client on the device, measure."""
    sizes = sizes or KGSizes()
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
    data = load_bench_kg(root)
    if sizes.eval_limit > 0:
        data.test = data.test[:sizes.eval_limit]
    return bench_kg(data, kg_harness_setup(data, sizes, dev), sizes, dev)
