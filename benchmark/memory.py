"""Peak memory of a run: sampled resident set size on CPU, allocator peak on CUDA.

``ru_maxrss`` is a high-water mark of the whole process, so a pooled worker would report
the largest earlier run; a sampling thread measures the peak within one run instead. The
RSS still includes the interpreter, torch, the loaded artifact and whatever earlier runs
in the same process left allocated, so ``growth_mb`` (peak minus the level at the start)
is recorded too, and ``sweep --isolate`` runs every cell in a fresh process so that both
numbers belong to that cell alone.
"""

from __future__ import annotations

import os
import resource
import threading
import time

import torch

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def current_rss_mb() -> float:
    """Resident set size now, in MiB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakMemory:
    """Context manager: ``peak_mb`` = highest RSS seen (CPU) or CUDA max allocated."""

    def __init__(self, device: torch.device, interval: float = 0.02) -> None:
        self.device = device
        self.interval = interval
        self.peak_mb = 0.0
        self.start_mb = 0.0  # what the process held when the run began (CPU: RSS; CUDA: allocated)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_mb = max(self.peak_mb, current_rss_mb())
            time.sleep(self.interval)

    def __enter__(self) -> "PeakMemory":
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start_mb = torch.cuda.memory_allocated(self.device) / 2**20
        else:
            self.peak_mb = self.start_mb = current_rss_mb()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.type == "cuda":
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        else:
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
            self.peak_mb = max(self.peak_mb, current_rss_mb())

    @property
    def growth_mb(self) -> float:
        """Peak minus the level at the start: the memory this run itself added."""
        return max(0.0, self.peak_mb - self.start_mb)
