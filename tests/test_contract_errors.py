"""Contract errors (benchmark/contracts.py): an algorithm hook that returns the wrong type, or
a dataset loader that returns a malformed graph, is one line naming the component, the hook
and what was expected, not an AttributeError deep in the ledger or an IndexError in the
builder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from baselines.basic.fedavg import FedAvg
from benchmark import registry as R
from fedmm_bench.cli import main
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.errors import BenchmarkError, ContractError
from benchmark.federation import GraphDataset
from data_prep.build import build_federation

ALGO = "_contract_test"
LOADER = "_contract_graph_test"


# --------------------------------------------------------------------------- algorithm hooks


def _returns(hook: str, value: Any) -> type:
    """A FedAvg whose ``hook`` returns ``value`` (called as a factory when callable)."""

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        return value(*args) if callable(value) else value

    attrs: dict[str, Any] = {hook: broken, "__doc__": f"FedAvg whose {hook} is broken (test only)."}
    if hook in ("setup_upload", "setup_aggregate"):
        attrs["has_setup"] = True
    return type("BrokenAvg", (FedAvg,), attrs)


@pytest.fixture
def register():
    """Register a temporary algorithm under ALGO; always unregistered afterwards."""
    R.load_plugins()

    def add(cls: type) -> type:
        R.ALGORITHMS.register(ALGO)(cls)
        return cls

    try:
        yield add
    finally:
        R.ALGORITHMS.unregister(ALGO)
    assert ALGO not in R.ALGORITHMS


def _cfg(tmp_path: Path) -> Any:
    return build_run_config({"algorithm": {"name": ALGO}, "model": {"hidden": 8}, "train": {"rounds": 2},
                             "output": {"checkpoint_dir": str(tmp_path / "ckpt")}})


def test_the_readme_skeleton_returning_none_names_the_hook(register, tiny_fed, tmp_path: Path) -> None:
    register(_returns("client_update", None))
    with pytest.raises(ContractError) as e:
        Engine(_cfg(tmp_path), fed=tiny_fed).run()
    assert str(e.value) == (f"algorithm '{ALGO}' (class BrokenAvg): client_update returned None; "
                            "expected the upload: a dict of name -> tensor")
    assert isinstance(e.value, BenchmarkError)  # the CLI prints it as one line, exit 2


@pytest.mark.parametrize("hook, value, got", [
    ("client_update", [torch.zeros(2)], "a list"),
    ("client_update", {"w": np.zeros(2)}, "a dict whose entry 'w' is a ndarray, not a tensor"),
    ("client_update", {0: torch.zeros(2)}, "a dict with the key 0 (an int, not a name)"),
    ("init_server", None, "None"),
    ("aggregate", (), "a tuple"),
    ("aggregate", {0: {"w": torch.zeros(1)}, 1: None}, "for client 1 None"),
    ("aggregate", {"w": 1.0}, "a dict whose entry 'w' is a float, not a tensor"),
    ("evaluate", None, "None"),
    ("evaluate", {"val": 0.5, "test": 0.5}, "a dict whose split 'val' is a float, not a dict"),
    ("setup_upload", None, "None"),
    ("setup_aggregate", lambda uploads: {cid: {} for cid in list(uploads)[1:]}, "no reply for client 0"),
])
def test_a_hook_returning_the_wrong_type_is_one_line(hook: str, value: Any, got: str, register, tiny_fed,
                                                     tmp_path: Path) -> None:
    register(_returns(hook, value))
    with pytest.raises(ContractError) as e:
        Engine(_cfg(tmp_path), fed=tiny_fed).run()
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"algorithm '{ALGO}' (class BrokenAvg): {hook} returned {got}; expected ")


def test_through_the_cli_it_is_one_line_and_exit_2(register, tmp_path: Path, capsys, monkeypatch) -> None:
    register(_returns("client_update", None))
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--set", f"algorithm.name={ALGO}", "--set", "dataset.num_nodes=120",
                 "--set", "partition.num_clients=2", "--set", "model.hidden=8", "--set", "train.rounds=1",
                 "--set", f"output.cache_dir={tmp_path / 'cache'}"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith(("error", "Traceback"))]
    assert code == 2 and lines == [f"error: algorithm '{ALGO}' (class BrokenAvg): client_update returned None; "
                                   "expected the upload: a dict of name -> tensor"]


def test_well_behaved_hooks_pass(register, tiny_fed, tmp_path: Path) -> None:
    register(type("FineAvg", (FedAvg,), {"__doc__": "Plain FedAvg (test only)."}))
    assert Engine(_cfg(tmp_path), fed=tiny_fed).run()["status"] == "ok"


# --------------------------------------------------------------------------- dataset loaders


N = 40


def _graph(case: str) -> Any:
    """A small valid graph, broken the way ``case`` says."""
    g = torch.Generator().manual_seed(0)
    src = torch.arange(N)
    ring = torch.stack([src, (src + 1) % N])
    kw: dict[str, Any] = dict(
        name="contract", features={"text": torch.randn(N, 4, generator=g), "image": torch.randn(N, 3, generator=g)},
        edge_index=torch.cat([ring, ring.flip(0)], 1), y=torch.arange(N) % 2, num_classes=2)
    if case == "not_a_graph":
        return None
    if case == "no_features":
        kw["features"] = {}
        kw["available"] = torch.ones(N, 0, dtype=torch.bool)
    if case == "rows_differ":
        kw["features"]["image"] = torch.randn(N - 1, 3)
    if case == "flat_features":
        kw["features"]["image"] = torch.randn(N)
    if case == "int_features":
        kw["features"]["image"] = torch.ones(N, 3, dtype=torch.long)
    if case == "edges_not_2xE":
        kw["edge_index"] = torch.zeros(3, 5, dtype=torch.long)
    if case == "edges_transposed":
        kw["edge_index"] = kw["edge_index"].t().contiguous()
    if case == "edges_float":
        kw["edge_index"] = kw["edge_index"].float()
    if case == "edges_out_of_range":
        kw["edge_index"] = torch.cat([kw["edge_index"], torch.tensor([[0], [N]])], 1)
    if case == "edges_negative":
        kw["edge_index"] = torch.cat([kw["edge_index"], torch.tensor([[-1], [0]])], 1)
    if case == "labels_short":
        kw["y"] = torch.arange(N - 3) % 2
    if case == "masks_wrong_shape":
        kw["available"] = torch.ones(N, 1, dtype=torch.bool)
    if case == "split_mask_short":
        kw["train_mask"] = torch.ones(N - 1, dtype=torch.bool)
    ds = GraphDataset(**kw)
    if case == "masks_missing":
        ds.available = None  # a loader that clears the natural availability
    return ds


CASES = {
    "not_a_graph": "returned None; expected a GraphDataset",
    "no_features": "features is an empty dict; expected a dict of modality -> [N, d] float tensor",
    "rows_differ": f"features['image'] has {N - 1} rows but features['text'] has {N}",
    "flat_features": f"features['image'] is ({N},); expected a [N, d] float tensor",
    "int_features": "features['image'] has dtype torch.int64; expected a float tensor",
    "edges_not_2xE": "edge_index is (3, 5); expected a [2, E] long tensor",
    "edges_transposed": f"edge_index is ({2 * N}, 2); expected a [2, E] long tensor",
    "edges_float": "edge_index has dtype torch.float32; expected torch.int64 (long)",
    "edges_out_of_range": f"edge_index holds node id {N}, outside [0, {N}) ({N} nodes)",
    "edges_negative": f"edge_index holds node id -1, outside [0, {N})",
    "labels_short": f"y (labels) is of shape ({N - 3},); expected None or a [{N}] tensor",
    "masks_missing": f"available (the natural modality masks) is missing; expected a [{N}, 2] bool tensor",
    "masks_wrong_shape": f"available (the natural modality masks) is of shape ({N}, 1); expected a [{N}, 2] bool",
    "split_mask_short": f"train_mask is of shape ({N - 1},); expected None or a [{N}] bool tensor",
}


@dataclass
class _LoaderConfig:
    case: str = field(default="ok", metadata={"help": "how the graph is broken (test only)",
                                              "choices": ("ok", *CASES)})


class BadGraph:
    """A loader whose graph is malformed on purpose (test only)."""

    Config = _LoaderConfig

    def __init__(self, cfg: _LoaderConfig) -> None:
        self.cfg = cfg

    def load(self, root: Path | None = None) -> Any:
        return _graph(self.cfg.case)


@pytest.fixture
def loader():
    R.load_plugins()
    R.DATASETS.register(LOADER)(BadGraph)
    try:
        yield
    finally:
        R.DATASETS.unregister(LOADER)
    assert LOADER not in R.DATASETS


def _data_cfg(tmp_path: Path, case: str) -> Any:
    return build_run_config({"dataset": {"name": LOADER, "case": case, "normalize": "none"},
                             "partition": {"name": "iid", "num_clients": 2}, "missing": {"name": "none"},
                             "output": {"cache_dir": str(tmp_path / "cache")}})


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_malformed_graph_is_one_line_naming_the_loader(case: str, loader, tmp_path: Path) -> None:
    with pytest.raises(ContractError) as e:
        build_federation(_data_cfg(tmp_path, case))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"dataset '{LOADER}' (BadGraph.load) returned ")
    assert CASES[case] in msg
    assert not (tmp_path / "cache").exists()  # refused before anything is written


def test_a_well_formed_graph_passes(loader, tmp_path: Path) -> None:
    fed = build_federation(_data_cfg(tmp_path, "ok"))
    assert fed.num_global_nodes == N and len(fed.clients) == 2
