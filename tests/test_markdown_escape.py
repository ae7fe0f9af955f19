"""Names from records cannot break or inject into generated markdown tables."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from tabulate import tabulate

from benchmark.report.markdown import md_escape
from benchmark.report.leaderboard import build_leaderboard
from benchmark.results import ResultStore

sys.path.insert(0, str(Path(__file__).parent))
from test_leaderboard import _record  # noqa: E402

HOSTILE = "fed|avg <script>alert(1)</script> `code` **bold** back\\slash\nsecond line"


def _cells(line: str) -> list[str]:
    """Cells of a github-markdown table row, splitting only on unescaped pipes."""
    inner = line.strip()[1:-1]
    return [c.strip() for c in re.split(r"(?<!\\)\|", inner)]


def test_md_escape_neutralises_every_special():
    out = md_escape(HOSTILE)
    assert "\n" not in out
    assert re.search(r"(?<!\\)\|", out) is None          # no bare pipe: no new column
    assert "<" not in out and ">" not in out               # no tag
    assert re.search(r"(?<!\\)`", out) is None            # no code span
    assert re.search(r"(?<!\\)\*", out) is None           # no emphasis
    assert "&lt;script&gt;" in out and "back\\\\slash" in out
    assert md_escape("fedavg") == "fedavg" and md_escape("mh_pflid") == "mh_pflid" and md_escape(0.5) == "0.5"


@pytest.mark.parametrize("name", ["a|b", "x<y>z", "`tick`", "trail\\", HOSTILE])
def test_escaped_cell_keeps_the_table_shape(name):
    table = tabulate([[md_escape(name), "1.0"]], headers=["Method", "Acc"], tablefmt="github", disable_numparse=True)
    rows = table.splitlines()
    assert all(len(_cells(r)) == 2 for r in rows), table


def test_leaderboard_escapes_hostile_algorithm_names(tmp_path: Path):
    store = ResultStore(tmp_path / "results" / "demo" / "tiny.jsonl")
    for alg in ("fedavg", HOSTILE):
        for seed in (0, 1):
            store.append(_record(alg, 0.0, seed, 0.7 + 0.01 * seed))
    store.append(_record(HOSTILE, 0.5, 0, 0.0, status="failed"))
    out = build_leaderboard(tmp_path / "results", tmp_path / "tables", plots=False)
    md = (tmp_path / "tables" / "leaderboard_demo.md").read_text()
    assert out.markdown and "<script>" not in md and "&lt;script&gt;" in md
    table_rows = [ln for ln in md.splitlines() if ln.startswith("|")]
    tables = [block.splitlines() for block in re.split(r"\n(?!\|)[^\n]*\n", md) if block.startswith("|")]
    assert len(tables) >= 2 and sum(map(len, tables)) == len(table_rows)  # scores, then cost and provenance
    for rows in tables:
        widths = {len(_cells(r)) for r in rows}
        assert len(widths) == 1, f"rows of one table with different column counts: {widths}"
    assert any("fed\\|avg" in r for r in table_rows)
    failed = [ln for ln in md.splitlines() if ln.startswith("- failed seeds of")]
    assert failed and all("<" not in ln and "\n" not in ln for ln in failed)


def test_prose_escape_keeps_authored_text_readable_but_inert():
    from benchmark.report.markdown import md_escape_prose

    out = md_escape_prose("FB15K-237 -> Ele-fashion, $\\alpha$ = 0.5, `sweep` | <b>x</b>")
    assert "->" in out and "$\\alpha$" in out and "`sweep`" in out      # as the suite author wrote it
    assert re.search(r"(?<!\\)\|", out) is None and "<" not in out         # no new column, no tag
