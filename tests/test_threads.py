"""threads_per_job: one thread per cell whatever the jobs, cores and load (CPU results depend on
the thread count, so it must not follow the load); FEDMM_THREADS wins; records state it."""

from __future__ import annotations

import pytest

from benchmark.errors import ConfigError
from benchmark.threads import DEFAULT_THREADS, threads_per_job


@pytest.fixture
def machine(monkeypatch):
    monkeypatch.delenv("FEDMM_THREADS", raising=False)

    def set_machine(cpus: int, load: float) -> None:
        monkeypatch.setattr("benchmark.threads.os.cpu_count", lambda: cpus)
        monkeypatch.setattr("benchmark.threads.os.getloadavg", lambda: (load, load, load))

    return set_machine


@pytest.mark.parametrize("cpus, load", [(64, 0.0), (16, 5.4), (2, 3.0), (1, 0.0)])
def test_the_count_is_the_default_whatever_the_jobs_cores_and_load(machine, cpus, load):
    machine(cpus, load)
    assert DEFAULT_THREADS == 1
    assert threads_per_job(1) == threads_per_job(2) == threads_per_job(16) == 1


def test_fedmm_threads_overrides(machine, monkeypatch):
    machine(16, 0.0)
    monkeypatch.setenv("FEDMM_THREADS", "3")
    assert threads_per_job(1) == 3 and threads_per_job(4) == 3
    monkeypatch.setenv("FEDMM_THREADS", "0")  # 0: the default
    assert threads_per_job(1) == 1


@pytest.mark.parametrize("bad", ["-1", "two", "1.5"])
def test_bad_fedmm_threads_is_a_config_error(machine, monkeypatch, bad):
    monkeypatch.setenv("FEDMM_THREADS", bad)
    with pytest.raises(ConfigError, match="FEDMM_THREADS"):
        threads_per_job(1)


def test_every_record_states_its_thread_count():
    import torch

    from benchmark.config import build_run_config
    from benchmark.results import provenance

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert provenance(build_run_config({}), "h", "r", torch.device("cpu"))["threads"] == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("env, expected", [("", 1), ("2", 2)])
def test_the_run_verb_uses_the_sweep_count_and_records_it(monkeypatch, tmp_path, env, expected):
    import json

    import torch

    from fedmm_bench.cli import main

    monkeypatch.setenv("FEDMM_THREADS", env)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        out = tmp_path / "r.jsonl"
        assert main(["run", "--set", "dataset.num_nodes=120", "--set", "train.rounds=1", "--set",
                     "partition.num_clients=2", "--out", str(out)]) == 0
        assert json.loads(out.read_text())["provenance"]["threads"] == expected == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


def test_records_name_the_cpu_whose_kernels_made_them():
    """CPU numbers depend on the CPU's kernels as well as the thread count, so provenance names
    the model, the vendor and the kernel set torch dispatches to."""
    import torch

    from benchmark.config import build_run_config
    from benchmark.results import cpu_identity, provenance

    cpu = provenance(build_run_config({}), "h", "r", torch.device("cpu"))["cpu"]
    assert cpu == cpu_identity() and cpu["capability"] == str(torch.backends.cpu.get_cpu_capability())
    assert cpu["model"]
