"""No committed markdown table is wider than MAX_MARKDOWN_COLUMNS: the generated tables and
leaderboard pages under tables/, the README and the docs (a paper table that would be wider
splits per value of its first column key, ``split_wide``: tests/test_table_split.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_tables import table_widths

from benchmark.report.markdown import MAX_MARKDOWN_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = sorted(ROOT.glob("tables/*.md")) + [ROOT / "README.md"] + sorted(ROOT.glob("docs/*.md"))


def test_the_counter_reads_every_table_and_ignores_code_and_escaped_pipes() -> None:
    wide = "| " + " | ".join(f"c{i}" for i in range(15)) + " |\n|" + "---|" * 15 + "\n|" + " x |" * 15 + "\n"
    narrow = "| a \\| b | c |\n|---|---|\n| 1 | 2 |\n"
    code = "```\n" + wide + "```\n"
    assert table_widths("text\n\n" + wide + "\n" + narrow + "\n" + code) == [(3, 15), (7, 2)]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_committed_markdown_table_is_too_wide(path: Path) -> None:
    widths = table_widths(path.read_text(encoding="utf-8"))
    too_wide = [(line, n) for line, n in widths if n > MAX_MARKDOWN_COLUMNS]
    assert not too_wide, f"{path.name}: tables wider than {MAX_MARKDOWN_COLUMNS} columns at (line, columns) {too_wide}"


def test_every_leaderboard_page_is_checked() -> None:
    assert len([p for p in COMMITTED if p.name.startswith("leaderboard_")]) >= 10
