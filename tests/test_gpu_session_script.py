"""benchmarks/gpu_session.sh cannot rot between the sessions that are lent a GPU: its graph
paper-round step runs here on the CPU at small size (DEVICE=cpu SMALL=1), writing its logs
under OUT, and each paper round's record is ok (the bench steps have their own tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_session_script_runs_on_cpu_at_small_size(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "DEVICE": "cpu", "SMALL": "1", "STEPS": "4", "PY": sys.executable,
           "FEDMM_THREADS": "1"}
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "cuda False" in (tmp_path / "device.txt").read_text()
    for algo in ("mmfede", "mmfed3"):
        rec = json.loads((tmp_path / f"paper_round_{algo}.jsonl").read_text().splitlines()[-1])
        assert rec["status"] == "ok" and rec["config"]["algorithm"]["name"] == algo
        assert rec["config"]["train"]["device"] == "cpu" and rec["rounds_run"] == 1
