"""``sweep SUITE --backend ray [--address ADDR]``: a suite's cells as Ray tasks.

Why tasks and not Ray Tune trials: a cell is one deterministic run with no search and no
early stopping between trials, and resume is by cell id against our own store, which Tune's
experiment directories would duplicate. A task per cell gives what a sweep needs: per-cell
resources (``resources: {cpus, gpus}`` in the suite; a GPU fraction lets several small
cells share one GPU), one task per fresh worker with ``--isolate``, and failure isolation (a
cell that raises, or whose worker dies, becomes a ``failed`` record and the others go on).

The driver is the only writer: it claims each cell (so a concurrent sweep into the same
store leaves it alone), submits it, and appends its record the moment it returns, so a kill
loses only the cells in flight and a re-run does only what is missing. Without
``--address`` a new local Ray instance starts with at most ``--jobs`` CPUs (and this
machine's count), even when a cluster from ``ray start --head`` runs here (Ray would
otherwise join it and refuse the CPU count); with it, the driver joins that cluster, whose
workers must have this package installed (``pip install -e .[scale]`` on every node). An
address where nothing listens is one line within ``PROBE_S`` seconds: Ray itself retries
the connection forever.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from typing import Any

from benchmark.backends import SWEEP_BACKENDS, require
from benchmark.claims import try_claim
from benchmark.errors import BenchmarkError
from benchmark.results import GIT_STATE_ENV, ResultStore
from benchmark.cell import CELL_SECONDS, Cell, execute_cell, failed_cell, tick
from benchmark.threads import ENV as THREADS_ENV


def _cell_task(cell: Cell, threads: int) -> dict[str, Any]:
    """What a Ray worker runs: one cell, its record returned to the driver (never stored here)."""
    start = time.perf_counter()
    record = execute_cell(cell, threads, backend="ray")
    record[CELL_SECONDS] = time.perf_counter() - start
    return record


PROBE_S = 5.0  # how long an --address may take to accept a TCP connection


def probe(address: str, timeout: float = PROBE_S) -> None:
    """BenchmarkError unless something accepts a TCP connection at ``address`` (``host:port``,
    optionally ``ray://``); ``auto`` and ``local`` name no socket and pass."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise BenchmarkError(f"--address {address[:100]}: expected host:port (e.g. 127.0.0.1:6379), 'auto' or 'local'")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as e:
        raise BenchmarkError(f"--address {address[:100]}: no Ray cluster answers there ({e.strerror or e}); start "
                             f"one with 'ray start --head', or leave --address out for a local instance") from None


def worker_env() -> dict[str, str]:
    """What a Ray worker must see of the driver's environment: every ``FEDMM_*`` setting (the
    data root, the thread count, the git state the sweep pinned, the device), so a cell on a
    cluster node finds the same data and labels its record as the driver would."""
    env = {k: v for k, v in os.environ.items() if k.startswith("FEDMM_")}
    env.update({k: os.environ[k] for k in (GIT_STATE_ENV, THREADS_ENV) if k in os.environ})
    return env


def connect(address: str | None, jobs: int) -> bool:
    """Join the cluster at ``address``, or start a new local instance; True when this call started Ray."""
    ray = require("ray", "ray")
    if ray.is_initialized():
        return False
    if address:
        probe(address)
    env = worker_env()
    common: dict[str, Any] = {"runtime_env": {"env_vars": env}, "logging_level": "ERROR", "log_to_driver": False}
    with warnings.catch_warnings():  # Ray's notice about a future default; a zero-GPU cell still sees no GPU
        warnings.filterwarnings("ignore", category=FutureWarning)
        if address:
            ray.init(address=address, **common)
        else:
            ray.init(address="local", num_cpus=max(1, min(jobs, os.cpu_count() or 1)), include_dashboard=False,
                     **common)  # "local": a new instance, never a running `ray start` cluster
    return True


@SWEEP_BACKENDS.register("ray")
def run_cells_ray(todo: list[Cell], store_path: str, threads: int, jobs: int, isolate: bool, bar: Any,
                  seen: dict[str, int], walls: list[float], address: str | None = None,
                  resources: dict[str, float] | None = None, **_: Any) -> set[str]:
    """Run ``todo`` as Ray tasks; returns the ids of cells another live sweep holds."""
    ray = require("ray", "ray")
    res = resources or {"cpus": 1.0, "gpus": 0.0}
    cell_threads = int(os.environ.get(THREADS_ENV, "0") or 0) or max(1, int(res["cpus"]))
    options: dict[str, Any] = {"num_cpus": res["cpus"], "num_gpus": res["gpus"], "max_retries": 0}
    if isolate:
        options["max_calls"] = 1  # a fresh worker per cell (peak memory of its own)
    remote = ray.remote(**options)(_cell_task)
    started = connect(address, jobs)
    store = ResultStore(store_path)
    held: set[str] = set()
    claims: dict[Any, Any] = {}
    pending: dict[Any, Cell] = {}
    try:
        for cell in todo:
            claim = try_claim(store_path, cell.cell_id)
            if claim is None:
                held.add(cell.cell_id)
                continue
            if sum(r.cell_id == cell.cell_id for r in store.read()) > seen[cell.cell_id]:
                claim.release()  # another sweep recorded it since planning
                bar.update(1)
                continue
            ref = remote.remote(cell, cell_threads)
            pending[ref], claims[ref] = cell, claim
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            cell = pending.pop(ref)
            try:
                record = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - a dead worker or a task error fails this cell only
                record = failed_cell(cell, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", "ray")
            store.append({k: v for k, v in record.items() if k != CELL_SECONDS})
            claims.pop(ref).release()
            tick(bar, walls, jobs, record)
    finally:
        for claim in claims.values():
            claim.release()
        if pending and not started:  # stopped early on a cluster: its workers must not run on unseen
            for ref in pending:
                ray.cancel(ref, force=True)
        if started:
            ray.shutdown()  # a local instance: its workers end with it
    return held


run_cells_ray.requires = ("ray",)  # type: ignore[attr-defined]

__all__ = ["connect", "run_cells_ray", "worker_env"]
