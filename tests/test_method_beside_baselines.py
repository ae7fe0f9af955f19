"""A new method runs beside a suite's stored baselines and shows up as a row among them.

The README's "Add a method" commands are run literally (in a folder holding a copy of the
demo's stored records, so the committed store is untouched), and ``sweep --with-method`` runs
only the added method's cells.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.record import latest_records
from benchmark.results import ResultStore
from benchmark.sweep import load_suite

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "results" / "demo" / "small.jsonl"


def _demo_copy(where: Path) -> Path:
    store = where / "results" / "demo" / "small.jsonl"
    store.parent.mkdir(parents=True)
    shutil.copy(DEMO, store)
    return store


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## Add a method and see it beside the baselines\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert section, "README.md has no 'Add a method' section"
    block = re.search(r"```bash\n(.*?)```", section.group(1), flags=re.S)
    assert block
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]


@pytest.mark.slow
def test_the_readmes_add_a_method_path_runs_literally(tmp_path: Path) -> None:
    store = _demo_copy(tmp_path)
    before = len(ResultStore(store).read())
    out = ""
    for line in _readme_commands():  # the repository's files named where they are
        argv = [str(ROOT / a) if a in ("methods/template.py", "run_benchmark.py") else a for a in shlex.split(line)]
        if argv[0] == "python":
            argv[0] = sys.executable
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{line}: {done.stderr[-2000:]}"
        out += done.stdout
    assert re.search(r"demo\[small\]: 3 cells beside the stored baselines; about \d+ CPU-seconds", out), out
    records = ResultStore(store).read()
    new = records[before:]
    assert len(new) == 3 and {r.params["algorithm.name"] for r in new} == {"template"}
    assert all(r.ok and r.config["algorithm"]["name"] == "template" and r.seed == 0 for r in new)
    board = (tmp_path / "tables" / "leaderboard_demo.md").read_text(encoding="utf-8")
    rows = [line for line in board.splitlines() if line.startswith("|")]
    assert any("| Template " in line for line in rows), "no Template row"
    assert any("| FedAvg-Zero " in line for line in rows), "the baselines are not beside it"
    html = (tmp_path / "tables" / "leaderboard.html").read_text(encoding="utf-8")
    assert "Template" in html


@pytest.mark.slow
def test_sweep_with_method_runs_only_its_cells_and_the_table_shows_it(tmp_path: Path) -> None:
    store = _demo_copy(tmp_path)
    before = ResultStore(store).read()
    done = subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), "sweep", "demo", "--with-method", "fedlap",
                           "--only", "missing.rate=0.0", "--only", "seed=0", "--results", str(tmp_path / "results")],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    after = ResultStore(store).read()
    assert [r.cell_id for r in after[:len(before)]] == [r.cell_id for r in before]
    new = after[len(before):]
    assert len(new) == 1 and new[0].params == {"algorithm.name": "fedlap", "missing.rate": 0.0}
    assert new[0].config["algorithm"]["name"] == "fedlap" and new[0].scale == "small"
    # its cell id is the one it would have if the suite's grid listed it
    suite = load_suite("demo")
    assert suite.grids is not None
    suite.grids[0]["algorithm.name"].append("fedlap")
    assert new[0].cell_id in {c.cell_id for c in suite.cells("small", validate=False)}
    table = subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), "table", "demo", "--results",
                            str(tmp_path / "results"), "--out", str(tmp_path / "tables")],
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert table.returncode == 0, table.stderr[-2000:]
    rows = [line.split("|")[1].strip() for line in table.stdout.splitlines() if line.startswith("| ")]
    assert "FedLAP" in rows and rows.index("FedLAP") < rows.index("Chance (reference)")
    assert {"Local", "FedAvg-Zero", "FedGCN"} <= set(rows)
    assert len(latest_records(after)) == len(latest_records(before)) + 1


@pytest.mark.parametrize(("method", "message"), [
    ("fedavg", "already runs it; choose its cells with --only algorithm.name=fedavg"),
    ("fedlapp", "no such algorithm (did you mean 'fedlap'?)"),
    ("mmfede", "declares none of the tasks"),
])
def test_with_method_refuses_with_one_line(tmp_path: Path, method: str, message: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), "sweep", "demo", "--with-method", method,
                           "--results", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert not any(tmp_path.iterdir())
