"""Issue 25: every bad input is one line `error: ...` on stderr and exit code 2 (argparse's
own errors, bench kg's data root, regress --set, submit's files); --help still works; submit
tells plainly that it runs the submitted code."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark import registry as R
from fedmm_bench.cli import main
from benchmark.record import Record

ROOT = Path(__file__).resolve().parent.parent

README_SKELETON = '''
from dataclasses import dataclass, field
from baselines.basic.fedavg import FedAvg
from benchmark.registry import ALGORITHMS

@ALGORITHMS.register("fixture_skeleton")
class MyAvg(FedAvg):
    """One line that `list` shows."""

    @dataclass
    class Config:
        weighting: str = field(default="train_size", metadata={"help": "train_size or uniform",
                                                               "choices": ("train_size", "uniform")})
        beta: float = field(default=0.5, metadata={"help": "what beta does", "min": 0.0, "max": 1.0})

    def client_update(self, client, state, received, rnd):
        ...  # train on `client` (a ClientData: only this client's data); return a dict of tensors
'''


@pytest.fixture(autouse=True)
def _registry_unchanged() -> object:
    """A stopped or rejected submission in a test leaves no algorithm behind for later tests."""
    R.load_plugins()
    before = set(R.ALGORITHMS.names())
    yield
    for name in set(R.ALGORITHMS.names()) - before:
        R.ALGORITHMS.unregister(name)


def _one_error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("argv, needle", [
    (["frob"], "invalid choice: 'frob'"),                                    # unknown verb
    (["swep", "ci"], "did you mean 'sweep'?"),                               # ... with the closest one
    (["run", "--frob"], "unrecognized arguments: --frob"),                   # unknown flag
    (["sweep"], "run_benchmark.py sweep: the following arguments are required: suite"),  # missing argument
    (["sweep", "ci", "--scale", "huge"], "argument --scale: invalid choice: 'huge'"),    # bad choice
    (["bench", "kgg"], "did you mean 'kg'?"),
    (["sweep", "ci", "--jobs", "x"], "argument --jobs: invalid int value: 'x'"),
    (["submit"], "run_benchmark.py submit: the following arguments are required: file"),
])
def test_argparse_errors_are_one_line(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    line = _one_error_line(err)
    assert needle in line and "--help" in line and out == ""


def test_argparse_error_through_the_real_entry_point(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), "run", "--frob"], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert _one_error_line(proc.stderr).startswith("error: run_benchmark.py: unrecognized arguments: --frob")


@pytest.mark.parametrize("argv", [["--help"], ["sweep", "--help"]])
def test_help_still_prints_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: run_benchmark.py") and err == ""


@pytest.mark.parametrize("root, state", [("/nonexistent/fb15k", "does not exist"), (__file__, "is not a directory")])
def test_bench_kg_named_data_root_must_exist(root: str, state: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The probe: a bad --data-root used to fall back to the embedded subset silently."""
    assert main(["bench", "kg", "--data-root", root]) == 2
    assert _one_error_line(capsys.readouterr().err) == f"error: bench kg --data-root {root}: {state}"


