"""benchmarks/gpu_session.sh cannot rot between the sessions that are lent a GPU: its KG
paper-round and Table VI steps run here on the CPU at small size (DEVICE=cpu SMALL=1), writing
their logs and records under OUT, and every record is ok (the bench steps have their own tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_session_script_runs_on_cpu_at_small_size(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "DEVICE": "cpu", "SMALL": "1", "STEPS": "4 5", "PY": sys.executable,
           "FEDMM_THREADS": "1"}
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_session.sh")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "cuda False" in (tmp_path / "device.txt").read_text()
    rounds = [json.loads(line) for line in (tmp_path / "paper_rounds.jsonl").read_text().splitlines()]
    assert [r["config"]["algorithm"]["name"] for r in rounds] == ["mmfede", "mmfed3"]
    for rec in rounds:
        assert rec["status"] == "ok" and rec["config"]["train"]["device"] == "cpu" and rec["rounds_run"] == 1
    table6 = [json.loads(line) for line in (tmp_path / "mmfed3_table6" / "paper.jsonl").read_text().splitlines()]
    assert [r["config"]["algorithm"] for r in table6] == [{"name": "s_ind"}, {"name": "mmcen", "fusion": "concat"}]
    for rec in table6:
        assert rec["status"] == "ok" and rec["provenance"]["device"].startswith("cpu") and rec["seed"] == 0
        assert rec["config"]["partition"]["num_clients"] == 3
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) <= 8, files  # the most the device tool brings back
