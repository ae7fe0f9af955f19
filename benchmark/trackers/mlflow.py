"""MLflow runs in a local SQLite store (``sqlite:///<tracker_dir>/mlflow.db``; the ``track`` extra).

No server: the store is one file that ``mlflow ui --backend-store-uri sqlite:///...`` opens.
MLflow 3 refuses the old file store, hence SQLite (SQLAlchemy and Alembic, which make the
tables the first time, come with the ``track`` extra).
"""

from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmark.record import Record
from benchmark.registry import TRACKERS
from benchmark.safe_yaml import clip
from benchmark.trackers.base import Tracker, as_text

DB_FILE = "mlflow.db"
EXPERIMENT = "fedmm-bench"
#: prefix of the final metrics (the record's ``metrics``: scores at the best round)
FINAL = "best/"
BATCH = 100            # MLflow takes at most 100 params (1000 metrics) per log_batch
MAX_PARAM_CHARS = 6000  # MLflow's limit on a param value
MAX_TAG_CHARS = 5000


def tracking_uri(root: Path) -> str:
    """The MLflow tracking URI of the store under ``root``."""
    return f"sqlite:///{(Path(root) / DB_FILE).resolve()}"


@contextmanager
def _store_lock(root: Path) -> Iterator[None]:
    """One process at a time creates the store's tables and the experiment (parallel sweep
    workers would otherwise race the schema migration)."""
    with open(root / f"{DB_FILE}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextmanager
def _quiet() -> Iterator[None]:
    """MLflow and Alembic announce the table creation at INFO on stderr: keep them quiet."""
    loggers = [logging.getLogger(n) for n in ("mlflow", "alembic")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@TRACKERS.register("mlflow")
class MLflowTracker(Tracker):
    """An MLflow run per run, in the local store <tracker_dir>/mlflow.db (no server)."""

    requires = ("mlflow", "sqlalchemy", "alembic")

    def __init__(self, root: Path, name: str) -> None:
        super().__init__(root, name)
        self._tracking = self.require("mlflow.tracking")
        self._entities = self.require("mlflow.entities")
        self.require("sqlalchemy")
        self.require("alembic")
        self.client: Any = None
        self.run_id: str | None = None

    @staticmethod
    def _now() -> int:
        return int(time.time() * 1000)

    def start(self, config: dict[str, Any], tags: dict[str, str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with _store_lock(self.root), _quiet():
            client = self._tracking.MlflowClient(tracking_uri=tracking_uri(self.root))
            exp = client.get_experiment_by_name(EXPERIMENT)
            exp_id = exp.experiment_id if exp is not None else client.create_experiment(
                EXPERIMENT, artifact_location=(self.root / "mlartifacts").resolve().as_uri())
        run_tags = {k: clip(v, MAX_TAG_CHARS) for k, v in tags.items()}
        if "git_sha" in tags:
            run_tags["mlflow.source.git.commit"] = tags["git_sha"]  # MLflow's own column for it
        run = client.create_run(exp_id, run_name=self.name, tags=run_tags)
        self.client, self.run_id = client, run.info.run_id
        params = [self._entities.Param(k, as_text(v)[:MAX_PARAM_CHARS]) for k, v in config.items()]
        for i in range(0, len(params), BATCH):
            client.log_batch(self.run_id, params=params[i:i + BATCH])

    def _metrics(self, metrics: dict[str, float], step: int) -> None:
        now = self._now()
        batch = [self._entities.Metric(k, float(v), now, step) for k, v in metrics.items()]
        for i in range(0, len(batch), 10 * BATCH):
            self.client.log_batch(self.run_id, metrics=batch[i:i + 10 * BATCH])

    def log_round(self, round: int, metrics: dict[str, float]) -> None:
        self._metrics(metrics, round)

    def finish(self, record: Record) -> None:
        step = max(record.best_round, 0) + 1  # rounds counted from 1, as in log_round
        final = {f"{FINAL}{k}": v for k, v in record.metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        final["best_round"] = record.best_round
        self._metrics(final, step)
        status = record.status
        self.client.set_tag(self.run_id, "status", status)
        if record.reason:
            self.client.set_tag(self.run_id, "error", clip(record.reason, MAX_TAG_CHARS))
        run_id, self.run_id = self.run_id, None
        self.client.set_terminated(run_id, "FINISHED" if status == "ok" else "FAILED")

    def close(self) -> None:
        """A run that raised before ``finish``: its MLflow run ends as FAILED."""
        if self.client is not None and self.run_id is not None:
            run_id, self.run_id = self.run_id, None
            self.client.set_terminated(run_id, "FAILED")
