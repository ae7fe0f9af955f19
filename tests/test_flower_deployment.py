"""The Flower deployment engine: a real SuperLink and two SuperNodes as separate processes on
127.0.0.1, ``flwr run deploy/flower`` for two rounds of FedAvg, the record checked against the
in-process run. Every process is stopped in a ``finally``, each bounded in time."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("flwr")

from benchmark.config import load_config  # noqa: E402
from benchmark.engine import Engine  # noqa: E402
from benchmark.results import ResultStore  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
CONFIG = {"dataset": {"name": "synthetic", "num_nodes": 240}, "partition": {"name": "louvain", "num_clients": 2},
          "missing": {"name": "node_level", "rate": 0.3}, "algorithm": {"name": "fedavg"}, "model": {"hidden": 16},
          "train": {"rounds": 2, "local_epochs": 1, "lr": 0.01, "device": "cpu"}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[0]} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.3)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=15)


@pytest.mark.skipif(shutil.which("flower-superlink", path=str(BIN)) is None, reason="Flower's CLIs are not installed")
def test_superlink_and_two_supernodes_run_fedavg_like_in_process(tmp_path):
    cfg_dict = {**CONFIG, "output": {"cache_dir": str(tmp_path / "cache"), "checkpoint_dir": str(tmp_path / "ckpt")}}
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(yaml.safe_dump(cfg_dict))
    home, results = tmp_path / "flwr_home", tmp_path / "deployed.jsonl"
    home.mkdir()
    link = _free_port()
    (home / "config.toml").write_text(f'[superlink]\ndefault = "fedmm-test"\n\n[superlink.fedmm-test]\n'
                                      f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0", "FEDMM_THREADS": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, *args: str) -> subprocess.Popen:
        out = (logs / f"{name}.log").open("w")
        return subprocess.Popen([str(BIN / args[0]), *args[1:]], cwd=tmp_path, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)

    procs: list[subprocess.Popen] = []
    try:
        procs.append(start("superlink", "flower-superlink", "--insecure", "--disable-runtime-dependency-installation",
                           "--host", "127.0.0.1", "--port", str(link)))
        _wait_for_port(link, procs[0], 60)
        for pid in range(2):
            port = _free_port()
            procs.append(start(f"supernode{pid}", "flower-supernode", "--insecure", "--superlink", f"127.0.0.1:{link}",
                               "--host", "127.0.0.1", "--port", str(port), "--node-config", f"partition-id={pid}"))
            _wait_for_port(port, procs[-1], 60)
        out = subprocess.run([str(BIN / "flwr"), "run", str(ROOT / "deploy" / "flower"), "fedmm-test", "--stream",
                              "--run-config", f'config="{run_yaml}" results="{results}"'],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert "fedmm: ok fedavg seed 0" in out.stdout, out.stdout[-3000:]
    finally:
        _stop(procs)
    assert all(p.poll() is not None for p in procs)
    deployed = ResultStore(results).read()
    assert len(deployed) == 1 and deployed[0]["backend"] == "flower"
    local = Engine(load_config(str(run_yaml), [])).run()
    rec = deployed[0]
    assert rec["status"] == local["status"] == "ok"
    assert rec["metrics"].keys() == local["metrics"].keys()
    for k, v in local["metrics"].items():
        assert rec["metrics"][k] == pytest.approx(v, abs=1e-6), k
    assert rec["comm"]["bytes_up"] == local["comm"]["bytes_up"] > 0
    assert rec["comm"]["bytes_down"] == local["comm"]["bytes_down"]
    assert rec["rounds_run"] == 2
