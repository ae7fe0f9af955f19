"""`submit`: the template is accepted end to end; each kind of bad submission is rejected in one line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from benchmark import registry as R
from fedmm_bench.cli import main
from benchmark.submit import Submission, SubmissionRejected, check_contract, load_submission, withdraw

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "submissions"
TEMPLATE = ROOT / "methods" / "template.py"

SUITE = """
name: submit_test
description: two tiny cells for the submit test
track: node_classification
default_scale: tiny
base:
  dataset.name: synthetic
  partition.name: dirichlet_label
  partition.num_clients: 3
  missing.name: node_level
  task.name: node_cls
  model.hidden: 16
  train.rounds: 2
  train.local_epochs: 1
  train.device: cpu
grid:
  algorithm.name: [fedavg, fedprox]
  missing.rate: [0.0, 0.5]
seeds: [0]
scales:
  tiny:
    dataset.num_nodes: 300
"""


# submit's default gate re-runs the smoke cell under the Flower simulation; CI installs flwr
# (.[scale]), a bare GPU image may not (submit then refuses with one line, as it should)
needs_flwr = pytest.mark.skipif(importlib.util.find_spec("flwr") is None,
                                reason="the Flower gate needs the 'flwr' package (pip install -e .[scale])")


def _submit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = main(["submit", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("fixture, expected", [
    ("no_algorithm.py", "no_algorithm.py: registers no algorithm"),
    ("two_algorithms.py", "two_algorithms.py: registers 2 algorithms (fixture_two_a, fixture_two_b)"),
    ("raises_in_update.py", "smoke cell failed: RuntimeError: local step exploded in client_update "
                            "(raises_in_update.py:"),
    ("leaks_features.py", "leaks_features.py: rejected by the ledger audit: round 0, client "),
    ("unbounded_option.py", "algorithm 'fixture_loose': Config option 'step' declares no bound"),
    pytest.param("remembers_on_self.py", "remembers_on_self.py: works only in one process: ", marks=needs_flwr),
])
def test_bad_submissions_rejected_with_one_line(fixture: str, expected: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    R.load_plugins()
    before = set(R.ALGORITHMS.names())
    rc, out, err = _submit([str(FIXTURES / fixture), "--results", str(tmp_path / "r"), "--out", str(tmp_path / "t")],
                           capsys)
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], err
    assert "accepted" not in out
    assert set(R.ALGORITHMS.names()) == before, "a rejected submission must leave the registry as it was"
    assert not (tmp_path / "r").exists(), "nothing is recorded for a rejected submission"


def test_leak_message_names_the_payload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _submit([str(FIXTURES / "leaks_features.py")], capsys)
    assert rc == 2 and "payload 'feature_sample' contains raw feature rows" in err


@needs_flwr
def test_template_is_accepted_runs_the_suite_and_rebuilds_the_leaderboard(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDMM_THREADS", "1")  # one thread per tiny in-process cell
    suite = tmp_path / "submit_test.yaml"
    suite.write_text(SUITE)
    results, tables = tmp_path / "results", tmp_path / "tables"
    try:
        rc, out, err = _submit([str(TEMPLATE), "--suite", str(suite), "--results", str(results),
                                "--out", str(tables)], capsys)
    finally:
        R.ALGORITHMS.unregister("template")
    assert rc == 0, err
    assert "accepted: algorithm 'template' from template.py" in out
    assert "same under the Flower simulation" in out  # the smoke cell passed the Flower gate too
    assert "submit_test[tiny]: 2 cells run, 0 failed" in out
    records = [json.loads(line) for line in (results / "submit_test" / "tiny.jsonl").read_text().splitlines()]
    assert len(records) == 2 and {r["params"]["algorithm.name"] for r in records} == {"template"}
    assert {r["params"]["missing.rate"] for r in records} == {0.0, 0.5}
    assert all(r["status"] == "ok" and r["submission"]["file"] == "template.py" for r in records)
    page = (tables / "leaderboard.html").read_text()
    assert ">Template<" in page and records[0]["submission"]["sha256"][:10] in page
    assert (tables / "leaderboard_submit_test.md").is_file()


def test_template_does_not_register_on_package_import() -> None:
    R.load_plugins()
    assert "template" not in R.ALGORITHMS


def test_resubmitting_the_same_file_replaces_the_previous_load() -> None:
    first = load_submission(TEMPLATE)
    second = load_submission(TEMPLATE)
    try:
        assert first.name == second.name == "template" and R.ALGORITHMS.get("template") is second.cls
    finally:
        withdraw(second)
    assert "template" not in R.ALGORITHMS


def test_contract_requires_declared_upload_keys() -> None:
    from baselines.basic.fedavg import FedAvg

    class Undeclared(FedAvg):
        """FedAvg without declared uploads."""

        upload_keys = None

    sub = Submission(path=TEMPLATE, module_name="x", name="undeclared", cls=Undeclared, sha256="0")
    with pytest.raises(SubmissionRejected, match="declare upload_keys"):
        check_contract(sub)

    class WrongHook(FedAvg):
        """client_update with a missing parameter."""

        def client_update(self, client, state, received):  # type: ignore[override]
            return {}

    sub = Submission(path=TEMPLATE, module_name="x", name="wrong", cls=WrongHook, sha256="0")
    with pytest.raises(SubmissionRejected, match=r"client_update must accept \(self, client, state, received, rnd\)"):
        check_contract(sub)


def test_mixed_task_suite_runs_only_the_declared_tasks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The template declares node_cls only: in a suite crossing node_cls with link_pred its
    link_pred cells are skipped (N/A in the table), not a reason to reject the suite."""
    monkeypatch.setenv("FEDMM_THREADS", "1")
    suite = tmp_path / "submit_mixed.yaml"
    suite.write_text(SUITE.replace("name: submit_test", "name: submit_mixed")
                     .replace("  missing.rate: [0.0, 0.5]", "  task.name: [node_cls, link_pred]"))
    results = tmp_path / "results"
    try:
        rc, out, err = _submit([str(TEMPLATE), "--suite", str(suite), "--results", str(results),
                                "--out", str(tmp_path / "tables"), "--no-flower"], capsys)
    finally:
        R.ALGORITHMS.unregister("template")
    assert rc == 0, err
    records = [json.loads(line) for line in (results / "submit_mixed" / "tiny.jsonl").read_text().splitlines()]
    assert [r["params"]["task.name"] for r in records] == ["node_cls"]


@needs_flwr
def test_an_amfl_method_is_accepted_with_a_smoke_cell_of_its_track(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An AMFL method gets its smoke cell from the AMFL CI suite (fedmbridge_table2, tiny)."""
    path = FIXTURES / "amfl_group_avg.py"
    try:
        rc, out, err = _submit([str(path), "--results", str(tmp_path / "r"), "--out", str(tmp_path / "t")], capsys)
    finally:
        R.ALGORITHMS.unregister("amfl_group_avg")
    assert rc == 0, err
    assert "accepted: algorithm 'amfl_group_avg' from amfl_group_avg.py" in out
