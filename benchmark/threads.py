"""How many torch threads each cell of a sweep (or a submission run) may use."""

from __future__ import annotations

import os

from benchmark.errors import ConfigError

ENV = "FEDMM_THREADS"


#: threads of a cell when nothing says otherwise: CPU results depend on torch's intra-op thread
#: count (parallel reductions split their sums by thread), so the count must not follow the
#: machine's load; measured: FedMBridge, multiview_digits small, seed 0, test ACC 0.323 on one
#: thread and 0.385 on two, same config and code
DEFAULT_THREADS = 1


def threads_per_job(jobs: int) -> int:
    """Torch threads for each of ``jobs`` cells running at once: ``FEDMM_THREADS`` (a positive
    integer; 0 or unset means the default) wins, else ``DEFAULT_THREADS`` whatever the jobs,
    cores and load, so that a re-run of a cell on any machine gives the same numbers. Every
    record states the count it ran with (``provenance.threads``)."""
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigError(f"{ENV} must be a positive integer (or 0 for the default), got '{raw}'")
        if value > 0:
            return value
    return DEFAULT_THREADS
