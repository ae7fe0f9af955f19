"""threads_per_job: one thread per parallel cell, idle cores for a lone cell, FEDMM_THREADS wins."""

from __future__ import annotations

import pytest

from benchmark.errors import ConfigError
from benchmark.threads import threads_per_job


@pytest.fixture
def machine(monkeypatch):
    monkeypatch.delenv("FEDMM_THREADS", raising=False)

    def set_machine(cpus: int, load: float) -> None:
        monkeypatch.setattr("benchmark.threads.os.cpu_count", lambda: cpus)
        monkeypatch.setattr("benchmark.threads.os.getloadavg", lambda: (load, load, load))

    return set_machine


def test_parallel_jobs_get_one_thread_each_whatever_the_cores(machine):
    machine(64, 0.0)
    assert threads_per_job(2) == 1 and threads_per_job(16) == 1


def test_a_lone_job_gets_the_idle_cores(machine):
    machine(16, 0.0)
    assert threads_per_job(1) == 16
    machine(16, 5.4)
    assert threads_per_job(1) == 11
    machine(2, 3.0)  # a busy shared machine: still one thread
    assert threads_per_job(1) == 1


def test_no_load_average_means_all_cores(machine, monkeypatch):
    machine(8, 0.0)

    def unavailable():
        raise OSError("no load average")

    monkeypatch.setattr("benchmark.threads.os.getloadavg", unavailable)
    assert threads_per_job(1) == 8


def test_fedmm_threads_overrides(machine, monkeypatch):
    machine(16, 0.0)
    monkeypatch.setenv("FEDMM_THREADS", "3")
    assert threads_per_job(1) == 3 and threads_per_job(4) == 3
    monkeypatch.setenv("FEDMM_THREADS", "0")  # 0: automatic
    assert threads_per_job(1) == 16


@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_bad_fedmm_threads_is_a_config_error(machine, monkeypatch, bad):
    monkeypatch.setenv("FEDMM_THREADS", bad)
    with pytest.raises(ConfigError, match="FEDMM_THREADS"):
        threads_per_job(1)
