"""Checkpoints: no pickle, nothing in them runs code or imports, bad ones are moved aside, RNG states stay on CPU."""

from __future__ import annotations

import json
import math
import os
import pathlib
import pickle
import random
import sys
from collections import defaultdict

import numpy as np
import pytest
import torch

import devices
from benchmark import checkpoint, state_codec
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


def _global_pickle(module: str, name: str, arg: str) -> bytes:
    """A protocol-2 pickle that calls ``module.name(arg)`` when loaded (the GLOBAL + REDUCE
    exploit the old allowlist let through for ``benchmark.results.subprocess.Popen``)."""
    return (b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n"
            + pickle.dumps((arg,), protocol=2)[2:-1] + b"R.")


def _bad_files(tmp_path):
    return sorted(p.name for p in (tmp_path / "ckpt").iterdir() if ".bad-" in p.name)


def _craft(path, tree, config_hash: str, version: int = checkpoint.VERSION) -> None:
    """A well-formed safetensors checkpoint whose JSON state is ``tree``."""
    from safetensors.torch import save

    text = (tree if isinstance(tree, str) else json.dumps(tree)).encode()
    meta = {"format": checkpoint.FORMAT, "version": str(version), "config_hash": config_hash}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(save({"__state__": torch.frombuffer(bytearray(text), dtype=torch.uint8)}, metadata=meta))


def _rng_tree():
    return state_codec.encode(checkpoint.rng_state())[0]


@pytest.mark.parametrize("payload", [_OpensFile, _RunsShell])
def test_a_pickled_checkpoint_is_never_unpickled(tiny_fed, tmp_path, capsys, payload):
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
    assert len(err) == 1 and str(path) in err[0] and "not a safetensors file" in err[0]
    assert rec["metrics"] == fresh["metrics"] and rec["curves"]["round"] == list(range(6))
    assert len(_bad_files(tmp_path)) == 1 and not path.exists()


@pytest.mark.parametrize(("module", "name"), [("benchmark.results.subprocess", "Popen"), ("typing.types", "FunctionType"),
                                              ("numpy.f2py.__main__", "main"), ("posix", "system")])
def test_the_old_allowlist_exploits_run_and_import_nothing(tmp_path, capsys, module, name):
    """The three exploits found against the pickle allowlist (and a plain os.system), as
    pickles at the checkpoint path: the file is never unpickled, nothing is imported."""
    marker = tmp_path / "pwned"
    path = tmp_path / "ckpt" / f"h{checkpoint.SUFFIX}"
    path.parent.mkdir()
    path.write_bytes(_global_pickle(module, name, f"touch {marker}"))
    import safetensors.torch  # noqa: F401 - the loader's own reader, imported lazily: not what the file names
    modules = set(sys.modules)
    assert checkpoint.load(path, "h") is None
    assert set(sys.modules) == modules and not marker.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a safetensors file" in err[0] and str(path) in err[0]
    assert len(_bad_files(tmp_path)) == 1 and not path.exists()


@pytest.mark.parametrize("node", [
    {"$obj": "subprocess:Popen", "$id": 0, "attrs": {"args": "id"}},
    {"$obj": "benchmark.results.subprocess.Popen", "$id": 0, "attrs": {}},
    {"$obj": "benchmark.results:subprocess.Popen", "$id": 0, "attrs": {}},
    {"$class": "typing.types:FunctionType"},
    {"$class": "types:CodeType"},
    {"$obj": "numpy.f2py.__main__:main", "$id": 0, "attrs": {}},
    {"$obj": "builtins:eval", "$id": 0, "attrs": {}},
    {"$dict": "defaultdict", "factory": "os.system", "$id": 0, "items": []},
    {"$enum": "os:system", "name": "x"},
])
def test_a_state_naming_a_class_outside_the_table_is_refused_without_import(tmp_path, capsys, node):
    """The same exploits written as JSON state: the decoder only looks names up in the
    code's own table, so nothing is imported or built, and the file is moved aside."""
    path = tmp_path / "ckpt" / f"h{checkpoint.SUFFIX}"
    _craft(path, {"$dict": "dict", "$id": 999, "items": [["rng", _rng_tree()], ["sim", _renumber(node, 1000)]]}, "h")
    modules = set(sys.modules)
    assert checkpoint.load(path, "h") is None
    assert set(sys.modules) == modules
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and ("may not build" in err[0] or "not allowed" in err[0])
    assert len(_bad_files(tmp_path)) == 1 and not path.exists()


def _renumber(node: dict, n: int) -> dict:
    return {k: (n if k == "$id" else v) for k, v in node.items()}


def test_a_checkpoint_of_another_algorithm_is_refused(tiny_fed, tmp_path, capsys):
    """A file may only hold this run's algorithm class: the engine calls its hooks."""
    other = Engine(_cfg(tmp_path, "fedprox", rounds=2), fed=tiny_fed)
    other.run()
    cfg = _cfg(tmp_path)
    engine = Engine(cfg, fed=tiny_fed)
    checkpoint.save(engine._checkpoint_path(), other.sim, cfg.hash(), other.anchors(other.sim.algo))
    capsys.readouterr()
    rec = engine.run()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "FedProx, not FedAvg" in err[0]
    assert rec["status"] == "ok" and len(_bad_files(tmp_path)) == 1


