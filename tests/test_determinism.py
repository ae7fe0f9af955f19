"""train.deterministic: torch's deterministic mode, and records that say whether a run was
deterministic. On the test device (``pytest --device cuda`` on a GPU) the same seed twice
must give identical record metrics."""

from __future__ import annotations

import warnings

import pytest
import torch

from benchmark.config import build_run_config
from benchmark.determinism import DeterminismWatch, configure
from benchmark.engine import Engine


def test_watch_names_the_op_that_broke_determinism_and_passes_other_warnings_on():
    with pytest.warns(UserWarning, match="unrelated"):
        with DeterminismWatch(True) as watch:
            assert torch.are_deterministic_algorithms_enabled()
            x = torch.zeros(4)
            x.put_(torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))  # put_ has no deterministic kernel
            warnings.warn("unrelated")
    assert watch.summary() == {"requested": True, "deterministic": False, "nondeterministic_ops": ["put_"]}
    with DeterminismWatch(True) as clean:
        torch.ones(3).sum()
    assert clean.summary()["deterministic"] is True
    configure(False)
    assert not torch.are_deterministic_algorithms_enabled()
    with DeterminismWatch(False) as off:
        torch.ones(3).sum()
    assert off.summary() == {"requested": False, "deterministic": False, "nondeterministic_ops": []}
    configure(True)


def _graph_cfg(cache, algo: str, deterministic: bool = True):  # noqa: ANN202
    return build_run_config({
        "dataset": {"name": "synthetic", "num_nodes": 240},
        "partition": {"name": "louvain", "num_clients": 3},
        "missing": {"name": "node_level", "rate": 0.3},
        "algorithm": {"name": algo},
        "model": {"hidden": 16, "backbone": "gcn"},
        "train": {"rounds": 3, "local_epochs": 2, "lr": 0.01, "deterministic": deterministic},
        "output": {"cache_dir": str(cache), "checkpoint_dir": str(cache) + "/ckpt"},
    })


def _kg_cfg(cache, algo: str):  # noqa: ANN202
    return build_run_config({
        "dataset": {"name": "synthetic_kg", "num_entities": 120},
        "partition": {"name": "relation_id", "num_clients": 3},
        "missing": {"name": "kg_items", "rate": 0.5},
        "task": {"name": "kg_completion", "dim": 8, "num_negatives": 16, "batch_size": 64},
        "algorithm": {"name": algo, "imputer": "hide"},
        "train": {"rounds": 2, "local_epochs": 2, "lr": 0.05},
        "output": {"cache_dir": str(cache), "checkpoint_dir": str(cache) + "/ckpt"},
    })


@pytest.mark.parametrize("which", ["fedavg", "fedmpo", "fedgta", "mmfed3"])
def test_same_seed_twice_gives_identical_metrics_in_deterministic_mode(which, tmp_path):
    cfg = (lambda: _kg_cfg(tmp_path, which)) if which == "mmfed3" else (lambda: _graph_cfg(tmp_path, which))
    first, second = Engine(cfg()).run(), Engine(cfg()).run()
    assert first["status"] == second["status"] == "ok", first.get("error")
    assert first["metrics"] == second["metrics"]
    assert first["curves"]["val/" + ("mrr" if which == "mmfed3" else "accuracy")] == \
        second["curves"]["val/" + ("mrr" if which == "mmfed3" else "accuracy")]
    assert first["determinism"]["requested"] is True
    assert first["determinism"]["deterministic"] is (not first["determinism"]["nondeterministic_ops"])


def test_the_record_says_when_determinism_was_not_asked_for(tmp_path):
    rec = Engine(_graph_cfg(tmp_path, "fedavg", deterministic=False)).run()
    assert rec["status"] == "ok"
    assert rec["determinism"] == {"requested": False, "deterministic": False, "nondeterministic_ops": []}
    configure(True)
