"""How many torch threads each cell of a sweep (or a submission run) may use."""

from __future__ import annotations

import os

from benchmark.errors import ConfigError

ENV = "FEDMM_THREADS"


def threads_per_job(jobs: int) -> int:
    """Torch threads for each of ``jobs`` cells running at once.

    ``FEDMM_THREADS`` (a positive integer; 0 or unset means automatic) wins. Otherwise parallel cells get one thread each
    (splitting the cores between jobs oversubscribes as soon as anything else runs), and a
    lone cell gets the cores the machine's 1-minute load average leaves idle, at least one.
    """
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise ConfigError(f"{ENV} must be a positive integer (or 0 for automatic), got '{raw}'")
        if value > 0:
            return value
    if jobs > 1:
        return 1
    cpus = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        load = 0.0
    return max(1, min(cpus, cpus - round(load)))
