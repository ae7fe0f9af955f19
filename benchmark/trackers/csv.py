"""Plain CSV files per run (standard library only)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from benchmark.record import Record
from benchmark.registry import TRACKERS
from benchmark.trackers.base import Tracker, as_text

ROUNDS_FILE = "rounds.csv"   # round, then one column per curve (empty where not measured)
PARAMS_FILE = "params.csv"   # kind (config | tag), key, value
FINAL_FILE = "final.csv"     # key, value: status, best_round, rounds_run, then the final metrics


def _write(path: Path, rows: list[list[Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)
    tmp.replace(path)


@TRACKERS.register("csv")
class CSVTracker(Tracker):
    """rounds.csv (one row per round), params.csv and final.csv under <tracker_dir>/<run>/."""

    def __init__(self, root: Path, name: str) -> None:
        super().__init__(root, name)
        self.columns: list[str] = []
        self.rows: list[dict[str, Any]] = []

    def start(self, config: dict[str, Any], tags: dict[str, str]) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        rows: list[list[Any]] = [["kind", "key", "value"]]
        rows += [["config", k, as_text(v)] for k, v in config.items()]
        rows += [["tag", k, v] for k, v in tags.items()]
        _write(self.run_dir / PARAMS_FILE, rows)
        for stale in (ROUNDS_FILE, FINAL_FILE):  # a run of the same config before this one
            (self.run_dir / stale).unlink(missing_ok=True)
        self.columns, self.rows = [], []

    def log_round(self, round: int, metrics: dict[str, float]) -> None:
        row = {"round": round, **metrics}
        self.rows.append(row)
        path = self.run_dir / ROUNDS_FILE
        new = [k for k in row if k not in self.columns]
        if new or not path.exists():  # a curve that starts later (a method's extra split): rewrite with its column
            self.columns += new
            _write(path, [self.columns] + [[r.get(c, "") for c in self.columns] for r in self.rows])
            return
        with open(path, "a", newline="", encoding="utf-8") as f:
            csv.writer(f).writerow([row.get(c, "") for c in self.columns])

    def finish(self, record: Record) -> None:
        rows: list[list[Any]] = [["key", "value"], ["status", record.status], ["best_round", record.best_round],
                                 ["rounds_run", record.rounds_run]]
        if record.reason:
            rows.append(["error", record.reason])
        rows += [[k, v] for k, v in record.metrics.items()]
        _write(self.run_dir / FINAL_FILE, rows)
