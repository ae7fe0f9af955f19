"""With a `ray start` cluster running on this host (as docs/scaling.md has
the user start one), a Ray sweep without --address and a Flower simulation both start a Ray
instance of their own and finish: before, ray.init joined the running cluster and refused
the CPU count (the sweep failed with a traceback, the simulation hung)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("ray")
pytest.importorskip("flwr")

from small_configs import tiny_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def running_cluster():
    ray_bin = Path(sys.executable).with_name("ray")
    if not ray_bin.exists() or shutil.which("ps") is None:
        pytest.skip("the ray CLI is not installed next to this Python")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    up = subprocess.run([str(ray_bin), "start", "--head", "--port", str(_free_port()), "--num-cpus", "1",
                         "--include-dashboard", "false", "--disable-usage-stats"],
                        capture_output=True, text=True, timeout=120, env=env)
    assert up.returncode == 0, up.stderr[-2000:]
    try:
        yield env
    finally:
        subprocess.run([str(ray_bin), "stop", "--force"], capture_output=True, timeout=120, env=env)


@pytest.mark.slow
def test_sweep_and_flower_run_beside_a_running_cluster(running_cluster, tmp_path):
    env = {**running_cluster, "FEDMM_THREADS": "1", "FEDMM_FLOWER_CPUS": "2"}
    sweep = subprocess.run([sys.executable, "run_benchmark.py", "sweep", "ci", "--scale", "tiny", "--backend", "ray",
                            "--jobs", "1", "--only", "algorithm.name=fedavg", "--only", "seed=0",
                            "--results", str(tmp_path / "res")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    records = [json.loads(line) for p in (tmp_path / "res").rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert records and all(r["status"] == "ok" and r["sweep_backend"] == "ray" for r in records)

    cfg = tiny_config("fedavg", "node_cls", tmp_path / "cache", rounds=2)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    run = subprocess.run([sys.executable, "run_benchmark.py", "run", str(path), "--backend", "flower",
                          "--out", str(tmp_path / "flower.jsonl")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads((tmp_path / "flower.jsonl").read_text().splitlines()[-1])
    assert record["status"] == "ok" and record["backend"] == "flower-simulation"
