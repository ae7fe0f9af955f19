"""Tables from synthetic result records: numbers, emphasis, N/A, failures, recipe exclusion, LaTeX."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmark.errors import ConfigError, DataError
from benchmark.record import Record
from benchmark.report.records import load_records, records_frame
from benchmark.report.tables import make_table, write_table

BASE = {"local": 0.60, "fedavg": 0.80, "fed_prox": 0.78}
RATES = (0.0, 0.3, 0.7)
SEEDS = (0, 1, 2)


def record(alg: str, rate: float, seed: int, acc: float | None = None, *, status: str = "ok",
           recipe: str = "recipe-A", protocol: str = "proto-1", ts: str = "2024-05-01T12:00:00",
           extra_params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One result record shaped like the runner's output."""
    if acc is None:
        acc = accuracy(alg, rate, seed)
    ok = status == "ok"
    return {
        "suite": "demo", "scale": "tiny", "cell_id": f"{alg}-{rate}",
        "params": {"algorithm.name": alg, "missing.rate": rate, **(extra_params or {})},
        "seed": seed, "status": status,
        "error": None if ok else {"round": 3, "reason": "NaN loss"},
        "metrics": {"test/accuracy": acc, "test/macro_f1": acc - 0.05, "val/accuracy": acc} if ok else {},
        "best_round": 5 if ok else None,
        "provenance": {"artifact_hash": f"{recipe}-{seed}", "artifact_recipe": recipe, "protocol": protocol,
                       "git_sha": "abc", "git_dirty": False, "versions": {"torch": "2"}, "device": "cpu",
                       "config_hash": "c"},
        "timestamp": ts,
    }


def accuracy(alg: str, rate: float, seed: int) -> float:
    return BASE[alg] - 0.1 * rate + 0.01 * seed * (1 + rate)


def suite_records() -> list[dict[str, Any]]:
    return [record(a, r, s) for a in BASE for r in RATES for s in SEEDS]


SPEC: dict[str, Any] = {
    "rows": "algorithm.name",
    "row_order": ["local", "fedavg", "fed_prox"],
    "row_labels": {"fedavg": "FedAvg"},
    "columns": "missing.rate",
    "column_labels": {0.0: "0%", 0.3: "30%", 0.7: "70%"},
    "metrics": ["accuracy", "macro_f1"],
    "caption": "Node classification under missing modalities",
}


def md_row(markdown: str, label: str) -> list[str]:
    """Cells of the markdown table row whose first cell is ``label``."""
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == label:
            return cells
    raise AssertionError(f"no row {label!r} in\n{markdown}")


def header(markdown: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith("|"))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def frame_cell(out: Any, alg: str, rate: float, metric: str = "accuracy") -> dict[str, Any]:
    f = out.frame
    rows = f[(f["algorithm.name"] == alg) & (f["missing.rate"] == rate) & (f["metric"] == metric)]
    assert len(rows) == 1
    return rows.iloc[0].to_dict()


def test_frame_mean_std_over_seeds() -> None:
    out = make_table(suite_records(), SPEC)
    cell = frame_cell(out, "fedavg", 0.3)
    values = [100 * accuracy("fedavg", 0.3, s) for s in SEEDS]
    assert cell["mean"] == pytest.approx(statistics.mean(values))
    assert cell["std"] == pytest.approx(statistics.stdev(values))  # ddof=1
    assert cell["n"] == 3 and cell["status"] == "value"
    assert "ddof=1" in out.markdown and "over 3 seeds" in out.markdown
    assert md_row(out.markdown, "FedAvg")[3] == f"**{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}**"


def test_records_frame_columns() -> None:
    frame = records_frame(suite_records())
    for col in ("algorithm.name", "missing.rate", "seed", "status", "test/accuracy", "artifact_recipe",
                "protocol", "git_sha"):
        assert col in frame.columns
    assert len(frame) == len(BASE) * len(RATES) * len(SEEDS)


