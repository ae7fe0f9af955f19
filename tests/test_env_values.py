"""Issue 25: every FEDMM_* environment variable the code reads is checked where it is used;
a bad value is one ConfigError line naming the variable (a sweep checks them all before any
cell runs). Cell claims stay safe for concurrent sweeps: the expiry spans several heartbeats."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from benchmark import claims
from fedmm_bench.cli import main
from benchmark.errors import BenchmarkError, ConfigError

ROOT = Path(__file__).resolve().parent.parent

#: every FEDMM_* variable benchmark/ and data_prep/ read, and the test below that covers it
COVERED = {
    "FEDMM_CLAIM_EXPIRY_S": "test_claim_expiry_rejects",
    "FEDMM_THREADS": "test_a_sweep_checks_every_variable_before_any_cell",
    "FEDMM_DEVICE": "test_a_sweep_checks_every_variable_before_any_cell",
    "FEDMM_GIT_STATE": "test_a_sweep_checks_every_variable_before_any_cell",
    "FEDMM_FLOWER_CPUS": "test_flower_cpus",
    "FEDMM_DATA_ROOT": "test_data_root_that_does_not_exist",
    "FEDMM_CACHE_DIR": "a directory or a path to make one (data_prep/datasets/sources.py: cache_root)",
}


def test_every_variable_read_is_covered() -> None:
    """A new FEDMM_* variable needs a check and a line in COVERED."""
    names = set()
    for folder in ("benchmark", "data_prep"):
        for path in (ROOT / folder).rglob("*.py"):
            names |= set(re.findall(r"\bFEDMM_[A-Z_]+[A-Z]\b", path.read_text(encoding="utf-8")))
    assert names <= set(COVERED), sorted(names - set(COVERED))


@pytest.mark.parametrize("raw", ["abc", "0", "-5", "nan", "1", "14.9", "1e"])
def test_claim_expiry_rejects(raw: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The probe: 'abc' was ignored and 0 let two concurrent sweeps run every cell twice."""
    monkeypatch.setenv(claims.EXPIRY_ENV, raw)
    with pytest.raises(ConfigError, match=rf"FEDMM_CLAIM_EXPIRY_S must be a number of seconds >= 15 .*got '{raw}'"):
        claims.expiry_s()
    with pytest.raises(ConfigError):  # the first claim fails, not only a contended one
        claims.try_claim(tmp_path / "s.jsonl", "cell")


@pytest.mark.parametrize("raw, value", [("", claims.DEFAULT_EXPIRY_S), ("15", 15.0), (" 3600 ", 3600.0),
                                        ("inf", float("inf"))])
def test_claim_expiry_accepts(raw: str, value: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(claims.EXPIRY_ENV, raw)
    assert claims.expiry_s() == value


def test_minimum_expiry_spans_several_heartbeats() -> None:
    assert claims.min_expiry_s() >= 2 * claims.HEARTBEAT_S


def test_a_live_claim_outlasts_the_expiry_through_its_heartbeat(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    """A cell that runs longer than the expiry keeps its claim: nobody else runs it."""
    monkeypatch.setattr(claims, "HEARTBEAT_S", 0.05)
    monkeypatch.setenv(claims.EXPIRY_ENV, str(claims.min_expiry_s()))  # 0.15 s
    store = tmp_path / "s.jsonl"
    mine = claims.try_claim(store, "cell")
    assert mine is not None
    first = claims.holder(store, "cell")["time"]
    time.sleep(0.6)  # four expiries
    assert claims.holder(store, "cell")["time"] > first
    assert not claims.is_stale(claims.holder(store, "cell"))
    assert claims.try_claim(store, "cell") is None
    mine.release()
    time.sleep(0.15)  # the heartbeat stopped: it does not write the claim back
    assert claims.holder(store, "cell") is None


def test_flower_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmark.backends.flower_sim import FLOWER_CPUS_ENV, flower_cpus_env

    for raw, value in (("", 0), ("0", 0), ("3", 3)):
        monkeypatch.setenv(FLOWER_CPUS_ENV, raw)
        assert flower_cpus_env() == value
    for raw in ("abc", "-1", "1.5", "²"):
        monkeypatch.setenv(FLOWER_CPUS_ENV, raw)
        with pytest.raises(ConfigError, match=rf"FEDMM_FLOWER_CPUS must be a whole number of CPUs .*got '{raw}'"):
            flower_cpus_env()


def test_device_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmark.engine import DEVICE_ENV, resolve_device

    monkeypatch.setenv(DEVICE_ENV, "tpu")
    with pytest.raises(BenchmarkError, match=r"\$FEDMM_DEVICE \(train.device: auto\) must be cpu, cuda or cuda:N, "
                                             r"got 'tpu'"):
        resolve_device("auto")
    assert resolve_device("cpu").type == "cpu"  # an explicit device does not read the variable


SUITE = {
    "name": "env_test",
    "description": "one tiny cell",
    "base": {"dataset.num_nodes": 200, "partition.num_clients": 2, "model.hidden": 8, "train.rounds": 1},
    "grid": {"algorithm.name": ["fedavg"]},
    "seeds": [0],
    "default_scale": "tiny",
    "table": {"rows": "algorithm.name", "columns": "seed", "metrics": ["accuracy"]},
}


@pytest.mark.parametrize("name, raw, needle", [
    ("FEDMM_CLAIM_EXPIRY_S", "0", "FEDMM_CLAIM_EXPIRY_S must be a number of seconds >= 15"),
    ("FEDMM_CLAIM_EXPIRY_S", "abc", "FEDMM_CLAIM_EXPIRY_S must be a number of seconds >= 15"),
    ("FEDMM_THREADS", "two", "FEDMM_THREADS must be a positive integer"),
    ("FEDMM_DEVICE", "tpu", "$FEDMM_DEVICE (train.device: auto) must be cpu, cuda or cuda:N"),
    ("FEDMM_GIT_STATE", "garbage", "FEDMM_GIT_STATE must be '<commit sha>:0' or '<commit sha>:1'"),
])
def test_a_sweep_checks_every_variable_before_any_cell(name: str, raw: str, needle: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Before, a bad value failed every cell one by one (or was ignored); now one line, rc 2."""
    from benchmark import sweep

    suite = tmp_path / "env_test.yaml"
    suite.write_text(yaml.safe_dump(SUITE))
    monkeypatch.setenv(name, raw)
    monkeypatch.setattr(sweep, "_run_until_recorded", lambda *a, **k: pytest.fail("a cell ran"))
    assert main(["sweep", str(suite), "--results", str(tmp_path / "r")]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"error: {needle}"), lines
    assert not list((tmp_path / "r").rglob("*.jsonl"))


def test_data_root_that_does_not_exist(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FEDMM_DATA_ROOT", "/nonexistent/fedmm")
    assert main(["bench", "kg"]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert lines == ["error: data root /nonexistent/fedmm ($FEDMM_DATA_ROOT) does not exist"]


def test_cache_dir_that_is_a_file_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from benchmark.errors import DataError
    from data_prep.datasets.sources import cache_root

    monkeypatch.setenv("FEDMM_CACHE_DIR", str(tmp_path / "f"))
    assert cache_root(None) == tmp_path / "f"  # not there yet: it will be made
    (tmp_path / "f").write_text("x")
    with pytest.raises(DataError, match="FEDMM_CACHE_DIR=.* is not a directory"):
        cache_root(None)
