"""The AMFL population where sharing helps, shared by the beats-Local tests of every AMFL
baseline: eight clients of one label space (all 10 digits in global order) with one training
sample per class, image + signal with concatenation, MLP encoders of depth 1 or 2 and width
32 or 64. Cached, so Local's reference runs once per (rounds, lr)."""

from __future__ import annotations

import functools

from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.registry import load_plugins

load_plugins()


@functools.lru_cache(maxsize=None)
def sharing_acc(algo: str, rounds: int, lr: float, options: tuple[tuple[str, object], ...] = ()) -> float:
    """Test ACC (seed 0) of ``algo`` (with ``options``, pairs of algorithm settings) on the
    population; the run must pass the ledger audit."""
    cfg = build_run_config({
        "dataset": {"name": "av_digits"}, "task": {"name": "amfl_cls"}, "missing": {"name": "none"},
        "partition": {"name": "amfl_population", "num_clients": 8, "samples_mean": 30, "samples_std": 0.0,
                      "classes_per_client": 10, "label_order": "global", "modality_sets": ["image+signal"],
                      "fusions": ["concat"], "encoders": ["mlp"], "depths": [1, 2]},
        "algorithm": {"name": algo, **dict(options)},
        "train": {"rounds": rounds, "eval_every": 5, "local_epochs": 5, "lr": lr, "device": "cpu"}})
    rec = Engine(cfg).run()
    assert rec["status"] == "ok" and rec["comm"]["violations"] == []
    return rec["metrics"]["test/accuracy"]