def test_bold_marks_the_methods_tied_for_first() -> None:
    """Every seed moves the three methods alike, so the paired tests resolve each gap: FedAvg
    alone is bold; nothing is underlined (there is no "second" the seeds do not resolve)."""
    out = make_table(suite_records(), SPEC)
    # columns: Algorithm, 0% acc, 0% f1, 30% acc, ...; fedavg best, fed_prox second, local third
    assert md_row(out.markdown, "FedAvg")[1].startswith("**")
    assert not md_row(out.markdown, "fed_prox")[1].startswith("**")
    assert "**" not in md_row(out.markdown, "local")[1] and "<u>" not in out.markdown
    assert re.search(r"^FedAvg & \\textbf\{", out.latex, re.M) and r"\underline" not in out.latex
    ranks = out.frame.set_index(["algorithm.name", "missing.rate", "metric"])["rank"]
    assert ranks[("fedavg", 0.7, "macro_f1")] == 1 and ranks[("fed_prox", 0.7, "macro_f1")] == 0
    assert "In bold: every method tied for first" in out.markdown


def test_a_gap_inside_seed_noise_is_a_tie() -> None:
    """fed_prox two points under FedAvg on average, but ahead in one seed and behind by 5 in
    another: the paired tests cannot tell them apart, so both are bold."""
    noisy = {0: 0.83, 1: 0.76, 2: 0.79}
    recs = [record(a, r, s, acc=(noisy[s] if a == "fed_prox" else None)) for a in BASE for r in RATES for s in SEEDS]
    out = make_table(recs, SPEC)
    assert md_row(out.markdown, "FedAvg")[1].startswith("**") and md_row(out.markdown, "fed_prox")[1].startswith("**")
    assert not md_row(out.markdown, "local")[1].startswith("**")


def test_lower_is_better_flips_emphasis() -> None:
    out = make_table(suite_records(), {**SPEC, "lower_is_better": ["accuracy"]})
    assert md_row(out.markdown, "local")[1].startswith("**")
    assert not md_row(out.markdown, "fed_prox")[1].startswith("**")
    assert md_row(out.markdown, "FedAvg")[2].startswith("**")  # macro_f1 still higher-is-better


def test_na_cells() -> None:
    out = make_table(suite_records(), {**SPEC, "na": {"local": ["macro_f1"]}})
    row = md_row(out.markdown, "local")
    assert row[2] == "N/A" and row[4] == "N/A" and row[1] != "N/A"
    assert "N/A: metric not applicable" in out.markdown
    assert frame_cell(out, "local", 0.3, "macro_f1")["status"] == "na"


def test_failed_cells_and_partial_failures() -> None:
    recs = [r for r in suite_records()
            if not (r["params"]["algorithm.name"] == "local" and r["params"]["missing.rate"] == 0.7)]
    recs += [record("local", 0.7, s, status="failed") for s in SEEDS]
    recs = [r for r in recs if not (r["params"]["algorithm.name"] == "fedavg"
                                    and r["params"]["missing.rate"] == 0.3 and r["seed"] == 2)]
    recs.append(record("fedavg", 0.3, 2, status="failed"))
    out = make_table(recs, SPEC)
    assert md_row(out.markdown, "local")[5] == "failed"
    partial = md_row(out.markdown, "FedAvg")[3]
    assert partial.endswith("†")
    ok_values = [100 * accuracy("fedavg", 0.3, s) for s in (0, 1)]
    cell = frame_cell(out, "fedavg", 0.3)
    assert cell["mean"] == pytest.approx(statistics.mean(ok_values)) and cell["n"] == 2 and cell["n_failed"] == 1
    assert "1 of 3 seeds failed: NaN loss (round 3)" in out.markdown
    assert "all seeds failed" in out.markdown
    assert r"$^{\dagger}$" in out.latex
    assert frame_cell(out, "local", 0.7)["status"] == "failed"


