"""Tiny run configs for tests that iterate the registry (one per track), shared so every
such test exercises the same small federations."""

from __future__ import annotations

from pathlib import Path

from benchmark.config import RunConfig, build_run_config


def tiny_config(algo: str, task: str, cache: Path | str, rounds: int = 2) -> RunConfig:
    """A two-round config of ``algo`` on ``task`` (KG, AMFL or graph track; three clients, four on AMFL)."""
    out = {"cache_dir": str(cache), "checkpoint_dir": str(cache) + "/ckpt"}
    if task == "kg_completion":
        return build_run_config({
            "dataset": {"name": "synthetic_kg", "num_entities": 120},
            "partition": {"name": "relation_id", "num_clients": 3},
            "missing": {"name": "kg_items", "rate": 0.5},
            "task": {"name": task, "dim": 8, "num_negatives": 16, "batch_size": 256},
            "algorithm": {"name": algo},
            "train": {"rounds": rounds, "local_epochs": 1, "lr": 0.05, "device": "auto"},
            "output": out,
        })
    if task == "amfl_cls":
        return build_run_config({
            "dataset": {"name": "av_digits"},
            "partition": {"name": "amfl_population", "num_clients": 4, "samples_mean": 24, "samples_std": 0.0},
            "missing": {"name": "none"},
            "task": {"name": task},
            "algorithm": {"name": algo},
            "train": {"rounds": rounds, "local_epochs": 1, "lr": 0.01, "device": "auto"},
            "output": out,
        })
    return build_run_config({
        "dataset": {"name": "synthetic", "num_nodes": 240},
        "partition": {"name": "louvain", "num_clients": 3},
        "missing": {"name": "node_level", "rate": 0.3},
        "task": {"name": task},
        "algorithm": {"name": algo},
        "model": {"hidden": 16},
        "train": {"rounds": rounds, "local_epochs": 1, "lr": 0.01, "device": "auto"},
        "output": out,
    })


def crash_and_resume(cfg: RunConfig, fed, monkeypatch, crash_round: int = 4) -> dict:
    """Run ``cfg`` until its aggregation is interrupted (Ctrl-C) at ``crash_round``, then run it
    again from its checkpoint; returns the resumed run's record."""
    import pytest

    from benchmark.engine import Engine

    engine = Engine(cfg, fed=fed)
    original = engine.algo_cls.aggregate

    def crash(self, uploads, rnd):
        if rnd == crash_round:
            raise KeyboardInterrupt
        return original(self, uploads, rnd)

    monkeypatch.setattr(engine.algo_cls, "aggregate", crash)
    with pytest.raises(KeyboardInterrupt):
        engine.run()
    monkeypatch.setattr(engine.algo_cls, "aggregate", original)
    return Engine(cfg, fed=fed).run()
