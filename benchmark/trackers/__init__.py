"""Experiment trackers: a run's config, per-round curves and final metrics, reported to CSV
files, TensorBoard or MLflow as it runs (``output.trackers``; off by default).

Each tracker is a :class:`~benchmark.trackers.base.Tracker` registered by name in
``TRACKERS``, one per file. TensorBoard and MLflow are imported only when asked for
(``pip install -e .[track]``). The engine drives them through
:class:`~benchmark.trackers.base.Trackers`: a failing tracker warns and is dropped, never
costing the record.
"""

from benchmark.trackers import csv, mlflow, tensorboard  # noqa: F401  (register the built-in trackers)
from benchmark.trackers.base import (EXTRA, TRACKERS, Tracker, Trackers, check_trackers, flatten, round_metrics,
                                     run_name, tracker_names)

__all__ = ["EXTRA", "TRACKERS", "Tracker", "Trackers", "check_trackers", "flatten", "round_metrics", "run_name",
           "tracker_names"]
