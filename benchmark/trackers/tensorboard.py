"""TensorBoard event files per run (``torch.utils.tensorboard``; the ``track`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark.record import Record
from benchmark.registry import TRACKERS
from benchmark.trackers.base import Tracker, as_text

#: how TensorBoard's event files are named
EVENTS = "events.out.tfevents."
#: prefix of the final metrics (the record's ``metrics``: scores at the best round)
FINAL = "best/"


def _table(items: dict[str, Any]) -> str:
    """A markdown table (TensorBoard's text tab renders it)."""
    rows = [f"| {k} | {as_text(v).replace('|', '/')} |" for k, v in items.items()]
    return "\n".join(["| key | value |", "|---|---|", *rows])


def _hparam(value: Any) -> Any:
    """What TensorBoard's hparams accept: numbers, strings, bools; anything else as text."""
    return value if isinstance(value, (bool, int, float, str)) else as_text(value)


@TRACKERS.register("tensorboard")
class TensorBoardTracker(Tracker):
    """Scalars, the config and provenance as text, hparams; `tensorboard --logdir <tracker_dir>`."""

    requires = ("tensorboard",)

    def __init__(self, root: Path, name: str) -> None:
        super().__init__(root, name)
        self._tb = self.require("torch.utils.tensorboard")
        self._summary = self.require("torch.utils.tensorboard.summary")
        self.writer: Any = None
        self.config: dict[str, Any] = {}

    def _scalar(self, tag: str, value: float, step: int) -> None:
        # classic scalar summaries: what TensorBoard's Scalars tab and EventAccumulator.Scalars()
        # read (float32; the record keeps the exact values)
        self.writer.add_scalar(tag, float(value), step)

    def start(self, config: dict[str, Any], tags: dict[str, str]) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # the folder holds the latest run of this config (a resumed run replays its earlier
        # rounds): an earlier run's events would draw a second curve over this one
        for old in self.run_dir.glob(f"{EVENTS}*"):
            old.unlink(missing_ok=True)
        self.writer = self._tb.SummaryWriter(log_dir=str(self.run_dir), flush_secs=10)
        self.config = dict(config)
        self.writer.add_text("config", _table(config), 0)
        self.writer.add_text("provenance", _table(tags), 0)

    def log_round(self, round: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self._scalar(key, value, round)

    def finish(self, record: Record) -> None:
        step = max(record.best_round, 0) + 1  # rounds counted as in log_round
        final = {f"{FINAL}{k}": float(v) for k, v in record.metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for key, value in final.items():
            self._scalar(key, value, step)
        reason = record.reason
        self.writer.add_text("status", record.status + (f": {reason}" if reason else ""), step)
        # the hparams tab: this run's config beside its final metrics (in this run's own folder)
        for summary in self._summary.hparams({k: _hparam(v) for k, v in self.config.items()}, final):
            self.writer.file_writer.add_summary(summary)
        self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
