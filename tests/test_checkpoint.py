"""Checkpoints: nothing in them runs code, bad ones are moved aside, RNG states stay on CPU."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
import torch

import devices
from benchmark import checkpoint
from benchmark.config import build_run_config
from benchmark.engine import Engine


def _cfg(tmp_path, algorithm: str = "fedavg", **train):
    t = {"rounds": 6, "lr": 0.01, "checkpoint_every": 2, **train}
    return build_run_config({"algorithm": {"name": algorithm}, "model": {"hidden": 16}, "train": t,
                             "output": {"checkpoint_dir": str(tmp_path / "ckpt")}})


class _OpensFile:
    """Unpickling this calls open(path, 'w'), creating the file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


class _RunsShell:
    """Unpickling this runs a shell command that creates the file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _bad_files(tmp_path):
    return sorted(p.name for p in (tmp_path / "ckpt").iterdir() if ".bad-" in p.name)


@pytest.mark.parametrize("payload", [_OpensFile, _RunsShell])
def test_malicious_checkpoint_is_not_executed(tiny_fed, tmp_path, capsys, payload):
    fresh = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    marker = tmp_path / "pwned"
    cfg = _cfg(tmp_path)
    engine = Engine(cfg, fed=tiny_fed)
    path = engine._checkpoint_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"format": checkpoint.FORMAT, "version": checkpoint.VERSION, "config_hash": cfg.hash(),
                "rng": checkpoint.rng_state(), "sim": payload(str(marker))}, path)
    capsys.readouterr()
    rec = engine.run()
    assert not marker.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "may not load" in err[0]
    assert rec["metrics"] == fresh["metrics"] and rec["curves"]["round"] == list(range(6))
    assert len(_bad_files(tmp_path)) == 1 and not path.exists()


def test_admissible_refuses_code_and_accepts_state_classes():
    for name in ("os.system", "posix.system", "builtins.eval", "builtins.open", "builtins.exec",
                 "subprocess.Popen", "torch.load", "torch.serialization.load", "numpy.load",
                 "typing.get_type_hints", "benchmark.engine.run_config", "antigravity.fly"):
        assert not checkpoint.admissible(name), name
    for name in ("benchmark.engine.SimState", "torch.nn.modules.linear.Linear", "torch.optim.adam.Adam",
                 "numpy.ndarray", "numpy.dtype", "torch_geometric.nn.conv.gcn_conv.GCNConv",
                 "builtins.int", "typing.Union"):
        assert checkpoint.admissible(name), name


def test_truncated_checkpoint_warns_and_starts_fresh(tiny_fed, tmp_path, capsys):
    fresh = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    engine = Engine(_cfg(tmp_path), fed=tiny_fed)
    engine.cfg.train.rounds = 3  # write a real checkpoint at round 2, then stop
    engine.run()
    path = tmp_path / "ckpt" / f"{_cfg(tmp_path).hash()}.pt"
    checkpoint.save(path, engine.sim, _cfg(tmp_path).hash())  # a valid checkpoint of this config...
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # ...cut in half
    capsys.readouterr()
    rec = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "unreadable" in err[0]
    assert rec["metrics"] == fresh["metrics"] and rec["curves"]["round"] == list(range(6))
    assert len(_bad_files(tmp_path)) == 1


def test_wrong_hash_or_version_or_foreign_file_is_moved_aside(tmp_path, capsys):
    path = tmp_path / "ckpt" / "x.pt"
    path.parent.mkdir()
    cases = [
        ({"format": checkpoint.FORMAT, "version": checkpoint.VERSION, "config_hash": "other",
          "rng": checkpoint.rng_state(), "sim": {}}, "not 'mine'"),
        ({"format": checkpoint.FORMAT, "version": 99, "config_hash": "mine",
          "rng": checkpoint.rng_state(), "sim": {}}, "format version 99"),
        ({"weights": torch.zeros(2)}, "not a FedMM-Bench checkpoint"),
    ]
    for blob, why in cases:
        torch.save(blob, path)
        capsys.readouterr()
        assert checkpoint.load(path, "mine") is None
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and why in err[0] and str(path) in err[0]
        assert not path.exists()
    path.write_bytes(b"not a zip file at all")
    assert checkpoint.load(path, "mine") is None
    assert len(_bad_files(tmp_path)) == 4


def test_wrong_config_hash_checkpoint_is_not_resumed(tiny_fed, tmp_path, capsys):
    fresh = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    engine = Engine(_cfg(tmp_path), fed=tiny_fed)
    engine.cfg.train.rounds = 3
    engine.run()
    path = tmp_path / "ckpt" / f"{_cfg(tmp_path).hash()}.pt"
    checkpoint.save(path, engine.sim, "0" * 16)  # a checkpoint of some other config, at this path
    capsys.readouterr()
    rec = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    assert "was written for config" in capsys.readouterr().err
    assert rec["metrics"] == fresh["metrics"] and len(_bad_files(tmp_path)) == 1


def _kill_in_round(engine: Engine, rnd_to_kill: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run ``engine`` until round ``rnd_to_kill`` starts, then stop it as a kill would
    (its checkpoints stay behind); the algorithm class is left as it was."""
    original = engine.algo_cls.client_update

    def killed(self, client, state, received, rnd):  # noqa: ANN001, ANN202
        if rnd == rnd_to_kill:
            raise KeyboardInterrupt
        return original(self, client, state, received, rnd)

    monkeypatch.setattr(engine.algo_cls, "client_update", killed)
    with pytest.raises(KeyboardInterrupt):
        engine.run()
    monkeypatch.setattr(engine.algo_cls, "client_update", original)


