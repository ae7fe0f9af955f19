"""Experiment trackers (benchmark/trackers): what TensorBoard, MLflow and the CSV files hold is
what the record holds, round by round; off by default; never in a hash; a failing tracker
costs a warning, not the record; every tracker is closed when the run raises."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import pytest

from benchmark import registry as R
from fedmm_bench.cli import main
from benchmark.config import RunConfig, build_run_config, load_config
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from benchmark.results import protocol_hash
from benchmark.trackers import Tracker, Trackers, run_name
from small_configs import crash_and_resume


def _cfg(tmp_path: Path, trackers: list[str], rounds: int = 4, **train: Any) -> RunConfig:
    return build_run_config({
        "algorithm": {"name": "fedavg"}, "model": {"hidden": 16},
        "train": {"rounds": rounds, "lr": 0.01, "eval_every": 2, **train},  # round 1 unevaluated: a None
        "output": {"checkpoint_dir": str(tmp_path / "ckpt"), "trackers": trackers,
                   "tracker_dir": str(tmp_path / "trackers")}})


def _points(record: dict[str, Any], key: str) -> list[tuple[int, float]]:
    """(step, value) of one curve of the record, unmeasured rounds left out; trackers count
    rounds from 1, as the progress bar does (step = round + 1)."""
    return [(r + 1, v) for r, v in zip(record["curves"]["round"], record["curves"][key]) if v is not None]


def _close(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> bool:
    """The same steps, and values equal to float32 precision (TensorBoard's scalars)."""
    return [s for s, _ in got] == [s for s, _ in want] and all(
        v == pytest.approx(w, rel=1e-6, abs=1e-7) for (_, v), (_, w) in zip(got, want))


def _curves(record: dict[str, Any]) -> list[str]:
    return [k for k in record["curves"] if k != "round"]


# --------------------------------------------------------------------------- readers


def tensorboard_points(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run as TensorBoard's Scalars tab reads it (EventAccumulator.Scalars)."""
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, float(e.value)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def mlflow_run(root: Path) -> tuple[Any, Any]:
    from mlflow.tracking import MlflowClient

    from benchmark.trackers.mlflow import EXPERIMENT, tracking_uri

    client = MlflowClient(tracking_uri=tracking_uri(root))
    exp = client.get_experiment_by_name(EXPERIMENT)
    (run,) = client.search_runs([exp.experiment_id])
    return client, run


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- every tracker, one cell


def test_every_tracker_holds_the_records_curves_and_final_metrics(tiny_fed, tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    pytest.importorskip("mlflow")
    cfg = _cfg(tmp_path, ["tensorboard", "mlflow", "csv"])
    record = Engine(cfg, fed=tiny_fed).run()
    assert record["status"] == "ok" and record["metrics"]
    assert any(v is None for v in record["curves"][_curves(record)[0]])  # unevaluated rounds exist
    root = tmp_path / "trackers"
    run_dir = root / run_name(cfg)
    assert run_dir.name == f"fedavg-{cfg.hash()}-seed0"
    final = {f"best/{k}": v for k, v in record["metrics"].items()}
    best = record["best_round"]

    # TensorBoard: scalars (float32) at every round, counted from 1 as the progress bar counts
    tb = tensorboard_points(run_dir)
    for key in _curves(record):
        assert _close(tb[key], _points(record, key)), key
    for key, value in final.items():
        assert _close(tb[key], [(best + 1, value)]), key

    # MLflow: per-round metrics, final metrics, the config as params, provenance as tags
    client, run = mlflow_run(root)
    assert run.info.run_name == run_name(cfg) and run.info.status == "FINISHED"
    for key in _curves(record):
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        assert history == _points(record, key), key
    metrics = run.data.metrics
    assert {k: metrics[k] for k in final} == final and metrics["best_round"] == best
    params = run.data.params
    assert params["train.rounds"] == "4" and params["algorithm.name"] == "fedavg"
    assert params["model.hidden"] == "16" and params["output.trackers"] == '["tensorboard", "mlflow", "csv"]'
    assert {"seed", "dataset.name", "train.lr", "split.train", "missing.fill"} <= set(params)
    tags = run.data.tags
    prov = record["provenance"]
    assert tags["git_sha"] == prov["git_sha"] and tags["mlflow.source.git.commit"] == prov["git_sha"]
    assert tags["config_hash"] == prov["config_hash"] == cfg.hash() and tags["protocol"] == prov["protocol"]
    assert tags["device"] == prov["device"] and tags["versions.torch"] == prov["versions"]["torch"]
    assert tags["status"] == "ok" and tags["algorithm"] == "fedavg"

    # CSV: one row per round, empty where nothing was measured
    rows = read_csv(run_dir / "rounds.csv")
    assert [int(r["round"]) for r in rows] == [r + 1 for r in record["curves"]["round"]]
    for key in _curves(record):
        assert [float(r[key]) if r[key] else None for r in rows] == record["curves"][key], key
    done = {r["key"]: r["value"] for r in read_csv(run_dir / "final.csv")}
    assert done["status"] == "ok" and int(done["best_round"]) == best
    assert {k: float(done[k]) for k in record["metrics"]} == record["metrics"]
    params_csv = {(r["kind"], r["key"]): r["value"] for r in read_csv(run_dir / "params.csv")}
    assert params_csv[("config", "train.rounds")] == "4" and params_csv[("tag", "git_sha")] == prov["git_sha"]

    # the same config again, in the same folder: it holds the latest run only
    cfg2 = _cfg(tmp_path, ["tensorboard", "csv"])
    rerun = Engine(cfg2, fed=tiny_fed).run()
    tb = tensorboard_points(run_dir)
    for key in _curves(rerun):
        assert _close(tb[key], _points(rerun, key)), key
    assert len(read_csv(run_dir / "rounds.csv")) == len(rerun["curves"]["round"])
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1


def test_trackers_are_off_by_default_and_write_nothing(tiny_fed, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = build_run_config({"model": {"hidden": 8}, "train": {"rounds": 2},
                            "output": {"checkpoint_dir": str(tmp_path / "ckpt")}})
    assert cfg.output.trackers == [] and cfg.output.tracker_dir == "runs/trackers"
    engine = Engine(cfg, fed=tiny_fed)
    assert not engine.trackers
    assert engine.run()["status"] == "ok"
    assert not (tmp_path / "runs").exists()


def test_trackers_change_no_hash() -> None:
    plain = build_run_config({"train": {"rounds": 3}})
    tracked = build_run_config({"train": {"rounds": 3},
                                "output": {"trackers": ["csv", "tensorboard", "mlflow"], "tracker_dir": "elsewhere"}})
    assert tracked.hash() == plain.hash() == RunConfig(train=plain.train).hash()
    assert protocol_hash(tracked) == protocol_hash(plain)
    assert tracked.to_dict()["output"]["trackers"] == ["csv", "tensorboard", "mlflow"]


def test_an_unknown_tracker_is_one_line_listing_the_known_ones(tmp_path: Path, capsys, monkeypatch) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(None, ["output.trackers=[tensorbord]"])
    msg = str(e.value)
    assert "\n" not in msg and "output.trackers[0]" in msg and "'tensorbord'" in msg
    assert "csv, mlflow, tensorboard" in msg
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--set", "output.trackers=[wandb]", "--set", "train.rounds=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: output.trackers[0] must be one of") and "wandb" in err
    assert list(tmp_path.iterdir()) == []
    # a config built without validation meets the registry's own one-line error
    unchecked = RunConfig()
    unchecked.output.trackers = ["tensorbord"]
    with pytest.raises(ConfigError, match=r"unknown tracker 'tensorbord' \(did you mean 'tensorboard'\?\); "
                                          r"valid: csv, mlflow, tensorboard"):
        Trackers.from_config(unchecked)


def test_a_missing_package_names_the_extra(monkeypatch) -> None:
    import importlib.util
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError) as e:
        load_config(None, ["output.trackers=[csv, mlflow]"])
    assert str(e.value) == ("tracker 'mlflow' needs the package 'mlflow', which is not installed: "
                            "pip install -e .[track]")
    monkeypatch.setattr(importlib.util, "find_spec", real)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # an import that fails
    cfg = RunConfig()
    cfg.output.trackers = ["tensorboard"]
    with pytest.raises(ConfigError, match=r"^tracker 'tensorboard' cannot import torch.utils.tensorboard .*: "
                                          r"pip install -e \.\[track\]$"):
        Trackers.from_config(cfg)


# --------------------------------------------------------------------------- failures


class _Spy(Tracker):
    """Records the events it hears; raises in the one named by ``fail``."""

    events: list[str] = []
    fail = ""

    def _event(self, name: str) -> None:
        type(self).events.append(name)
        if name == type(self).fail:
            raise OSError(f"disk full during {name}")

    def start(self, config, tags):
        self._event("start")

    def log_round(self, round, metrics):
        self._event("log_round")

    def finish(self, record):
        self._event("finish")

    def close(self):
        self._event("close")


@pytest.fixture
def spy():
    """A throwaway tracker, registered for one test only."""
    R.TRACKERS.register("_spy_test")(_Spy)
    _Spy.events, _Spy.fail = [], ""
    try:
        yield _Spy
    finally:
        R.TRACKERS.unregister("_spy_test")


@pytest.mark.parametrize("event", ["start", "log_round", "finish"])
def test_a_failing_tracker_warns_once_and_the_record_is_kept(event: str, spy, tiny_fed, tmp_path: Path,
                                                             capsys) -> None:
    spy.fail = event
    cfg = _cfg(tmp_path, ["_spy_test", "csv"], rounds=3)
    plain = Engine(_cfg(tmp_path, [], rounds=3), fed=tiny_fed).run()
    record = Engine(cfg, fed=tiny_fed).run()
    assert record["status"] == "ok" and record["metrics"] == plain["metrics"]
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("warning: tracker")]
    assert len(warnings) == 1 and f"'_spy_test' failed in {event} (OSError: disk full during {event})" in warnings[0]
    assert spy.events.count(event) == 1 and spy.events[-1] == "close"  # dropped after its failure, and closed
    rows = read_csv(tmp_path / "trackers" / run_name(cfg) / "rounds.csv")  # the other tracker went on
    assert len(rows) == 3


def test_trackers_are_closed_when_the_run_raises(spy, tiny_fed, tmp_path: Path, monkeypatch) -> None:
    engine = Engine(_cfg(tmp_path, ["_spy_test"]), fed=tiny_fed)

    def crash(self, uploads, rnd):
        raise KeyboardInterrupt  # a kill in the middle of round 0

    monkeypatch.setattr(engine.algo_cls, "aggregate", crash)
    with pytest.raises(KeyboardInterrupt):
        engine.run()
    assert spy.events == ["start", "close"] and not engine.trackers


def test_an_mlflow_run_that_raised_ends_failed(tiny_fed, tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("mlflow")
    engine = Engine(_cfg(tmp_path, ["mlflow"]), fed=tiny_fed)
    original = engine.algo_cls.aggregate

    def crash(self, uploads, rnd):
        if rnd == 2:
            raise RuntimeError("a bug in round 2")
        return original(self, uploads, rnd)

    monkeypatch.setattr(engine.algo_cls, "aggregate", crash)
    with pytest.raises(RuntimeError):
        engine.run()
    client, run = mlflow_run(tmp_path / "trackers")
    assert run.info.status == "FAILED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "bytes_up")] == [1, 2]


def test_a_resumed_run_replays_the_rounds_it_had(tiny_fed, tmp_path: Path, monkeypatch) -> None:
    full = Engine(_cfg(tmp_path / "full", ["csv"], rounds=6, checkpoint_every=2), fed=tiny_fed).run()
    cfg = _cfg(tmp_path, ["csv"], rounds=6, checkpoint_every=2)
    resumed = crash_and_resume(cfg, tiny_fed, monkeypatch)
    rows = read_csv(tmp_path / "trackers" / run_name(cfg) / "rounds.csv")
    assert [int(r["round"]) - 1 for r in rows] == list(range(6)) == resumed["curves"]["round"]
    key = next(k for k in resumed["curves"] if k.startswith("val/"))
    assert [float(r[key]) if r[key] else None for r in rows] == resumed["curves"][key] == full["curves"][key]
    assert all(not math.isnan(float(r["bytes_up"])) for r in rows)


def test_tensorboard_curves_worth_reading(tiny_fed, tmp_path: Path) -> None:
    """TensorBoard's Scalars hold the training loss once per round, every metric the task
    reports (macro-F1 beside accuracy) and the clients' spread at each evaluation, at steps
    counted from 1 as the progress bar counts."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    cfg = _cfg(tmp_path, ["tensorboard"], rounds=4)
    record = Engine(cfg, fed=tiny_fed).run()
    acc = EventAccumulator(str(tmp_path / "trackers" / run_name(cfg)), size_guidance={SCALARS: 0})
    acc.Reload()
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [1, 2, 3, 4] and all(e.value > 0 for e in loss)
    assert record["curves"]["train/loss"] == pytest.approx([e.value for e in loss], rel=1e-6)
    evaluated = [r + 1 for r, v in zip(record["curves"]["round"], record["curves"]["val/accuracy"]) if v is not None]
    for tag in ("val/macro_f1", "test/macro_f1", "val/accuracy_client_std"):
        assert [e.step for e in acc.Scalars(tag)] == evaluated, tag
    assert all(e.value >= 0 for e in acc.Scalars("val/accuracy_client_std"))
