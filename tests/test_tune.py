"""Equal-budget tuning (benchmark/tune): spaces declared beside the options, the suite's own
setting as the first trial, validation only, pruning on the validation curve, and a journal
that a killed run resumes from without repeating a finished trial."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmark.cell import Cell
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.federation import ClientData, FederatedData
from benchmark.tune.space import current_values, search_space
from benchmark.tune.study import PRUNE_STARTUP_TRIALS, PRUNE_WARMUP_ROUNDS, _open, run_study, tuning_paths
from conftest import make_tiny_federation

ROOT = Path(__file__).resolve().parent.parent
SHARED = ["train.lr", "train.weight_decay", "train.local_epochs", "model.hidden", "model.dropout"]


def _config(algo: str, tmp: Path, rounds: int = 3) -> dict[str, Any]:
    return {"dataset": {"name": "synthetic"}, "task": {"name": "node_cls"}, "algorithm": {"name": algo},
            "model": {"hidden": 32, "dropout": 0.2},
            "train": {"rounds": rounds, "local_epochs": 1, "lr": 0.01, "device": "cpu", "checkpoint_every": 0},
            "output": {"cache_dir": str(tmp), "checkpoint_dir": str(tmp / "ckpt")}}


def _cell(algo: str, tmp: Path, rounds: int = 3) -> Cell:
    return Cell("tune_test", "tiny", {"algorithm.name": algo}, 0, _config(algo, tmp, rounds))


def test_the_search_space_is_declared_beside_the_options() -> None:
    space = lambda algo, task="node_cls": [d.key for d in search_space(build_run_config(  # noqa: E731
        {"task": {"name": task}, "algorithm": {"name": algo}}))]
    assert space("fedavg") == SHARED
    assert space("fedprox") == SHARED + ["algorithm.mu"]
    assert space("fedmgs") == SHARED + ["algorithm.lambda_rec", "algorithm.lambda_proto"]
    assert space("chance") == []  # nothing to train: one trial of its own settings
    # link prediction searches its decoder's temperature for every method; FedMPO its loss
    # weights (null = Table 9: resolved for the first trial) and the upper bound of gamma
    assert space("fedavg", "link_pred") == SHARED + ["task.temperature"]
    assert space("fedmpo", "link_pred") == SHARED + ["task.temperature", "algorithm.lambda_rec",
                                                     "algorithm.lambda_align", "algorithm.lambda_route",
                                                     "algorithm.lambda_bal", "algorithm.interp_max"]
    cfg = build_run_config({"task": {"name": "link_pred"}, "algorithm": {"name": "fedmpo"}})
    first = current_values(cfg, search_space(cfg))
    assert (first["algorithm.lambda_rec"], first["algorithm.lambda_align"], first["task.temperature"]) == (0.05, 0.01, 0.5)
    assert space("mmfed3", "kg_completion") == ["train.lr", "train.local_epochs", "algorithm.lambda_di",
                                                "algorithm.mu", "algorithm.eta"]


def _moved_test_labels(fed: FederatedData) -> FederatedData:
    """Every test label moved to the next class; training and validation data untouched."""
    def change(c: ClientData) -> ClientData:
        y = c.y.clone()
        y[c.test_mask] = (y[c.test_mask] + 1) % c.num_classes
        return dataclasses.replace(c, y=y)

    pooled = None if fed.pooled is None else change(fed.pooled)
    return dataclasses.replace(fed, clients=[change(c) for c in fed.clients], pooled=pooled)


def _trace(study: Any) -> list[tuple[Any, ...]]:
    return [(t.number, t.state, t.params, t.value, dict(t.intermediate_values)) for t in study.trials]


def test_tuning_never_reads_test_data_and_starts_from_the_suites_setting(tmp_path: Path) -> None:
    """The same study with every test label changed: the same trials, values and curves, bit
    for bit, while the test scores the runs report did change (so the change reached them)."""
    fed = make_tiny_federation()
    cell = _cell("fedprox", tmp_path)
    tests: dict[str, list[float]] = {"as_built": [], "moved": []}

    def runner(data: FederatedData, key: str):
        def run(cfg: Any, on_eval: Any) -> dict[str, Any]:
            rec = Engine(cfg, fed=data, on_eval=on_eval).run(resume=False)
            tests[key].append(rec["metrics"]["test/accuracy"])
            return rec
        return run

    a = run_study(cell, tmp_path / "a.journal", budget=3, run=runner(fed, "as_built"))
    b = run_study(cell, tmp_path / "b.journal", budget=3, run=runner(_moved_test_labels(fed), "moved"))
    study_a, study_b = (_open(tmp_path / f"{k}.journal", a.name, 0) for k in "ab")
    assert _trace(study_a) == _trace(study_b) and (a.params, a.value, a.trial) == (b.params, b.value, b.trial)
    assert tests["as_built"] != tests["moved"]
    first = study_a.trials[0].params  # the suite's own setting, the algorithm's default mu included
    assert first == current_values(build_run_config(cell.config), search_space(build_run_config(cell.config)))
    assert first["train.lr"] == 0.01 and first["model.hidden"] == 32 and first["algorithm.mu"] == pytest.approx(1e-3)


def _fake_run(scores: list[float], calls: list[int], kill_at: int | None = None):
    """A stand-in engine: reports a flat validation curve at the trial's score over 10 rounds."""
    def run(cfg: Any, on_eval: Any) -> dict[str, Any]:
        calls.append(1)
        if kill_at is not None and len(calls) == kill_at:
            raise KeyboardInterrupt
        score = scores[min(len(calls), len(scores)) - 1]
        rounds = 0
        for rnd in range(10):
            rounds = rnd + 1
            if on_eval(rnd, score):
                break
        return {"status": "ok", "seed": 0, "best_round": 0, "rounds_run": rounds,
                "metrics": {"val/accuracy": score, "test/accuracy": 0.0}}
    return run


