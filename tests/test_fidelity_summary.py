"""The fidelity summary from a suite's store: the `fidelity` verb's page and the findings page's
tables (docs/findings.md: the per-paper summary after its intro, the fidelity table), and
the leaderboard's fidelity lines and split markdown sections."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

import pytest
from markdown_tables import table_widths

from fedmm_bench.cli import main
from benchmark.report.fidelity import tau_text
from benchmark.report.fidelity_summary import (FINDINGS_BEGIN, FINDINGS_END, FINDINGS_PAGE, SUMMARY_BEGIN,
                                               SUMMARY_END, collect_fidelity, describe, findings_block,
                                               findings_table, render_page, splice_findings, splice_summary,
                                               summary_block, summary_table)
from benchmark.report.leaderboard import build_leaderboard
from benchmark.report.markdown import MAX_MARKDOWN_COLUMNS
from benchmark.report.paper_summary import PAPERS, RankedCell, RankedColumn, render_summary, summarize
from benchmark.results import ResultStore
from benchmark.sweep import load_suite

SUITE = "fedmpo_table2"  # two tables with the paper's numbers, rows = methods
SCALE = "tiny"


def _store(root: Path) -> None:
    """Every tiny cell of the suite, scored as the paper scores it (left table: accuracy vs the
    missing rate at alpha 0.5; right table: vs alpha at 30%), plus a seed offset."""
    suite = load_suite(SUITE)
    left, right = (t["paper"] for t in suite.spec["tables"])
    store = ResultStore(suite.results_path(root, SCALE))
    for cell in suite.cells(SCALE, validate=False):
        alg, rate, alpha = (cell.params[k] for k in ("algorithm.name", "missing.rate", "partition.alpha"))
        if alg not in left:  # a reference row (chance, linear): no paper number to score against
            continue
        paper = left[alg][rate] if alpha == 0.5 else right[alg][alpha]
        acc = paper["accuracy"] / 100 + 0.002 * cell.seed
        store.append({"suite": SUITE, "scale": SCALE, "cell_id": cell.cell_id, "params": cell.params,
                      "seed": cell.seed, "status": "ok", "error": None, "config": cell.config,
                      "metrics": {"test/accuracy": acc}, "per_client": {"test/accuracy": [acc - 0.1, acc]},
                      "bytes_per_round": 1e5, "seconds_per_round": 0.5,
                      "provenance": {"artifact_recipe": "r", "protocol": "p", "git_sha": "abc"},
                      "timestamp": "2025-01-01T00:00:00+00:00"})


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fid") / "results"
    _store(root)
    return root


def test_rows_from_a_store(results: Path) -> None:
    rows = collect_fidelity(results)
    assert [(r.suite, r.scale, r.stem) for r in rows] == [(SUITE, SCALE, f"{SUITE}_{SCALE}_0"),
                                                         (SUITE, SCALE, f"{SUITE}_{SCALE}_1")]
    left = rows[0].fidelity
    assert left.tau == pytest.approx(1.0) and len(left.columns) == 5 and left.n_methods == 12
    assert rows[0].datasets == ("synthetic",)
    assert describe(rows[0]).startswith(f"{SUITE}_{SCALE}_0: Kendall τ = {tau_text(left)} (95% bootstrap")
    page_rows = [line for line in render_page(rows).splitlines() if f"`{SUITE}_{SCALE}_0.md`" in line]
    assert len(page_rows) == 1 and page_rows[0].rstrip(" |").endswith(tau_text(left))


def test_fidelity_verb_writes_the_page_and_the_findings_table(results: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "findings.md"
    page.write_text(f"# Title\n\nprose before\n\n{FINDINGS_BEGIN}\nstale\n{FINDINGS_END}\n\nprose after\n")
    assert main(["fidelity", "--results", str(results), "--out", str(tmp_path / "t"), "--findings", str(page)]) == 0
    rows = collect_fidelity(results)
    assert (tmp_path / "t" / "fidelity.md").read_text() == render_page(rows)
    assert f"{FINDINGS_PAGE} holds the same table" in render_page(rows)
    text = page.read_text()
    assert findings_table(text) == findings_block(rows) and "stale" not in text
    assert text.startswith("# Title\n\nprose before\n\n") and text.endswith("\n\nprose after\n")
    # the page had no summary markers: the summary goes right after the intro, and stays there
    assert text.startswith(f"# Title\n\nprose before\n\n{summary_block(rows)}\n\n{FINDINGS_BEGIN}")
    assert summary_table(text) == summary_block(rows) and splice_summary(text, summary_block(rows)) == text
    assert f"{SUITE}_{SCALE}_0" in capsys.readouterr().out


def test_the_findings_page_is_the_default_and_no_findings_leaves_it(results: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from a folder holding docs/findings.md: the verb rewrites that page's table, and
    --no-findings (or the older --no-readme) leaves it as it was."""
    monkeypatch.chdir(tmp_path)
    page = tmp_path / FINDINGS_PAGE
    page.parent.mkdir(parents=True)
    original = f"{FINDINGS_BEGIN}\nstale\n{FINDINGS_END}\n"
    for flag in ("--no-findings", "--no-readme"):
        page.write_text(original)
        assert main(["fidelity", "--results", str(results), "--out", "t", flag]) == 0
        assert page.read_text() == original
    assert main(["fidelity", "--results", str(results), "--out", "t"]) == 0
    assert findings_table(page.read_text()) == findings_block(collect_fidelity(results))