def test_mixed_recipes_keep_latest_and_footnote() -> None:
    recs = suite_records()
    recs += [record("fedavg", 0.0, s, acc=0.10, recipe="recipe-OLD", ts="2023-01-01T00:00:00") for s in SEEDS[:2]]
    out = make_table(recs, SPEC)
    cell = frame_cell(out, "fedavg", 0.0)
    assert cell["mean"] == pytest.approx(statistics.mean(100 * accuracy("fedavg", 0.0, s) for s in SEEDS))
    assert cell["n_excluded"] == 2
    assert md_row(out.markdown, "FedAvg")[1].endswith("‡")
    assert "FedAvg @ 0%: 2 record(s) excluded, older artifact recipe" in out.markdown
    assert r"$^{\ddagger}$" in out.latex

    # the newer recipe wins even when it is the smaller group
    newer = suite_records() + [record("fedavg", 0.0, 0, acc=0.5, protocol="proto-2", ts="2025-01-01T00:00:00")]
    out = make_table(newer, SPEC)
    cell = frame_cell(out, "fedavg", 0.0)
    assert cell["mean"] == pytest.approx(50.0) and cell["n"] == 1 and cell["n_excluded"] == 3
    assert "older protocol" in out.markdown


def test_rerun_of_a_seed_replaces_older_record() -> None:
    recs = suite_records() + [record("fedavg", 0.0, 0, acc=0.9, ts="2024-06-01T00:00:00")]
    cell = frame_cell(make_table(recs, SPEC), "fedavg", 0.0)
    expected = [90.0] + [100 * accuracy("fedavg", 0.0, s) for s in (1, 2)]
    assert cell["n"] == 3 and cell["mean"] == pytest.approx(statistics.mean(expected))


def test_paper_number_in_the_same_cell_as_ours() -> None:
    spec = {**SPEC, "paper": {"fedavg": {0.3: {"accuracy": 81.2}}, "fedgmm": {0.3: {"accuracy": 83.4}},
                              "local": {0.3: {"accuracy": "N/A"}}}}
    out = make_table(suite_records(), spec)
    cols = header(out.markdown)
    assert not any("(paper)" in c for c in cols)  # no column of its own: the table stays narrow
    assert len(cols) == len(header(make_table(suite_records(), SPEC).markdown))
    idx = cols.index("30% · Accuracy")
    ours = frame_cell(out, "fedavg", 0.3)
    assert md_row(out.markdown, "FedAvg")[idx].replace("*", "") == f"{ours['mean']:.2f} ± {ours['std']:.2f} (81.20)"
    assert "(" not in md_row(out.markdown, "fed_prox")[idx]  # no paper number, nothing appended
    assert md_row(out.markdown, "local")[idx].endswith("(N/A)")
    paper_only = md_row(out.markdown, "fedgmm")  # a method only the paper reports still gets its row
    assert paper_only[idx] == "— (83.40)" and paper_only[1] == "—"
    assert "In parentheses: the number the original paper reports" in out.markdown
    assert "(81.20)" in out.latex
    assert ours["paper"] == pytest.approx(81.2)


def test_control_mean_in_brackets_and_out_of_the_cells() -> None:
    """Records under the control condition leave the cells (not averaged in) and print in brackets."""
    shuffled = [record(a, r, s, extra_params={"missing.content": "shuffle"}, acc=0.05 + 0.01 * s)
                for a in BASE for r in (0.3,) for s in SEEDS]
    spec = {**SPEC, "control": {"where": {"missing.content": "shuffle"}, "label": "content shuffled"}}
    plain = make_table(suite_records(), SPEC)
    out = make_table(suite_records() + shuffled, spec)
    cols = header(out.markdown)
    idx = cols.index("30% · Accuracy")
    assert frame_cell(out, "fedavg", 0.3)["mean"] == pytest.approx(frame_cell(plain, "fedavg", 0.3)["mean"])
    assert frame_cell(out, "fedavg", 0.3)["control"] == pytest.approx(100 * (0.05 + 0.01 * sum(SEEDS) / len(SEEDS)))
    assert md_row(out.markdown, "FedAvg")[idx].endswith(f"[{100 * (0.05 + 0.01 * sum(SEEDS) / len(SEEDS)):.2f}]")
    assert "[" not in md_row(out.markdown, "FedAvg")[cols.index("70% · Accuracy")]  # no control ran there
    assert "under the control (content shuffled)" in out.markdown
    with pytest.raises(ConfigError, match="row or column key"):
        make_table(suite_records(), {**SPEC, "control": {"where": {"missing.rate": 0.3}}})
    with pytest.raises(ConfigError, match="table.control"):
        make_table(suite_records(), {**SPEC, "control": {"missing.content": "shuffle"}})
    # without the control the shuffled runs would be averaged into the cells
    mixed = make_table(suite_records() + shuffled, SPEC)
    assert frame_cell(mixed, "fedavg", 0.3)["mean"] != pytest.approx(frame_cell(plain, "fedavg", 0.3)["mean"])


