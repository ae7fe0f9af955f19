"""deploy/flower/README.md, followed literally: its shell block (connection config, a SuperLink,
two SuperNodes on distinct ports, ``run_cell.py`` on the shipped ``run.yaml``) runs in bash
from the repository root. Checked: the cell's exit status, a line per round in the stream, the
record (ok, ``backend: flower-deployment``, the same metrics and ledger bytes as the cell run
in process), and that a failing run (an algorithm with no
federated form) makes the wrapper exit 1 with its reason. Only the environment's folders
(``FLWR_HOME``, ``FEDMM_DEPLOY_OUT``) point into the test's tmp folder."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from benchmark.config import load_config  # noqa: E402
from benchmark.engine import Engine  # noqa: E402
from benchmark.results import ResultStore  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
GUIDE = ROOT / "deploy" / "flower" / "README.md"
FAIL = ('python deploy/flower/run_cell.py local-deployment --config deploy/flower/run.yaml '
        '--results "$FEDMM_DEPLOY_OUT/failed.jsonl" --set algorithm.name=centralized; echo "failing-cell-exit=$?"\n')


def guide_block() -> str:
    """The README's shell block that holds the SuperLink command (the guide itself)."""
    blocks = re.findall(r"```bash\n(.*?)```", GUIDE.read_text(), flags=re.S)
    guide = [b for b in blocks if "flower-superlink" in b]
    assert len(guide) == 1, "deploy/flower/README.md should have one shell block that starts the SuperLink"
    return guide[0]


def test_guide_block_uses_distinct_ports_and_the_shipped_files():
    block = guide_block()
    ports = re.findall(r"flower_warm supernode .*--port (\d+)", block)
    assert len(ports) == 2 and len(set(ports)) == 2
    warm = re.findall(r"flower_warm .*--runtime-api-address 127\.0\.0\.1:(\d+)", block)
    assert sorted(warm) == sorted(ports)  # a warm executor beside each SuperNode
    assert "deploy/flower/flwr-config.toml" in block and "deploy/flower/run.yaml" in block
    import yaml

    nodes = len(re.findall(r"flower_warm supernode ", block))
    assert yaml.safe_load((ROOT / "deploy/flower/run.yaml").read_text())["partition"]["num_clients"] == nodes


@pytest.mark.skipif(shutil.which("flower-superlink", path=str(BIN)) is None, reason="Flower's CLIs are not installed")
def test_deploy_guide_runs_as_written(tmp_path):
    block = guide_block()
    step4 = block.index("# 4.")
    # the test's additions: the cell's exit status, and a failing cell while the nodes still run
    cell_end = block.index("\n\n", block.index("run_cell.py"))
    script = (block[:cell_end] + '\necho "cell-exit=$?"\n' + block[cell_end:step4] + FAIL + block[step4:])
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr"), "FEDMM_DEPLOY_OUT": str(tmp_path / "out"),
           "FLWR_TELEMETRY_ENABLED": "0", "FEDMM_THREADS": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(["bash", "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail("the guide did not finish within 540 s:\n" + out[-4000:])
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything the block's own kill missed
        except ProcessLookupError:
            pass
    assert "cell-exit=0" in out, out[-4000:]
    assert re.search(r"fedmm: round 1/3: 2 clients trained", out), out[-4000:]
    assert re.search(r"fedmm: round 3/3", out), out[-4000:]
    records = ResultStore(tmp_path / "out" / "deployed.jsonl").read()
    assert len(records) == 1
    rec = records[0]
    assert rec.status == "ok" and rec.backend == "flower-deployment" and rec.rounds_run == 3
    assert rec.config["algorithm"]["name"] == "fedprox" and rec.comm["bytes_up"] > 0
    local = Engine(load_config(str(ROOT / "deploy/flower/run.yaml"), [])).run()  # the same cell in process
    assert local["status"] == "ok" and rec.metrics.keys() == local["metrics"].keys()
    for k, v in local["metrics"].items():
        assert rec.metrics[k] == pytest.approx(v, abs=1e-6), k
    assert rec.comm["bytes_up"] == local["comm"]["bytes_up"] and rec.comm["bytes_down"] == local["comm"]["bytes_down"]
    assert "failing-cell-exit=1" in out, out[-4000:]
    assert "run_cell: the run failed: BenchmarkError: algorithm 'centralized' is a centralized" in out
    failed = ResultStore(tmp_path / "out" / "failed.jsonl").read()
    assert [r.status for r in failed] == ["failed"] and failed[0].backend == "flower-deployment"


def test_run_cell_fails_fast_on_bad_input(tmp_path):
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr"), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    script = str(ROOT / "deploy" / "flower" / "run_cell.py")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, script, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)

    if shutil.which("flwr", path=str(BIN)) is None:
        pytest.skip("the flwr CLI is not installed")
    r = run("local-deployment", "--results", "r.jsonl")
    assert r.returncode == 2 and "no Flower config" in r.stderr
    (tmp_path / "flwr").mkdir()
    shutil.copy(ROOT / "deploy/flower/flwr-config.toml", tmp_path / "flwr" / "config.toml")
    r = run("elsewhere", "--results", "r.jsonl")
    assert r.returncode == 2 and "connection 'elsewhere' is not in" in r.stderr and "local-deployment" in r.stderr
    r = run("local-deployment", "--results", "r.jsonl", "--config", "nope.yaml")
    assert r.returncode == 2 and "nope.yaml not found" in r.stderr
    r = run("local-deployment", "--results", "r.jsonl", "--link-wait", "2")  # nothing listens on 9093
    assert r.returncode == 2 and "no SuperLink answers at 127.0.0.1:9093 within 2 s" in r.stderr
