"""The guard's `learned` verdict: a cell learned when its best validation score clears its
column's chance score by 3 standard errors of that score (from the validation size) and its
curve rose above its first evaluation; tables and the leaderboard mark the others and rank
them nowhere, and `check` counts them. Early stopping can be held off for a minimum of rounds."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from benchmark.learned import LEARNED_SES, chance_se, gallery_for_mrr, learning, validation_size
from benchmark.record import Record


def _rec(vals: list[float], algo: str = "m", seed: int = 0, n_val: float = 400.0, metric: str = "accuracy",
         test: float | None = None) -> Record:
    best = max(range(len(vals)), key=lambda i: vals[i])
    return Record(status="ok", seed=seed, best_round=best, rounds_run=len(vals), cell_id=f"{algo}-{seed}",
                  params={"algorithm.name": algo}, eval_sizes={"val": n_val, "test": n_val},
                  metrics={f"val/{metric}": vals[best], f"test/{metric}": vals[best] if test is None else test,
                           "test/spread": 0.2},
                  curves={"round": list(range(len(vals))), f"val/{metric}": vals},
                  algorithm={"name": algo, "personalized": False, "constant_scores": algo == "chance"})


def test_chance_standard_errors_follow_their_null_distributions() -> None:
    n = 500.0
    assert chance_se("val/auc", 0.5, n) == pytest.approx(math.sqrt((2 * n + 1) / (12 * n * n)))
    assert chance_se("val/accuracy", 0.2, n) == pytest.approx(math.sqrt(0.2 * 0.8 / n))
    for g in (10, 200, 5000):  # MRR of a uniformly random rank among g candidates, exactly
        mean = sum(1 / i for i in range(1, g + 1)) / g
        var = sum(1 / i ** 2 for i in range(1, g + 1)) / g - mean ** 2
        assert gallery_for_mrr(mean) == pytest.approx(g, rel=1e-3)
        assert chance_se("val/mrr", mean, n) == pytest.approx(math.sqrt(var / n), rel=1e-3)


def test_a_score_within_three_standard_errors_of_chance_has_not_learned() -> None:
    se = chance_se("val/auc", 0.5, 1000.0)  # about 0.0129
    near = learning(_rec([0.44, 0.5 + 2.5 * se, 0.50], metric="auc", n_val=1000.0), chance=0.5)
    assert near.learned is False and "3 standard errors" in near.reason and near.se == pytest.approx(se)
    clear = learning(_rec([0.44, 0.5 + 3.5 * se, 0.52], metric="auc", n_val=1000.0), chance=0.5)
    assert clear.learned is True and clear.reason == ""
    # the FedMPO link-prediction curve of the issue: round-1 peak at 0.55 on ~480 validation edges
    fedmpo = learning(_rec([0.435, 0.550, 0.507, 0.498, 0.528, 0.534], metric="auc", n_val=480.0), chance=0.5)
    assert fedmpo.learned is False


def test_a_curve_that_never_rose_above_its_first_evaluation_has_not_learned() -> None:
    v = learning(_rec([0.80, 0.70, 0.75]), chance=0.2)
    assert v.learned is False and "never rose" in v.reason
    assert learning(_rec([0.80, 0.70, 0.75]), chance=None).learned is False  # the rise is judged without chance
    flat = learning(_rec([0.74, 0.74, 0.74]), chance=0.2)  # a closed-form fit (the linear reference)
    assert flat.learned is True


def test_without_a_chance_score_a_rising_curve_is_not_judged_and_references_never_are() -> None:
    assert learning(_rec([0.1, 0.5]), chance=None).learned is None
    assert learning(_rec([0.2, 0.2], algo="chance"), chance=0.2) is None
    assert learning(replace(_rec([0.1, 0.5]), status="failed"), chance=0.2) is None


def test_validation_size_is_stored_or_estimated_from_the_test_size() -> None:
    assert validation_size(_rec([0.1, 0.5], n_val=321.0)) == 321.0
    old = replace(_rec([0.1, 0.5]), eval_sizes={}, client_sizes=[100.0, 200.0],
                  config={"split": {"train": 0.2, "val": 0.2, "test": 0.6}})
    assert validation_size(old) == pytest.approx(100.0)
    assert validation_size(replace(old, config={})) == 300.0
    assert validation_size(replace(old, client_sizes=[])) is None


def _table_records() -> list[Record]:
    recs = []
    for s in (0, 1, 2):
        recs += [_rec([0.30, 0.80], "good", s, test=0.70),
                 _rec([0.18, 0.215], "noise", s, test=0.90),  # highest test mean, but at chance on validation
                 _rec([0.20, 0.20], "chance", s, test=0.20),
                 _rec([0.10, 0.60], "ok2", s, test=0.60),
                 _rec([0.10, 0.50], "third", s, test=0.50)]
    return recs


def test_tables_mark_an_unlearned_cell_and_never_rank_it() -> None:
    from benchmark.report.tables import make_table

    out = make_table(_table_records(), {"rows": "algorithm.name", "metrics": ["accuracy"]})
    line = {row.split("|")[1].strip(): row for row in out.markdown.splitlines() if row.startswith("|")}
    assert "∅" in line["noise"] and "**" not in line["noise"] and "<u>" not in line["noise"]
    assert "**70.00" in line["good"] and "**60.00" not in line["ok2"]  # ranks as if the unlearned row were not there
    assert not any("∅" in line[k] for k in ("good", "ok2"))
    assert "∅ Not learned" in out.markdown
    ranks = out.frame.set_index("algorithm.name")["rank"]
    assert ranks["noise"] == 0 and ranks["good"] == 1


def test_kendall_tau_leaves_an_unlearned_cell_out() -> None:
    from benchmark.report.tables import make_table

    spec = {"rows": "algorithm.name", "metrics": ["accuracy"],
            "paper": {"good": {"accuracy": 70.0}, "ok2": {"accuracy": 60.0}, "third": {"accuracy": 50.0},
                      "noise": {"accuracy": 10.0}}}
    out = make_table(_table_records(), spec)
    # the unlearned row (first by our test mean, last in the paper) is left out: the rest agree exactly
    assert out.fidelity is not None and out.fidelity.tau == pytest.approx(1.0)


def test_the_leaderboard_guard_column_says_not_learned() -> None:
    from benchmark.report.leaderboard.columns import guard_text
    from benchmark.report.leaderboard.rows import Row

    recs = [r for r in _table_records() if r.params["algorithm.name"] == "noise"]
    row = Row(suite="s", scale="small", params={"algorithm.name": "noise"}, recipe="r", protocol="p", records=recs)
    assert guard_text(row, chance=0.2) == "3 unconverged, 3 not learned"  # two-round curves: best is last
    assert guard_text(row) == "3 unconverged"  # no chance score: a rising curve is not judged


def test_check_prints_the_learned_counts(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmark.report.flags import count_learning
    from fedmm_bench.cli import main

    counts = count_learning(_table_records())
    assert (counts.judged, counts.learned, len(counts.unlearned)) == (12, 9, 3)
    assert main(["check", "demo", "--show", "50"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| suite"))
    assert "learned" in header
    assert "not learned:" in out and f"by {LEARNED_SES:g} standard errors" in out


def test_the_engine_stores_validation_and_test_sizes(tmp_path: Path) -> None:
    from benchmark.engine import run_config
    from small_configs import tiny_config

    record = run_config(tiny_config("fedavg", "node_cls", tmp_path / "cache"))
    sizes = record["eval_sizes"]
    assert sizes["val"] > 0 and sizes["test"] == pytest.approx(sum(record["client_sizes"]))


def test_min_rounds_holds_early_stopping_off(tmp_path: Path) -> None:
    """A frozen model (lr 0) never improves after its first evaluation: patience 1 stops it at
    round 2, and min_rounds 5 keeps it running to round 5; min_rounds 0 leaves the protocol hash
    of every older record as it was."""
    from benchmark.config import build_run_config
    from benchmark.engine import run_config
    from benchmark.results import protocol_hash
    from small_configs import tiny_config

    base = tiny_config("fedavg", "node_cls", tmp_path / "cache", rounds=8).to_dict()
    base["train"] = {**base["train"], "lr": 0.0, "patience": 1}
    stopped = run_config(build_run_config(base))
    held = run_config(build_run_config({**base, "train": {**base["train"], "min_rounds": 5}}))
    assert stopped["rounds_run"] == 2 and held["rounds_run"] == 5
    cfg = build_run_config(base)
    assert cfg.train.min_rounds == 0
    without = dict(base["train"])
    without.pop("min_rounds", None)
    assert protocol_hash(cfg) == protocol_hash(build_run_config({**base, "train": without}))
    assert protocol_hash(build_run_config({**base, "train": {**base["train"], "min_rounds": 5}})) != protocol_hash(cfg)


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("suite", ["fedmbridge_cost", "fedmbridge_budget"])
def test_fixed_budget_tables_judge_no_convergence_and_say_why(suite: str) -> None:
    """A suite that fixes its rounds by design carries no convergence marks, and says so."""
    from benchmark.sweep import load_suite

    assert load_suite(suite).spec.get("fixed_budget") is True
    text = (ROOT / "tables" / f"{suite}_small.md").read_text(encoding="utf-8")
    assert "°" not in text and "Fixed budget by design" in text


def test_a_fixed_budget_table_drops_the_convergence_mark() -> None:
    from benchmark.report.tables import make_table

    rising = [_rec([0.1 * r for r in range(1, 10)], "m", s) for s in (0, 1)]  # best round last: unconverged
    judged = make_table(rising, {"rows": "algorithm.name", "metrics": ["accuracy"]}).markdown
    fixed = make_table(rising, {"rows": "algorithm.name", "metrics": ["accuracy"], "fixed_budget": True}).markdown
    assert "°" in judged and "°" not in fixed and "Fixed budget by design" in fixed


def test_every_store_not_fixed_by_design_is_mostly_converged() -> None:
    from benchmark.guard import count
    from benchmark.report.suite_tables import suite_records
    from benchmark.sweep import SUITES_DIR, load_suite

    for store in sorted((ROOT / "results").glob("*/small.jsonl")):
        name = store.parent.name
        if not (SUITES_DIR / f"{name}.yaml").is_file():
            continue
        suite = load_suite(name)
        c = count(suite_records(suite, "small", ROOT / "results"))
        if suite.spec.get("fixed_budget") or not c.judged:
            continue
        assert c.converged_share >= 0.9, (name, c.converged, c.judged)