def balanced(text: str) -> bool:
    depth = 0
    for ch in re.sub(r"\\[{}]", "", text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def test_latex_is_escaped_and_well_formed() -> None:
    spec = {**SPEC, "paper": {"fedavg": {0.3: {"accuracy": 81.2}}}, "na": {"local": ["macro_f1"]},
            "caption": "Rates as 30% & more, key missing_rate; $\\alpha$ kept"}
    out = make_table(suite_records(), spec, title="Demo_suite")
    tex = out.latex
    assert balanced(tex)
    assert tex.count(r"\begin{") == tex.count(r"\end{")
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"fed\_prox" in tex and r"30\%" in tex and r"missing\_rate" in tex and r"\&" in tex
    assert r"$\alpha$" in tex and r"Demo\_suite" in tex
    assert r"\multicolumn{2}{c}{30\%}" in tex and "(81.20)" in tex  # accuracy (with the paper's), macro_f1
    assert "±" not in tex and "—" not in tex
    body = tex[tex.index(r"\midrule"):tex.index(r"\bottomrule")]
    n_cols = len(re.search(r"\\begin\{tabular\}\{(\w+)\}", tex).group(1))
    for line in body.splitlines()[1:]:
        assert line.endswith(r"\\") and len(re.findall(r"(?<!\\)&", line)) == n_cols - 1


def test_single_seed_prints_mean_only() -> None:
    recs = [r for r in suite_records() if r["seed"] == 0]
    out = make_table(recs, SPEC)
    assert "±" not in md_row(out.markdown, "FedAvg")[1]
    assert "single seed" in out.markdown


def test_multi_level_rows_and_no_columns() -> None:
    recs = [record(a, 0.3, s, extra_params={"imputer.name": imp}, acc=accuracy(a, 0.3, s) + off)
            for imp, off in (("zero", 0.0), ("mean", 0.01)) for a in BASE for s in SEEDS]
    spec = {"rows": ["imputer.name", "algorithm.name"], "row_order": ["zero", "mean", "local", "fedavg"],
            "metrics": ["accuracy"], "filters": {"missing.rate": 0.3},
            "paper": {"zero": {"fedavg": {"accuracy": 80}}}}
    out = make_table(recs, spec)
    assert header(out.markdown)[:3] == ["Imputer", "Algorithm", "Accuracy"]
    body = [[c.strip() for c in line.strip("|").split("|")] for line in out.markdown.splitlines()
            if line.startswith("|") and not line.startswith("|--")][1:]
    assert [row[0] for row in body] == ["zero", "", "", "mean", "", ""]  # level-0 label once per group
    assert [row[1] for row in body[:3]] == ["local", "fedavg", "fed_prox"]
    assert body[1][2].endswith("(80.00)") and len(body[1]) == 3
    best = out.frame[out.frame["rank"] == 1]
    assert list(zip(best["imputer.name"], best["algorithm.name"])) == [("mean", "fedavg")]
    assert r"\addlinespace" in out.latex and balanced(out.latex)


def test_spec_errors() -> None:
    recs = suite_records()
    with pytest.raises(ConfigError, match="unknown table spec key 'colums'.*did you mean 'columns'.*valid:"):
        make_table(recs, {**SPEC, "colums": "x"})
    with pytest.raises(ConfigError, match="partition.alpha"):
        make_table(recs, {**SPEC, "columns": "partition.alpha"})
    with pytest.raises(ConfigError, match="metric 'acuracy'"):
        make_table(recs, {**SPEC, "metrics": ["acuracy"]})
    with pytest.raises(ConfigError, match="lower_is_better"):
        make_table(recs, {**SPEC, "lower_is_better": ["loss"]})
    with pytest.raises(ConfigError, match="table.paper"):
        make_table(recs, {**SPEC, "paper": {"fedavg": {0.3: {"acc": 1}}}})
    with pytest.raises(ConfigError, match="needs 'rows'"):
        make_table(recs, {"metrics": ["accuracy"]})
    with pytest.raises(ConfigError, match="match no records"):
        make_table(recs, {**SPEC, "filters": {"missing.rate": 0.5}})


def test_param_varying_inside_a_cell_is_an_error() -> None:
    recs = [record(a, r, s, extra_params={"partition.alpha": alpha})
            for alpha in (0.1, 1.0) for a in BASE for r in RATES for s in SEEDS]
    with pytest.raises(ConfigError, match="partition.alpha.*several values"):
        make_table(recs, SPEC)
    out = make_table(recs, {**SPEC, "filters": {"partition.alpha": 1}})
    assert frame_cell(out, "fedavg", 0.3)["n"] == 3


def test_write_table(tmp_path: Path) -> None:
    out = make_table(suite_records(), SPEC, title="Demo")
    paths = write_table(out, tmp_path / "tables", "demo_tiny")
    assert [p.name for p in paths] == ["demo_tiny.md", "demo_tiny.tex"]
    assert paths[0].read_text() == out.markdown and paths[1].read_text() == out.latex


def test_load_records(tmp_path: Path) -> None:
    path = tmp_path / "demo.jsonl"
    recs = suite_records()[:3]
    path.write_text(json.dumps(recs[0]) + "\n\n" + json.dumps(recs[1]) + "\n   \n" + json.dumps(recs[2]) + "\n")
    assert load_records(path) == [Record.from_dict(r) for r in recs]
    path.write_text(json.dumps(recs[0]) + "\n" + '{"suite": "demo", "sta' + "\n")
    with pytest.raises(DataError, match=r"demo\.jsonl:2: corrupt"):
        load_records(path)
    with pytest.raises(DataError, match="not found"):
        load_records(tmp_path / "missing.jsonl")


def test_caption_prints_the_measured_availability_per_column_when_records_carry_it():
    recs = suite_records()
    for r in recs:  # what the engine measures from the artifact: share of nodes holding each modality
        r["availability"] = {"text": round(0.9 - r["params"]["missing.rate"] - 0.01 * r["seed"], 4),
                             "image": 0.5}
    md = make_table(recs, SPEC).markdown
    assert "Measured availability" in md
    assert "0%: image 0.50, text 0.88–0.90" in md           # min–max over the seeds of a column
    assert "70%: image 0.50, text 0.18–0.20" in md
    assert "Measured availability" not in make_table(suite_records(), SPEC).markdown  # older records: nothing


def test_caption_divides_availability_by_the_data_coverage_where_records_state_it():
    """A KG record states which share of the entities the data gives each modality at all
    (``coverage``); the caption then also prints the availability among those, so a fully
    available column reads 1.00 where numeric attributes cover only 70% of the entities."""
    recs = suite_records()
    for r in recs:
        r["availability"] = {"text": 1.0, "image": 0.7}
        r["coverage"] = {"text": 1.0, "image": 0.7}
    md = make_table(recs, SPEC).markdown
    assert "image 0.70 (1.00 of the entities the data gives it), text 1.00" in md
    for r in recs:
        r["availability"]["image"] = 0.35
    assert "image 0.35 (0.50 of the entities the data gives it)" in make_table(recs, SPEC).markdown
    for r in recs:
        del r["coverage"]
    assert "of the entities the data gives it" not in make_table(recs, SPEC).markdown