def test_a_killed_kg_run_resumes_to_identical_metrics(tmp_path, monkeypatch, capsys):
    """The KG track too (dual views, imputer, per-round generators): MMFeD3-HidE killed in round 2."""
    def cfg():  # noqa: ANN202
        return build_run_config({
            "dataset": {"name": "synthetic_kg", "num_entities": 120},
            "partition": {"name": "relation_id", "num_clients": 3},
            "missing": {"name": "kg_items", "rate": 0.5},
            "task": {"name": "kg_completion", "dim": 8, "num_negatives": 16, "batch_size": 64},
            "algorithm": {"name": "mmfed3", "imputer": "hide"},
            "train": {"rounds": 4, "local_epochs": 1, "lr": 0.05, "checkpoint_every": 1},
            "output": {"cache_dir": str(tmp_path / "cache"), "checkpoint_dir": str(tmp_path / "ckpt")},
        })
    full = Engine(cfg()).run()
    _kill_in_round(Engine(cfg()), 2, monkeypatch)
    capsys.readouterr()
    resumed = Engine(cfg()).run()
    assert capsys.readouterr().err == ""
    assert resumed["metrics"] == full["metrics"] and resumed["curves"]["val/mrr"] == full["curves"]["val/mrr"]


@pytest.mark.parametrize("algorithm", ["fedprox", "local"])
def test_killed_run_resumes_to_identical_metrics(tiny_fed, tmp_path, monkeypatch, capsys, algorithm):
    full = Engine(_cfg(tmp_path, algorithm, checkpoint_every=1), fed=tiny_fed).run()
    engine = Engine(_cfg(tmp_path, algorithm, checkpoint_every=1), fed=tiny_fed)
    _kill_in_round(engine, 3, monkeypatch)
    assert engine._checkpoint_path().exists()
    capsys.readouterr()
    resumed = Engine(_cfg(tmp_path, algorithm, checkpoint_every=1), fed=tiny_fed).run()
    assert capsys.readouterr().err == ""  # resumed, nothing moved aside
    assert resumed["metrics"] == full["metrics"] and resumed["per_client"] == full["per_client"]
    assert resumed["curves"]["round"] == list(range(6))


def test_rng_states_restore_from_cpu_tensors_whatever_the_map_location(tmp_path):
    path = tmp_path / "c.pt"
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    checkpoint.save(path, {"w": torch.ones(3)}, "h")
    expected = (torch.rand(4), random.random(), np.random.rand())
    sim, rng = checkpoint.read(path, "h", map_location="meta")
    assert sim["w"].device.type == "meta"  # the simulation follows map_location...
    tensors = checkpoint.rng_tensors(rng)
    assert tensors["torch"].device.type == "cpu" and tensors["torch"].dtype == torch.uint8  # ...RNGs do not
    torch.manual_seed(0)
    checkpoint.set_rng_state(rng)
    assert torch.equal(torch.rand(4), expected[0])
    assert random.random() == expected[1] and np.random.rand() == expected[2]


def test_rng_states_survive_loading_onto_the_test_device(tmp_path):
    device = devices.test_device()
    if device.type == "cuda" and not torch.cuda.is_available():
        pytest.skip("FEDMM_TEST_DEVICE=cuda but CUDA is not available")
    path = tmp_path / "c.pt"
    torch.manual_seed(11)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(11)
    checkpoint.save(path, {"w": torch.ones(3, device=device)}, "h")
    expected = torch.rand(4)
    expected_cuda = torch.rand(4, device=device) if device.type == "cuda" else None
    assert checkpoint.load(path, "h", map_location=device) is not None  # would raise on a CUDA RNG tensor
    assert torch.equal(torch.rand(4), expected)
    if expected_cuda is not None:
        assert torch.equal(torch.rand(4, device=device), expected_cuda)