def test_page_without_markers_is_a_one_line_error(results: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "findings.md"
    page.write_text("# no markers\n")
    assert main(["fidelity", "--results", str(results), "--out", str(tmp_path), "--findings", str(page)]) == 2
    assert "fidelity markers" in capsys.readouterr().err and page.read_text() == "# no markers\n"
    with pytest.raises(Exception, match="markers"):
        splice_findings(f"{FINDINGS_END}\n{FINDINGS_BEGIN}\n", "x")


def test_leaderboard_shows_fidelity_and_no_table_is_too_wide(results: Path, tmp_path: Path) -> None:
    board = build_leaderboard(results, tmp_path / "tables", plots=False)
    (section,) = board.sections
    assert [r.stem for r in section.fidelity] == [f"{SUITE}_{SCALE}_0", f"{SUITE}_{SCALE}_1"]
    md = board.markdown[0].read_text()
    page = board.html.read_text()
    for row in section.fidelity:
        assert describe(row) in md and html.escape(describe(row)) in page
    widths = [n for _, n in table_widths(md)]
    assert widths and max(widths) <= MAX_MARKDOWN_COLUMNS
    assert md.count("#### Scores") == 1 and md.count("#### Clients, cost and provenance") == 1


def test_a_wide_section_is_cut_into_tables_that_fit(tmp_path: Path) -> None:
    """Many grid params and metrics: the scores part is cut in pieces, each keeping # and Method."""
    store = ResultStore(tmp_path / "results" / "wide" / "tiny.jsonl")
    metrics = {f"test/m{i}": 0.5 + 0.01 * i for i in range(12)}
    for alg in ("a", "b"):
        params: dict[str, Any] = {"algorithm.name": alg, **{f"knob{i}": i for i in range(5)}}
        store.append({"suite": "wide", "scale": "tiny", "cell_id": alg, "params": params, "seed": 0,
                      "status": "ok", "error": None, "metrics": metrics,
                      "provenance": {"artifact_recipe": "r", "protocol": "p"},
                      "timestamp": "2025-01-01T00:00:00+00:00"})
    board = build_leaderboard(tmp_path / "results", tmp_path / "tables", plots=False)
    md = board.markdown[0].read_text()
    widths = [n for _, n in table_widths(md)]
    assert max(widths) <= MAX_MARKDOWN_COLUMNS and len(widths) == 3
    assert "#### Scores (1/2)" in md and "#### Scores (2/2)" in md
    headers = [line for line in md.splitlines() if line.startswith("| #")]
    assert len(headers) == 3 and all(h.split("|")[2].strip() == "Method" for h in headers)


def test_the_summary_of_the_store_counts_the_papers_headline_and_the_resolved_ranks(results: Path) -> None:
    """The store scores every cell as the paper does, each seed 0.2 points above the last: FedMPO
    (first in every column of the paper's Table 2) is first in all 8 ranking columns, and two
    adjacent methods are resolved where their paper numbers differ by over two standard errors
    (std 0.2 over 3 seeds each)."""
    rows = collect_fidelity(results)
    summaries = {s.paper.name: s for s in summarize(rows)}
    assert list(summaries) == [p.name for p in PAPERS]
    fedmpo = summaries["FedMPO"]
    assert (fedmpo.suites, fedmpo.tables, fedmpo.own_first, fedmpo.own_columns) == ((SUITE,), 2, 8, 8)
    assert fedmpo.tau_low == pytest.approx(1.0) and fedmpo.tau_high == pytest.approx(1.0) and fedmpo.excluded == 0
    left, right = (t["paper"] for t in load_suite(SUITE).spec["tables"])
    columns = [[left[a][rate]["accuracy"] for a in left] for rate in next(iter(left.values()))]
    columns += [[right[a][alpha]["accuracy"] for a in right] for alpha in next(iter(right.values()))]
    gap = 2 * math.sqrt(2 * 0.2 ** 2 / 3)
    expected = sum(b - a > gap for col in columns for a, b in zip(sorted(col), sorted(col)[1:]))
    assert (fedmpo.resolved, fedmpo.pairs) == (expected, 8 * 11) and 0 < expected < 88
    assert all(s.tables == 0 and s.pairs == 0 for name, s in summaries.items() if name != "FedMPO")
    table = [line for line in render_summary(summarize(rows)).splitlines() if line.startswith("| FedMPO")]
    assert len(table) == 1 and "8 / 8" in table[0] and f"{expected} / 88" in table[0]


def _cell(name: str, mean: float, std: float, n: int = 3, first: bool = False, **keys: str) -> RankedCell:
    return RankedCell((("algorithm.name", name), *keys.items()), mean, std, n, first)


def test_adjacent_pairs_need_two_standard_errors_and_two_seeds() -> None:
    se = math.sqrt(2 * 1.0 / 4)  # std 1 over 4 seeds each
    column = RankedColumn(("g",), "accuracy", (
        _cell("a", 10.0, 1.0, 4), _cell("b", 10.0 + 2 * se + 0.01, 1.0, 4),  # resolved
        _cell("c", 10.0 + 4 * se, 1.0, 4),                                   # not: 2 SE minus 0.01 above b
        _cell("d", 50.0, math.nan, 1)), 0)                                   # single seed: never resolved
    assert column.adjacent_pairs() == (1, 3)
    assert RankedColumn((), "accuracy", (_cell("a", 1.0, 0.0),), 0).adjacent_pairs() == (0, 0)


def test_the_own_method_is_the_papers_row_and_hide_for_mmfed3() -> None:
    mmfed3, fedmpo = PAPERS[0], PAPERS[1]
    assert mmfed3.is_own(_cell("mmfed3", 0, 0, **{"algorithm.imputer": "hide"}).row)
    assert not mmfed3.is_own(_cell("mmfed3", 0, 0, **{"algorithm.imputer": "ae"}).row)
    assert mmfed3.is_own(_cell("mmfed3", 0, 0, **{"missing.rate": "0.5"}).row)  # table IV: no imputer key
    assert fedmpo.is_own(_cell("fedmpo", 0, 0).row) and not fedmpo.is_own(_cell("fedavg", 0, 0).row)
    assert not fedmpo.is_own((("variant", "fedmpo"),))  # an ablation row is no method's


def test_summary_markers_are_replaced_in_place_and_must_come_in_pairs() -> None:
    page = f"# T\n\nintro\n\n{SUMMARY_BEGIN}\nold\n{SUMMARY_END}\n\n## Next\n"
    assert splice_summary(page, "NEW") == "# T\n\nintro\n\nNEW\n\n## Next\n"
    assert splice_summary("# T\n\n## Next\n", "NEW") == "# T\n\nNEW\n\n## Next\n"  # no intro: after the title
    with pytest.raises(Exception, match="summary markers"):
        splice_summary(f"# T\n\n{SUMMARY_END}\n", "NEW")