def test_a_trial_below_the_median_curve_is_pruned(tmp_path: Path) -> None:
    calls: list[int] = []
    scores = [0.9] * PRUNE_STARTUP_TRIALS + [0.1, 0.1]
    result = run_study(_cell("fedavg", tmp_path), tmp_path / "p.journal", budget=len(scores),
                       run=_fake_run(scores, calls))
    study = _open(tmp_path / "p.journal", result.name, 0)
    late = study.trials[PRUNE_STARTUP_TRIALS:]
    assert result.pruned == 2 and all(t.state.name == "PRUNED" for t in late)
    assert all(max(t.intermediate_values) == PRUNE_WARMUP_ROUNDS for t in late)  # stopped once past the warm-up
    assert result.finished == len(scores) and result.value == pytest.approx(0.9)


def test_a_killed_tune_resumes_without_repeating_finished_trials(tmp_path: Path) -> None:
    journal = tmp_path / "k.journal"
    cell = _cell("fedavg", tmp_path)
    calls: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        run_study(cell, journal, budget=4, run=_fake_run([0.5, 0.6, 0.7, 0.8], calls, kill_at=3))
    before = _open(journal, "fedavg|all", 0)
    done = [(t.number, t.params, t.value) for t in before.trials if t.state.name == "COMPLETE"]
    assert len(done) == 2 and len(calls) == 3
    more: list[int] = []
    result = run_study(cell, journal, budget=4, run=_fake_run([0.65, 0.75], more))
    assert len(more) == 2 and result.finished == 4  # only the rest of the budget ran
    after = _open(journal, "fedavg|all", 0)
    assert [(t.number, t.params, t.value) for t in after.trials if t.number < 2] == done
    assert after.trials[2].state.name == "FAIL"  # the one the kill interrupted counts for nothing


def test_the_tune_verb_writes_the_choices_and_refuses_bad_input(tmp_path: Path) -> None:
    def tune(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), "tune", "demo", "--scale", "tiny",
                               "--only", "missing.rate=0.0", "--results", str(tmp_path), *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=600)

    done = tune("--method", "chance", "--trials", "3")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "chance|missing.rate=0.0: 1 trials (0 pruned)" in done.stdout and "nothing searched" in done.stdout
    _, chosen = tuning_paths(tmp_path, "demo", "tiny")
    text = chosen.read_text(encoding="utf-8")
    assert "chance|missing.rate=0.0:" in text and "budget: 1" in text
    bad = tune("--method", "nosuch")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--method nosuch" in bad.stderr


def test_pruned_runs_stop_early_in_the_engine(tmp_path: Path) -> None:
    """The engine's on_eval hook ends a run when it answers True, after that round."""
    seen: list[int] = []
    cfg = build_run_config(_config("fedavg", tmp_path, rounds=5))
    rec = Engine(cfg, fed=make_tiny_federation(), on_eval=lambda rnd, score: seen.append(rnd) or rnd == 1).run()
    assert seen == [0, 1] and rec["rounds_run"] == 2 and rec["status"] == "ok"
    assert torch.isfinite(torch.tensor(rec["metrics"]["val/accuracy"]))


def test_a_study_refuses_trials_for_another_protocol_of_its_cell(tmp_path: Path) -> None:
    from benchmark.errors import BenchmarkError

    journal = tmp_path / "c.journal"
    run_study(_cell("fedavg", tmp_path), journal, budget=1, run=_fake_run([0.5], []))
    changed = _cell("fedavg", tmp_path, rounds=4)  # another train.rounds: another protocol
    with pytest.raises(BenchmarkError, match="another protocol or config"):
        run_study(changed, journal, budget=2, run=_fake_run([0.5], []))


def test_every_declared_range_is_well_formed_and_every_space_builds() -> None:
    """Every algorithm on every task it declares gets a search space (the metadata parses, the
    task's shared options all declare a range), and its own values of those options are
    read without error."""
    from benchmark.registry import ALGORITHMS, load_plugins

    load_plugins()
    built = 0
    for name in ALGORITHMS.names():
        for task in ALGORITHMS.get(name).tasks:
            cfg = build_run_config({"task": {"name": task}, "algorithm": {"name": name}})
            space = search_space(cfg)
            for dim in space:
                assert (dim.choices is not None) != (dim.low is not None and dim.high is not None), dim
                assert dim.choices is not None or dim.low < dim.high, dim
            current_values(cfg, space)
            built += 1
    assert built >= 40


def test_a_key_the_cells_grid_sets_is_never_searched(tmp_path: Path) -> None:
    """A sweep never runs a choice of a grid key (benchmark.tuned), so a study must not spend
    trials on it: ``fixed`` keys stay out of the space."""
    result = run_study(_cell("fedavg", tmp_path), tmp_path / "f.journal", budget=1,
                       run=_fake_run([0.5], []), fixed=frozenset({"train.lr", "model.dropout"}))
    assert "train.lr" not in result.space and "model.dropout" not in result.space
    assert "train.lr" not in result.params and "model.hidden" in result.space
