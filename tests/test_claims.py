"""Cell claims: concurrent sweeps into one store run each cell once; stale claims are taken over."""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

from benchmark import claims
from benchmark.results import ResultStore
from benchmark.sweep import load_suite, run_suite

ROOT = Path(__file__).resolve().parent.parent

SUITE = {
    "name": "claims_test",
    "description": "tiny suite for the claim tests",
    "base": {"dataset.num_nodes": 200, "partition.num_clients": 2, "model.hidden": 8, "train.rounds": 3},
    "grid": {"algorithm.name": ["fedavg", "local"]},
    "seeds": [0, 1],
    "default_scale": "tiny",
    "table": {"rows": "algorithm.name", "columns": "seed", "metrics": ["accuracy"]},
}

WORKER = """
import sys, time, pathlib
from benchmark.sweep import load_suite, run_suite
ready, go, suite, results = sys.argv[1:]
pathlib.Path(ready).touch()
while not pathlib.Path(go).exists():
    time.sleep(0.02)
run_suite(load_suite(suite), "tiny", jobs=1, results_dir=results, progress=False)
"""


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "claims_test.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "FEDMM_THREADS": "1", "MPLBACKEND": "Agg"}


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # released meanwhile
        return 0


def _claim_files(store: Path) -> list[Path]:
    d = claims.claims_dir(store)
    return sorted(d.glob("*.json")) if d.exists() else []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_claim_excludes_others_until_released(tmp_path):
    store = tmp_path / "s.jsonl"
    first = claims.try_claim(store, "cell")
    assert first is not None and claims.try_claim(store, "cell") is None
    info = claims.holder(store, "cell")
    assert info["pid"] == os.getpid() and info["host"] == socket.gethostname()
    first.release()
    assert claims.holder(store, "cell") is None and claims.try_claim(store, "cell") is not None


def test_stale_claims_are_recognised():
    now = time.time()
    me = {"pid": os.getpid(), "host": socket.gethostname(), "time": now,
          "start": claims._start_time(os.getpid())}
    assert not claims.is_stale(me)
    assert claims.is_stale({**me, "pid": _dead_pid()})                        # owner died
    assert claims.is_stale({**me, "start": "1"})                              # pid reused by another process
    assert claims.is_stale({**me, "time": now - claims.DEFAULT_EXPIRY_S - 1})  # expired
    assert not claims.is_stale({**me, "host": "elsewhere", "pid": _dead_pid()})  # other host: only expiry counts
    assert claims.is_stale({"garbage": True})


def test_release_leaves_a_claim_taken_over_by_another(tmp_path):
    store = tmp_path / "s.jsonl"
    mine = claims.try_claim(store, "cell")
    path = claims.claims_dir(store) / "cell.json"
    path.write_text(json.dumps({"pid": 1, "host": "x", "time": time.time(), "token": "theirs"}))
    mine.release()
    assert path.exists()


def test_two_concurrent_sweeps_record_each_cell_once(tmp_path):
    suite, results = _suite(tmp_path), tmp_path / "results"
    go = tmp_path / "go"
    procs = []
    for i in range(2):
        ready = tmp_path / f"ready{i}"
        procs.append((ready, subprocess.Popen([sys.executable, "-c", WORKER, str(ready), str(go), str(suite),
                                               str(results)], cwd=ROOT, env=_env(),
                                              stderr=subprocess.PIPE, text=True)))
    deadline = time.time() + 120
    while not all(r.exists() for r, _ in procs) and time.time() < deadline:
        time.sleep(0.05)
    go.touch()  # both read the store now: both see every cell to do
    for _, p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    store = results / "claims_test" / "tiny.jsonl"
    counts = collections.Counter(r.cell_id for r in ResultStore(store).read())
    assert len(counts) == 4 and set(counts.values()) == {1}, counts
    assert _claim_files(store) == []


def test_killed_sweeps_claims_do_not_block_the_next(tmp_path):
    suite, results = _suite(tmp_path), tmp_path / "results"
    store = results / "claims_test" / "tiny.jsonl"
    cmd = [sys.executable, str(ROOT / "run_benchmark.py"), "sweep", str(suite), "--results", str(results),
           "--jobs", "1"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    # a claim is created empty (O_EXCL) and then written: wait for its content, or a kill in
    # between leaves an empty claim (one the next sweep takes over too, but not what this checks)
    while not any(_size(f) for f in _claim_files(store)) and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    left = _claim_files(store)
    assert left and json.loads(left[0].read_text())["pid"] == proc.pid  # the dead sweep's claim is still there
    out = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    counts = collections.Counter(r.cell_id for r in ResultStore(store).read())
    assert len(counts) == 4 and set(counts.values()) == {1}
    assert _claim_files(store) == []


def test_a_cell_held_by_a_live_sweep_is_waited_for_then_run(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDMM_THREADS", "1")
    monkeypatch.setattr("benchmark.sweep.CLAIM_POLL_S", 0.1)
    suite = load_suite(str(_suite(tmp_path)))
    store = suite.results_path(tmp_path / "results", "tiny")
    cells = suite.cells("tiny")
    held = claims.try_claim(store, cells[0].cell_id)  # "another sweep" (alive: this process) holds it
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(r=run_suite(suite, "tiny", results_dir=tmp_path / "results",
                                                                    progress=False)))
    worker.start()
    deadline = time.time() + 120
    while len(ResultStore(store).read()) < 3 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert worker.is_alive() and cells[0].cell_id not in {r.cell_id for r in ResultStore(store).read()}
    held.release()  # the other sweep gave up without a record: this one runs the cell
    worker.join(timeout=120)
    records, ran = out["r"]
    assert ran == 4 and len(records) == 4
    assert collections.Counter(r.cell_id for r in ResultStore(store).read())[cells[0].cell_id] == 1
