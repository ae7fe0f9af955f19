"""`bench`: seconds per round and peak memory of FedAvg-Zero on a large synthetic graph.

The harness run is measured side by side with a reference: a bare PyTorch FedAvg loop over
the same clients and model, with no engine, ledger or audit. Their ratio is the harness's
overhead. Medians over rounds; round 0 (warm-up) excluded when there are more rounds.
The reference loop also runs with ``torch.use_deterministic_algorithms`` on and off: the
cost of ``train.deterministic`` (about nothing on the CPU; deterministic CUDA kernels, such
as sorted scatter-adds, can be slower). The KG track has its own bench: ``benchmark.bench_kg``.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch
from tabulate import tabulate

from benchmark.config import load_config
from benchmark.engine import Engine, seed_everything
from benchmark.memory import PeakMemory


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
            times.append(time.perf_counter() - t0)
    return times, mem.peak_mb


def _median(xs: list[float]) -> float:
    return statistics.median(xs[1:] if len(xs) > 1 else xs)


def bench_fedavg(num_nodes: int = 20000, num_clients: int = 10, rounds: int = 5, device: str = "auto") -> dict:
    cfg = load_config(None, [
        "dataset.name=synthetic", f"dataset.num_nodes={num_nodes}", f"partition.num_clients={num_clients}",
        "partition.name=dirichlet_label", "missing.rate=0.3", "algorithm.name=fedavg", f"train.rounds={rounds}",
        f"train.eval_every={rounds}", f"train.device={device}",
    ])
    t0 = time.perf_counter()
    engine = Engine(cfg)
    build_s = time.perf_counter() - t0
    seed_everything(cfg.seed)
    was_det = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(not was_det)
    try:
        flipped: list[float] | None = _reference_fedavg(engine, rounds)[0]
        det_error = ""
    except RuntimeError as e:  # a CUDA kernel without a deterministic variant
        flipped, det_error = None, str(e).splitlines()[0]
    finally:
        torch.use_deterministic_algorithms(was_det)
    seed_everything(cfg.seed)
    ref_times, ref_mem = _reference_fedavg(engine, rounds)
    if flipped is None:
        det_line = f"not runnable with the mode {'off' if was_det else 'on'}: {det_error}"
        det_ratio = float("nan")
    else:
        det_on, det_off = (_median(ref_times), _median(flipped)) if was_det else (_median(flipped), _median(ref_times))
        det_line, det_ratio = f"{det_on:.3f} vs {det_off:.3f} s / round ({det_on / det_off:.2f}x)", det_on / det_off
    record = engine.run(resume=False)
    ours = _median(record["curves"]["seconds"])
    ref = _median(ref_times)
    rows = [
        ["FedAvg-Zero (harness: engine + ledger + audit)", f"{ours:.3f}", f"{record['peak_memory_mb']:.0f}"],
        ["FedAvg reference (bare PyTorch loop)", f"{ref:.3f}", f"{ref_mem:.0f}"],
        ["ratio harness / reference", f"{ours / ref:.2f}x", f"{record['peak_memory_mb'] / ref_mem:.2f}x"],
    ]
    print(f"bench: synthetic graph {num_nodes} nodes, {num_clients} clients, hidden {cfg.model.hidden}, "
          f"{cfg.train.local_epochs} local epochs, device {engine.device}, torch threads {torch.get_num_threads()}; "
          f"artifact build {build_s:.1f}s; median of {max(rounds - 1, 1)} rounds")
    print(tabulate(rows, headers=["run", "s / round (median)", "peak memory (MiB)"], tablefmt="github"))
    print(f"train.deterministic cost (reference loop, torch.use_deterministic_algorithms on vs off): {det_line}")
    return {"seconds_per_round": ours, "reference_seconds_per_round": ref, "peak_memory_mb": record["peak_memory_mb"],
            "reference_peak_memory_mb": ref_mem, "bytes_per_round": record["bytes_per_round"],
            "deterministic_time_ratio": det_ratio}
