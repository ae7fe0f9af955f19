"""Tiny run configs for tests that iterate the registry (one per track), shared so every
such test exercises the same small federations."""

from __future__ import annotations

from pathlib import Path

from benchmark.config import RunConfig, build_run_config


def tiny_config(algo: str, task: str, cache: Path | str, rounds: int = 2) -> RunConfig:
    """A two-round, three-client config of ``algo`` on ``task`` (KG or graph track)."""
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
