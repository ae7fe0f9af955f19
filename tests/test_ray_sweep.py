"""``sweep --backend ray``: the CI suite's cells as Ray tasks on a local instance (2 CPUs).

Same records as the joblib backend for the same cells; a sweep killed mid-way resumes with
only the missing cells; the driver is the only writer, so the store parses line by line; a
missing Ray is a one-line error naming the extra to install.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedmm_bench.cli import main
from benchmark.errors import BenchmarkError, ConfigError
from benchmark.results import ResultStore
from benchmark.sweep import Suite, cell_resources

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parent.parent
# two cells of the CI suite (FedAvg, seed 0, missing 0% and 60%), three rounds each
FEW = ["--only", "algorithm.name=fedavg", "--only", "seed=0", "--set", "train.rounds=3"]


def _sweep(results: Path, cache: Path, *extra: str) -> list[str]:
    return ["sweep", "ci", "--scale", "tiny", "--results", str(results), "--set", f"output.cache_dir={cache}", *extra]


def _metrics(store: Path) -> dict[str, tuple[dict, dict]]:
    return {r.cell_id: (r.metrics, r.comm) for r in ResultStore(store).read()}


def _session_pids(sid: int) -> list[int]:
    """Processes still in session ``sid`` (what a killed sweep left behind)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def test_ray_sweep_records_equal_the_joblib_backend(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FEDMM_THREADS", "1")  # the same torch threads per cell on both backends
    cache = tmp_path / "cache"
    assert main(_sweep(tmp_path / "joblib", cache, *FEW)) == 0
    assert main(_sweep(tmp_path / "ray", cache, *FEW, "--backend", "ray", "--jobs", "2")) == 0
    assert "2 cells run now, 2 recorded, 0 failed" in capsys.readouterr().out
    ray_recs, joblib_recs = (_metrics(tmp_path / d / "ci" / "tiny.jsonl") for d in ("ray", "joblib"))
    assert len(ray_recs) == 2 and ray_recs.keys() == joblib_recs.keys()
    for cid, (metrics, comm) in ray_recs.items():
        assert metrics == joblib_recs[cid][0] and metrics["test/accuracy"] > 0
        assert comm["bytes_up"] == joblib_recs[cid][1]["bytes_up"] > 0
    import ray

    assert not ray.is_initialized(), "the local Ray instance this sweep started is shut down"
    # each record names its backend and the process that ran it: a Ray worker, not this driver
    for d, backend in (("ray", "ray"), ("joblib", "joblib")):
        recs = [json.loads(line) for line in (tmp_path / d / "ci" / "tiny.jsonl").read_text().splitlines()]
        assert {r["sweep_backend"] for r in recs} == {backend}
        if backend == "ray":
            assert os.getpid() not in {r["worker_pid"] for r in recs}


#: Ray's own infrastructure dying under a run (its raylet, not our code): seen on a loaded
#: 2-core CI machine when a new local instance starts right after one was SIGKILLed
RAY_INFRA_DEATH = ("LocalRayletDiedError", "Raylet is terminated")


def _killed_then_resumed(tmp_path: Path) -> tuple[list, subprocess.CompletedProcess, Path]:
    """Kill a Ray sweep after its first record, then run it again: (records before, the re-run, store)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    results, store = tmp_path / "res", tmp_path / "res" / "ci" / "tiny.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg", "FEDMM_THREADS": "1"}
    cmd = [sys.executable, str(ROOT / "run_benchmark.py"),
           *_sweep(results, tmp_path / "cache", "--only", "algorithm.name=fedavg", "--set", "train.rounds=4",
                   "--backend", "ray", "--jobs", "2")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if store.exists() and store.read_text().count("\n") >= 1:
                break
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started (one session)
        proc.wait()
        for pid in _session_pids(proc.pid):
            os.kill(pid, signal.SIGKILL)
    lines = store.read_text().splitlines()
    assert all(json.loads(line)["status"] == "ok" for line in lines), "every stored line parses"
    before = ResultStore(store).read()
    assert 1 <= len(before) < 6, "the kill should land mid-sweep"
    return before, subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600), store


def test_killed_ray_sweep_resumes_only_missing_cells(tmp_path):
    """Six cells (FedAvg x 2 missing rates x 3 seeds, four rounds each); the driver and its
    local Ray instance are killed after the first record; the re-run does exactly the rest.
    A re-run whose Ray raylet itself died (``RAY_INFRA_DEATH``, Ray's failure, not the sweep's)
    is tried once more from scratch; any other failure fails at once."""
    before, out, store = _killed_then_resumed(tmp_path / "try1")
    if out.returncode == 0 and any(why in out.stdout + out.stderr for why in RAY_INFRA_DEATH):
        before, out, store = _killed_then_resumed(tmp_path / "try2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"{6 - len(before)} cells run now, 6 recorded, 0 failed" in out.stdout, out.stdout[-2000:]
    after = [json.loads(line) for line in store.read_text().splitlines()]
    ids = [r["cell_id"] for r in after]  # the raw lines: JSON objects
    assert len(ids) == 6 and len(set(ids)) == 6
    assert {r.cell_id for r in before} <= set(ids)


def test_ray_backend_without_ray_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an install without the scale extra looks like
    assert main(_sweep(tmp_path / "res", tmp_path / "cache", *FEW, "--backend", "ray")) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install -e .[scale]" in err
    assert not (tmp_path / "res" / "ci" / "tiny.jsonl").exists()


def test_unknown_backend_and_stray_address_are_errors(tmp_path, capsys):
    assert main(_sweep(tmp_path / "res", tmp_path / "cache", *FEW, "--backend", "dask")) == 2
    assert "unknown sweep backend 'dask'" in capsys.readouterr().err
    assert main(_sweep(tmp_path / "res", tmp_path / "cache", *FEW, "--address", "auto")) == 2
    assert "--address is for --backend ray" in capsys.readouterr().err


@pytest.mark.parametrize(("spec", "ok"), [({}, {"cpus": 1.0, "gpus": 0.0}), ({"cpus": 2, "gpus": 0.25},
                                                                          {"cpus": 2.0, "gpus": 0.25}),
                                          ({"gpus": 1.5}, None), ({"cpus": 0}, None), ({"memory": 1}, None)])
def test_cell_resources_come_from_the_suite(spec, ok, tmp_path):
    suite = Suite(name="s", path=tmp_path / "s.yaml", spec={"resources": spec} if spec else {})
    if ok is None:
        with pytest.raises(ConfigError, match="resources"):
            cell_resources(suite)
    else:
        assert cell_resources(suite) == ok


def test_an_address_where_nothing_listens_is_one_line_within_seconds(tmp_path, capsys):
    """Ray retries a dead GCS address forever (and ignores SIGTERM): the sweep must not."""
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    rc = main(["sweep", "ci", "--scale", "tiny", "--backend", "ray", "--address", f"127.0.0.1:{port}",
               "--results", str(tmp_path)])
    assert rc == 2 and time.perf_counter() - start < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Ray cluster answers there" in err[0]
    assert not list(tmp_path.rglob("*.jsonl"))


def test_without_an_address_a_new_local_instance_starts(monkeypatch):
    """After `ray start --head`, ray.init(num_cpus=...) would join that cluster and refuse the
    CPU count; address='local' always starts a fresh instance."""
    import ray

    from benchmark.backends import ray_sweep

    seen: dict = {}
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    assert ray_sweep.connect(None, 2) is True
    assert seen["address"] == "local" and seen["num_cpus"] >= 1
    for bad in ("nonsense", "host:", ":123"):
        with pytest.raises(BenchmarkError, match="expected host:port"):
            ray_sweep.probe(bad)


def test_every_fedmm_setting_travels_to_the_ray_workers(monkeypatch, tmp_path):
    """A worker on another node must find the data where the driver said (FEDMM_DATA_ROOT) and
    run with the driver's thread count and pinned git state."""
    import ray

    from benchmark.backends import ray_sweep

    seen: dict = {}
    monkeypatch.setenv("FEDMM_DATA_ROOT", str(tmp_path))
    monkeypatch.setenv("FEDMM_THREADS", "3")
    monkeypatch.setenv("UNRELATED_SETTING", "x")
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(kw))
    ray_sweep.connect(None, 1)
    env = seen["runtime_env"]["env_vars"]
    assert env["FEDMM_DATA_ROOT"] == str(tmp_path) and env["FEDMM_THREADS"] == "3"
    assert "UNRELATED_SETTING" not in env
