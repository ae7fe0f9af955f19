"""Clean stops (issue 25): SIGTERM and SIGINT stop a sweep's workers too, and one line on
stderr says what was saved; the exit code is 128 + the signal (143 SIGTERM, 130 SIGINT)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import psutil
import pytest
import yaml

from benchmark import sweep
from fedmm_bench.cli import main
from benchmark.stopping import Interrupted, stop_on_signals

ROOT = Path(__file__).resolve().parent.parent

SUITE = {
    "name": "stop_test",
    "description": "many small cells, so a sweep is still running when it is stopped",
    "base": {"dataset.num_nodes": 300, "partition.num_clients": 2, "model.hidden": 8, "train.rounds": 20},
    "grid": {"algorithm.name": ["fedavg", "local", "fedprox"]},
    "seeds": list(range(8)),
    "default_scale": "tiny",
    "table": {"rows": "algorithm.name", "columns": "seed", "metrics": ["accuracy"]},
}


def _suite(tmp_path: Path) -> Path:
    path = tmp_path / "stop_test.yaml"
    path.write_text(yaml.safe_dump(SUITE))
    return path


def _lines(store: Path) -> int:
    return len(store.read_text().splitlines()) if store.exists() else 0


def _loky_workers(parent: psutil.Process) -> list[psutil.Process]:
    """The loky worker processes under ``parent`` (not its resource trackers)."""
    out = []
    for child in parent.children(recursive=True):
        try:
            if "LokyProcess" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:  # exited meanwhile
            pass
    return out


def _alive(procs: list[psutil.Process]) -> list[int]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def test_sigterm_stops_the_sweep_and_its_workers(tmp_path: Path) -> None:
    """The probe: SIGTERM used to end the parent at once while its loky workers kept appending."""
    results = tmp_path / "results"
    store = results / "stop_test" / "tiny.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDMM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "run_benchmark.py"), "sweep", str(_suite(tmp_path)),
                             "--jobs", "2", "--results", str(results)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(proc.pid)
    start = time.monotonic()
    workers: list[psutil.Process] = []
    first_seen = None
    while time.monotonic() - start < 30 and proc.poll() is None:  # a record, or the workers at work a while
        workers = _loky_workers(parent)
        first_seen = first_seen or (time.monotonic() if workers else None)
        if _lines(store) >= 1 or (first_seen and time.monotonic() - first_seen > 8):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    assert workers, "the sweep started no loky worker"
    workers = parent.children(recursive=True)  # the resource trackers too: nothing may outlive the sweep
    proc.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - stopped < 10, "the sweep took too long to stop"
    assert proc.returncode == 143, err[-2000:]
    psutil.wait_procs(workers, timeout=5)
    assert _alive(workers) == [], "a worker outlived the stopped sweep"
    saved = _lines(store)
    time.sleep(2)
    assert _lines(store) == saved, "records were appended after the sweep stopped"
    text = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip()]
    said = [ln for ln in text if ln.startswith("interrupted")]
    assert len(said) == 1 and text[-1] == said[0], err[-2000:]
    assert said[0].startswith("interrupted (SIGTERM): sweep stop_test[tiny] stopped: "
                              f"{saved} of {len(SUITE['seeds']) * 3} cells saved"), said[0]
    assert "run the same command again to resume" in said[0]
    assert not any("Traceback" in ln or "Warning" in ln for ln in text), err[-2000:]


def test_sigint_is_exit_130_with_the_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted_run(*_: object, **__: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises long before this ends
        raise AssertionError("SIGINT did not stop the sweep")

    monkeypatch.setattr(sweep, "_run_until_recorded", interrupted_run)
    assert main(["sweep", str(_suite(tmp_path)), "--results", str(tmp_path / "r")]) == 130
    err = capsys.readouterr().err
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip()]
    assert lines[-1].startswith("interrupted (SIGINT): sweep stop_test[tiny] stopped: 0 of 24 cells saved"), err
    assert sum(ln.startswith("interrupted") for ln in lines) == 1


def test_handlers_are_restored_and_exit_codes() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted) as info, stop_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert info.value.exit_code == 143 and info.value.signal_name == "SIGTERM"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert Interrupted(signal.SIGINT).exit_code == 130


def test_kill_pool_does_not_wait_for_running_or_queued_cells() -> None:
    """sweep --isolate: shutdown() would wait for the running cells and start the queued ones."""
    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(time.sleep, 60) for _ in range(4)]
    deadline = time.monotonic() + 30
    while len(getattr(pool, "_processes", {}) or {}) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    procs = [psutil.Process(p.pid) for p in pool._processes.values()]
    start = time.monotonic()
    sweep.kill_pool(pool)
    assert time.monotonic() - start < 10
    psutil.wait_procs(procs, timeout=5)
    assert _alive(procs) == []
    deadline = time.monotonic() + 5
    while not all(f.done() for f in futures) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(f.done() for f in futures), "a task still runs or waits after the pool was killed"


def test_closing_parallel_kills_loky_workers_when_the_consumer_stops() -> None:
    from joblib import Parallel, delayed

    gen = Parallel(n_jobs=2, backend="loky", return_as="generator_unordered")(
        delayed(time.sleep)(0.1 if i == 0 else 60) for i in range(4))
    me = psutil.Process()
    with pytest.raises(KeyboardInterrupt):
        with sweep.closing_parallel(gen):
            for _ in gen:
                workers = _loky_workers(me)
                raise KeyboardInterrupt
    assert workers
    psutil.wait_procs(workers, timeout=10)
    assert _alive(workers) == []


def test_interrupted_regress_says_nothing_was_compared(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from benchmark import regress

    def stopped(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(regress, "run_ci_suite", stopped)
    assert main(["regress", "--suite", "ci"]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["interrupted (SIGINT): regress stopped: its records were temporary; nothing was compared"]
