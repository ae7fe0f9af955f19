"""One cell of a suite: its identity (:class:`Cell`, a stable id from suite, scale, grid values
and seed), how one is run and stamped into a record, and the progress bar's tick.

Why its own module: the sweep backends (``joblib`` in ``benchmark.sweep``, ``ray`` in
``benchmark.backends.ray_sweep``) both run cells; with this below them, neither backend
imports the sweep that picks it, so the import graph has no circle (the Ray backend used to
import ``benchmark.sweep``, which finds the backend by name).
"""

from __future__ import annotations

import hashlib
import json
import os
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmark.config import build_run_config
from benchmark.record import Record, failed_record
from benchmark.results import ResultStore, now_iso


@dataclass
class Cell:
    """One run of a suite: grid values, seed, and the merged run config mapping."""

    suite: str
    scale: str
    params: dict[str, Any]
    seed: int
    config: dict[str, Any]
    # the tuning study whose choice is merged into ``config`` (benchmark.tuned), else None;
    # not part of the cell's identity: a tuned cell is the same cell, run with better settings
    tuning: dict[str, Any] | None = None

    @property
    def cell_id(self) -> str:
        key = json.dumps({"suite": self.suite, "scale": self.scale, "params": self.params, "seed": self.seed},
                         sort_keys=True, default=str)
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def algorithm(self) -> str:
        return str((self.config.get("algorithm") or {}).get("name", "fedavg"))

    @property
    def task(self) -> str:
        return str((self.config.get("task") or {}).get("name", "node_cls"))


def applicable(cell: Cell) -> bool:
    """False when the cell's algorithm is registered and does not declare the cell's task.

    Such a cell is N/A by definition (a prototype method has no link-prediction head): it is
    neither run nor recorded as failed, and tables print N/A for it. An unregistered
    algorithm counts as applicable, so its cell fails loudly instead of vanishing.
    """
    from benchmark import registry as R

    return R.applicable(cell.algorithm, cell.task)


def _failed_record(cell: Cell, reason: str, rnd: int = -1) -> dict[str, Any]:
    return failed_record(cell.seed, reason, rnd, now_iso()).to_dict()


def execute_cell(cell: Cell, threads: int = 1, backend: str = "joblib") -> dict[str, Any]:
    """Run one cell in this process and return its record (ok or failed); stores nothing.
    ``backend`` names the sweep backend that ran it, in the record."""
    torch.set_num_threads(max(1, threads))
    from benchmark.engine import Engine

    try:
        cfg = build_run_config(cell.config)
        record = Engine(cfg).run()
    except Exception as e:  # noqa: BLE001 - a failing cell is recorded, the sweep goes on
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
        record = _failed_record(cell, f"{type(e).__name__}: {e}{where}")
    return stamp(cell, record, backend)


def stamp(cell: Cell, record: dict[str, Any], backend: str = "joblib",
          worker_pid: int | None = None) -> dict[str, Any]:
    """The cell's identity on its record (suite, scale, id, grid values, seed), the sweep
    backend that ran it and the worker process (-1 when the driver records a worker's death)."""
    stamped = Record.from_dict(record).stamped(
        suite=cell.suite, scale=cell.scale, cell_id=cell.cell_id, params=cell.params, seed=cell.seed,
        sweep_backend=backend, worker_pid=os.getpid() if worker_pid is None else worker_pid,
        tuning=cell.tuning)
    record.clear()  # callers hold this dict: it becomes the stamped record in place
    record.update(stamped.to_dict())
    return record


def failed_cell(cell: Cell, reason: str, backend: str = "joblib") -> dict[str, Any]:
    """The record of a cell whose worker died or raised outside the engine: recorded by the
    driver, which is not the worker, so no worker pid is claimed."""
    return stamp(cell, _failed_record(cell, reason), backend, worker_pid=-1)


def run_cell(cell: Cell, results_path: str, threads: int = 1) -> dict[str, Any]:
    """Run one cell in this process and append its record (ok or failed) to the store."""
    record = execute_cell(cell, threads)
    ResultStore(results_path).append(record)
    return record


HELD = "held"  # status of a cell another live sweep holds (not a record; never stored)
CELL_SECONDS = "_cell_seconds"  # wall time of a cell run here, data build included (never stored)


def tick(bar: Any, walls: list[float], jobs: int, msg: dict[str, Any]) -> None:
    """One finished cell on the progress bar, with the ETA from finished cells' wall times.
    ``msg`` is a worker's answer: the cell's record as JSON and its seconds (``CELL_SECONDS``)."""
    if isinstance(msg.get(CELL_SECONDS), float):
        walls.append(msg[CELL_SECONDS])
    bar.update(1)
    bar.set_postfix_str(f"{msg.get('status')}{_eta(walls, bar.total - bar.n, jobs)}")


def _eta(walls: list[float], remaining: int, jobs: int) -> str:
    """Remaining time from the mean wall time of the cells finished so far, ``jobs`` at a time."""
    if not walls or remaining <= 0:
        return ""
    secs = sum(walls) / len(walls) * remaining / max(1, jobs)
    return f" eta {int(secs // 3600)}:{int(secs % 3600 // 60):02d}:{int(secs % 60):02d}"


__all__ = ["CELL_SECONDS", "Cell", "HELD", "applicable", "execute_cell", "failed_cell", "run_cell", "stamp", "tick"]