def test_state_codec_round_trips_containers_tensors_and_identity():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    obj = {"m": model, "opt": opt, 3: (1.5, float("inf"), None), "s": {1, 2}, "b": b"\x00\xff",
           "dtype": torch.float16, "size": torch.Size([2, 3]), "c": torch.randn(2, dtype=torch.complex64),
           "sp": torch.eye(3).to_sparse(), "dd": defaultdict(list, {"a": [1]})}
    tree, tensors = state_codec.encode(obj)
    back = state_codec.decode(json.loads(json.dumps(tree)), tensors)
    assert state_codec.encode(back)[0] == tree
    params = list(back["m"].parameters())
    assert all(p in back["opt"].state for p in params) and back["opt"].param_groups[0]["params"] == params
    assert isinstance(params[0], torch.nn.Parameter) and params[0].requires_grad
    assert back[3][1] == math.inf and back["s"] == {1, 2} and back["dd"]["new"] == []
    assert torch.equal(back["sp"].to_dense(), torch.eye(3)) and torch.equal(back["c"], obj["c"])
    x = torch.randn(4, 3)
    assert torch.equal(back["m"](x), model(x))


def test_functions_and_foreign_objects_cannot_be_written(tmp_path, capsys):
    for bad in ({"f": lambda: 0}, {"p": pathlib.Path(".")}, {"d": defaultdict(lambda: 1)}):
        with pytest.raises(state_codec.StateError):
            state_codec.encode(bad)
    assert not checkpoint.save(tmp_path / "x", {"f": os.system}, "h")
    assert "checkpoint not written" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_pyg_layers_rebuild_the_inspector_their_class_builds():
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv

    for layer in (GCNConv(4, 3), SAGEConv(4, 3), GATConv(4, 3, heads=2)):
        back = state_codec.decode(*state_codec.encode(layer))
        assert back.inspector._signature_dict == layer.inspector._signature_dict
        x, ei = torch.randn(5, 4), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
        assert torch.equal(back(x, ei), layer(x, ei))


def test_a_deeply_nested_or_malformed_state_is_moved_aside(tmp_path, capsys):
    path = tmp_path / "ckpt" / f"h{checkpoint.SUFFIX}"
    deep = '{"$tuple":[' * 5000 + "1" + "]}" * 5000  # raw JSON text: deeper than the decoder goes
    for tree in (deep, [1, 2], {"$dict": "dict", "$id": 0, "items": [[{"$ref": 99}, 1]]}, {"$tensor": "t9", "$id": 0}):
        _craft(path, tree, "h")
        assert checkpoint.load(path, "h") is None
        assert not path.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all("moved to" in line for line in err)


def test_truncated_checkpoint_warns_and_starts_fresh(tiny_fed, tmp_path, capsys):
    fresh = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    engine = Engine(_cfg(tmp_path), fed=tiny_fed)
    engine.cfg.train.rounds = 3  # write a real checkpoint at round 2, then stop
    engine.run()
    path = tmp_path / "ckpt" / f"{_cfg(tmp_path).hash()}{checkpoint.SUFFIX}"
    checkpoint.save(path, engine.sim, _cfg(tmp_path).hash(), engine.anchors(engine.sim.algo))  # a valid checkpoint...
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # ...cut in half
    capsys.readouterr()
    rec = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0] and "unreadable" in err[0]
    assert rec["metrics"] == fresh["metrics"] and rec["curves"]["round"] == list(range(6))
    assert len(_bad_files(tmp_path)) == 1


def test_wrong_hash_or_version_or_foreign_file_is_moved_aside(tmp_path, capsys):
    from safetensors.torch import save_file

    path = tmp_path / "ckpt" / f"x{checkpoint.SUFFIX}"
    path.parent.mkdir()
    tree = {"$dict": "dict", "$id": 999, "items": [["rng", _rng_tree()], ["sim", None]]}
    cases = [
        (lambda: _craft(path, tree, "other"), "not 'mine'"),
        (lambda: _craft(path, tree, "mine", version=99), "format version '99'"),
        (lambda: save_file({"weights": torch.zeros(2)}, str(path)), "holds no FedMM-Bench state"),
    ]
    for write, why in cases:
        write()
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
    path = tmp_path / "ckpt" / f"{_cfg(tmp_path).hash()}{checkpoint.SUFFIX}"
    checkpoint.save(path, engine.sim, "0" * 16, engine.anchors(engine.sim.algo))  # a checkpoint of some other config, at this path
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
    path = tmp_path / "c.safetensors"
    torch.manual_seed(5)
    random.seed(5)
    np.random.seed(5)
    checkpoint.save(path, {"w": torch.ones(3)}, "h")
    expected = (torch.rand(4), random.random(), np.random.rand())
    sim, rng = checkpoint.read(path, "h", map_location="meta")
    assert sim["w"].device.type == "cpu"  # a CPU tensor stays on the CPU (only accelerator tensors move)...
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
    path = tmp_path / "c.safetensors"
    torch.manual_seed(11)
    if device.type == "cuda":
        torch.cuda.manual_seed_all(11)
    checkpoint.save(path, {"w": torch.ones(3, device=device)}, "h")
    expected = torch.rand(4)
    expected_cuda = torch.rand(4, device=device) if device.type == "cuda" else None
    sim = checkpoint.load(path, "h", map_location=device)  # would raise on a CUDA RNG tensor
    assert sim is not None and sim["w"].device.type == device.type
    assert torch.equal(torch.rand(4), expected)
    if expected_cuda is not None:
        assert torch.equal(torch.rand(4, device=device), expected_cuda)