def test_regress_rejects_an_unknown_set_key_before_running(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The probe: --set train.roundz=1 used to run every cell and report 61 regressions."""
    from benchmark import regress

    monkeypatch.setattr(regress, "run_ci_suite", lambda *a, **k: pytest.fail("a cell ran"))
    assert main(["regress", "--set", "train.roundz=1"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "unknown config key 'train.roundz'" in line and "did you mean 'rounds'?" in line


def test_sweep_rejects_an_unknown_set_key_before_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from benchmark import sweep

    monkeypatch.setattr(sweep, "_run_until_recorded", lambda *a, **k: pytest.fail("a cell ran"))
    assert main(["sweep", "demo", "--results", str(tmp_path), "--set", "train.roundz=1"]) == 2
    assert "did you mean 'rounds'?" in _one_error_line(capsys.readouterr().err)
    assert not list(tmp_path.rglob("*.jsonl"))


def test_submit_file_that_exits_during_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The probe: sys.exit(3) in the file used to end submit with code 3 and no message."""
    path = tmp_path / "exits.py"
    path.write_text("import sys\nsys.exit(3)\n")
    assert main(["submit", str(path), "--no-flower"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("error: exits.py: exited during import (sys.exit(3) in <module> (exits.py:2))"), line


def test_submit_readme_skeleton_returning_none_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A skeleton whose client_update returns None (the README's old "Adding an algorithm" stub):
    one line naming the hook, not an AttributeError from the ledger."""
    path = tmp_path / "skeleton.py"
    path.write_text(README_SKELETON)
    assert main(["submit", str(path), "--no-flower"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "client_update of 'fixture_skeleton' returned None" in line and "must return a dict" in line


def test_submit_interrupted_during_the_checks_says_nothing_was_recorded(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The probe: an interrupt used to say 'finished cells are saved', which is not what submit does."""
    from benchmark import submit

    def interrupted(sub: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(submit, "check_contract", interrupted)
    assert main(["submit", str(ROOT / "methods" / "template.py"), "--no-flower"]) == 130
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == ["interrupted (SIGINT): submit stopped during the checks of template.py: nothing was recorded"]


def test_submit_interrupted_during_a_suite_counts_its_recorded_cells(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmark import submit
    from benchmark.results import ResultStore
    from benchmark.sweep import load_suite

    def smoke(sub: submit.Submission) -> Record:
        return Record(status="ok", seed=0)

    def one_cell_then_stop(sub: submit.Submission, name: str, scale: str | None, jobs: int, results_dir: str,
                           progress: bool = True, only: dict | None = None) -> None:
        suite = load_suite(name)
        ResultStore(suite.results_path(results_dir, scale or suite.default_scale)).append(
            {"status": "ok", "metrics": {}, "cell_id": "c1", "suite": suite.name, "submission": sub.info})
        raise KeyboardInterrupt

    monkeypatch.setattr(submit, "smoke_test", smoke)
    monkeypatch.setattr(submit, "run_submission_suite", one_cell_then_stop)
    results = tmp_path / "results"
    assert main(["submit", str(ROOT / "methods" / "template.py"), "--no-flower", "--suite", "demo",
                 "--results", str(results)]) == 130
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"interrupted (SIGINT): submit stopped: 1 cells of template.py recorded in {results}/, the rest "
                   f"not run, the leaderboard not rebuilt; submitting again runs every cell again"]


def test_docs_and_template_say_submit_runs_the_file() -> None:
    """The submit guide (docs/adding.md), the CLI page and the template all warn that submit runs the file."""
    guide = " ".join((ROOT / "docs" / "adding.md").read_text().split())
    cli = " ".join((ROOT / "docs" / "cli.md").read_text().split())
    template = " ".join((ROOT / "methods" / "template.py").read_text().split())
    assert "`submit` imports the file, which runs its code" in guide and "submit only files you trust" in guide
    assert "`submit` imports the file, which runs its code" in cli and "submit only files you trust" in cli
    assert "runs all of its code" in template and "Submit only files you trust" in template


def test_bad_sweep_input_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An --only that selects nothing, an unknown --set key or --only on a statistics suite is
    one line before the results folder is even made."""
    res = tmp_path / "res"
    for argv in (["sweep", "ci", "--scale", "tiny", "--only", "algorithm.name=nothing"],
                 ["sweep", "ci", "--scale", "tiny", "--set", "train.roundz=1"],
                 ["sweep", "mmfed3_table2", "--only", "seed=0"]):
        assert main([*argv, "--results", str(res)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: "), err
    assert not res.exists()


def test_run_reports_a_non_finite_metric_as_the_failure_it_is_stored_as(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from fedmm_bench import cli

    def fake(cfg, progress, resume):  # noqa: ANN001, ANN202
        return {"status": "ok", "error": None, "metrics": {"test/accuracy": float("nan")}, "best_round": 0,
                "rounds_run": 1, "seconds_per_round": 0.1, "peak_memory_mb": 1.0, "wall_time_s": 0.1,
                "provenance": {"artifact_hash": "x"}}

    monkeypatch.setattr("benchmark.backends.run_backend", lambda name: fake)
    assert cli.main(["run", "--set", "train.rounds=1", "--out", str(tmp_path / "r.jsonl")]) == 1
    printed = json.loads(capsys.readouterr().out)
    assert printed["status"] == "failed" and "non-finite" in printed["error"]["reason"]
