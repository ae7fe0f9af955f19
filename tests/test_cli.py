"""CLI: bad input gives one line on stderr, exit code 2, and writes nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fedmm_bench.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


BAD = [
    (["run", "--set", "algorithm.name=fedavgg"], "did you mean 'fedavg'"),
    (["run", "--set", "partition.alpha=0"], "alpha"),
    (["run", "--set", "partition.alpha=-1"], "alpha"),
    (["run", "--set", "missing.rate=1.5"], "rate"),
    (["run", "--set", "missing.rate=-0.1"], "rate"),
    (["prepare", "--set", "dataset.num_nodes=50", "--set", "partition.num_clients=80"], "clients"),
    (["run", "--set", "train.roundz=3"], "did you mean 'rounds'"),
    (["sweep", "demoo"], "did you mean 'demo'"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_one_line_exit_2_nothing_written(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert needle in lines[0]
    assert list(tmp_path.iterdir()) == [], "bad input must write nothing"


def test_bad_input_through_the_real_entry_point(tmp_path):
    """The same contract seen from a shell: exit status 2 and one line on stderr."""
    proc = _run_cli(["run", "--set", "missing.rate=1.5"], tmp_path)
    assert proc.returncode == 2
    assert [ln for ln in proc.stderr.splitlines() if ln.strip()] == [proc.stderr.strip()]
    assert "rate" in proc.stderr and list(tmp_path.iterdir()) == []


def test_malformed_yaml_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("train:\n  rounds: [1,\n")
    assert main(["run", str(cfg)]) == 2
    assert "malformed YAML" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_missing_config_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "nope.yaml"]) == 2
    assert "not found" in capsys.readouterr().err


def test_missing_data_file_names_file_and_places(tmp_path, monkeypatch, capsys):
    import data_prep.datasets.sources as sources

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sources, "MIRROR", tmp_path / "no-mirror")
    monkeypatch.delenv("FEDMM_DATA_ROOT", raising=False)
    (tmp_path / "empty").mkdir()
    code = main(["prepare", "--set", "dataset.name=tiktok", "--set", f"dataset.root={tmp_path / 'empty'}"])
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "empty" in lines[0] and "no-mirror" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
    assert not any((tmp_path / "empty").iterdir())


def test_explicit_data_root_that_does_not_exist(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEDMM_DATA_ROOT", raising=False)
    code = main(["prepare", "--set", "dataset.name=tiktok", "--set", f"dataset.root={tmp_path / 'typo'}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"data root {tmp_path / 'typo'} (dataset.root) does not exist" in err


def test_prepare_prints_statistics(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["prepare", "--set", "dataset.num_nodes=400", "--set", "partition.num_clients=4",
            "--set", "missing.rate=0.3"]
    assert main(args + ["--json"]) == 0
    import json

    stats = json.loads(capsys.readouterr().out)
    assert len(stats["clients"]) == 4 and "dropped_edges" in stats
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "dropped" in out.lower()


def test_bench_graph_prints_harness_and_reference_side_by_side(tmp_path, monkeypatch, capsys):
    """The `bench` verb (graph): the harness's FedAvg-Zero and the bare loop measured on the
    same clients, their ratio printed, on a graph small enough for the test suite."""
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--nodes", "200", "--clients", "2", "--rounds", "1", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert {"FedAvg-Zero (harness: engine + ledger + audit)", "FedAvg reference (bare PyTorch loop)",
            "ratio harness / reference"} <= set(rows)
    assert float(rows["ratio harness / reference"].split("|")[2].strip().rstrip("x")) > 0
    assert "train.deterministic cost" in out
    stages = re.search(r"^harness round by stage \(median s over the same rounds\): (.*)$", out, re.M)
    assert stages, out
    split = dict(part.split(" ") for part in stages.group(1).split(", "))
    assert list(split) == ["download", "clients", "upload", "server", "other"]
    assert all(float(v) >= 0 for v in split.values()) and float(split["clients"]) > 0


def test_run_prints_record_summary(tmp_path, monkeypatch, capsys):
    import json

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs.jsonl"
    code = main(["run", "--set", "dataset.num_nodes=300", "--set", "partition.num_clients=3", "--set",
                 "model.hidden=16", "--set", "train.rounds=3", "--out", str(out)])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "ok" and 0 < summary["metrics"]["test/accuracy"] <= 1
    assert len(out.read_text().splitlines()) == 1


def test_table_and_plot_verbs(tmp_path, monkeypatch, capsys):
    import yaml

    monkeypatch.chdir(tmp_path)
    suite = tmp_path / "mini.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "mini", "description": "two-cell suite", "default_scale": "tiny",
        "base": {"dataset.num_nodes": 300, "partition.num_clients": 3, "model.hidden": 16, "train.rounds": 3},
        "grid": {"algorithm.name": ["fedavg"], "missing.rate": [0.0, 0.5]}, "seeds": [0],
        "table": {"rows": "algorithm.name", "columns": "missing.rate", "metrics": ["accuracy"]},
        "plots": [{"name": "acc", "x": "missing.rate", "metric": "accuracy"}],
    }))
    assert main(["table", str(suite), "--results", "res"]) == 2  # nothing to tabulate yet
    assert "no records" in capsys.readouterr().err
    assert main(["sweep", str(suite), "--results", "res"]) == 0
    assert main(["table", str(suite), "--results", "res", "--out", "tab"]) == 0
    assert main(["plot", str(suite), "--results", "res", "--out", "tab"]) == 0
    names = sorted(p.name for p in (tmp_path / "tab").iterdir())
    assert names == ["mini_tiny.md", "mini_tiny.tex", "mini_tiny_acc.pdf", "mini_tiny_acc.png"]
    assert "Pending re-run" not in (tmp_path / "tab" / "mini_tiny.md").read_text()
    # a store listed as pending a re-run: its records predate the suite, which the caption says;
    # the list names suites and means their small stores, so the tiny table stays as it was
    (tmp_path / "res" / "pending_rerun.json").write_text(json.dumps({"stores": {"mini": "a test"}}))
    assert main(["table", str(suite), "--results", "res", "--out", "tab"]) == 0
    assert "Pending re-run" not in (tmp_path / "tab" / "mini_tiny.md").read_text()
    store = tmp_path / "res" / "mini"
    (store / "small.jsonl").write_text((store / "tiny.jsonl").read_text())
    assert main(["table", str(suite), "--scale", "small", "--results", "res", "--out", "tab"]) == 0
    for ext in ("md", "tex"):
        assert "Pending re-run" in (tmp_path / "tab" / f"mini_small.{ext}").read_text(), ext


def test_closed_stdout_pipe_exits_quietly():
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, str(repo / "run_benchmark.py"), "list", "--options"], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as `| head -1` does
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert first == b"datasets:\n"
    assert "Traceback" not in err and "BrokenPipeError" not in err and err == "", err
    assert code in (0, 141)
