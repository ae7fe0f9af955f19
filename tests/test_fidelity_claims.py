"""The fidelity numbers docs/findings.md and `tables/fidelity.md` print are the ones the code computes
from the committed stores, and each committed paper table's caption states the same score; the
findings page opens with the generated per-paper summary and names no internal issue. A
hand-edited number, or a store re-run without `python run_benchmark.py fidelity` (and `table`),
fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmark.report.fidelity import tau_text
from benchmark.results import pending_stores
from benchmark.report.fidelity_summary import (FINDINGS_PAGE, SUMMARY_BEGIN, SUMMARY_END, FidelityRow,
                                               collect_fidelity, findings_block, findings_table, render_page,
                                               summary_block, summary_table)
from benchmark.report.paper_summary import PAPERS

ROOT = Path(__file__).resolve().parent.parent
# every committed store with a table that prints the paper's numbers and ranks methods
EXPECTED = {"fedmpo_table1_small", "fedmpo_table2_small_0", "fedmpo_table2_small_1", "fedmgs_table2_small",
            "fedmgs_table3_small", "fedmgs_table6_small", "mmfed3_table3_small", "mmfed3_table6_small"}


@pytest.fixture(scope="module")
def rows() -> list[FidelityRow]:
    return collect_fidelity(ROOT / "results")


def test_every_paper_table_of_a_committed_store_is_scored(rows: list[FidelityRow]) -> None:
    # a store pending its re-run after a suite change may be unrenderable until it lands
    unscored = EXPECTED - {r.stem for r in rows}
    pending = pending_stores(ROOT / "results")
    assert all(stem.rsplit("_small", 1)[0] in pending for stem in unscored), unscored
    assert all(r.fidelity.measured for r in rows)


def test_findings_page_fidelity_table_is_the_generated_one(rows: list[FidelityRow]) -> None:
    assert findings_table((ROOT / FINDINGS_PAGE).read_text(encoding="utf-8")) == findings_block(rows), \
        "run: python run_benchmark.py fidelity"


def test_fidelity_page_is_the_generated_one(rows: list[FidelityRow]) -> None:
    assert (ROOT / "tables" / "fidelity.md").read_text(encoding="utf-8") == render_page(rows), \
        "run: python run_benchmark.py fidelity"


def test_each_committed_table_caption_states_its_score(rows: list[FidelityRow]) -> None:
    for row in rows:
        text = (ROOT / "tables" / f"{row.stem}.md").read_text(encoding="utf-8")
        assert f"Kendall τ between our ranking of the rows and the paper's = {tau_text(row.fidelity)} " in text, row.stem


def _blocks(text: str) -> list[str]:
    """The page's blocks (paragraphs, tables, headings, comments), as separated by blank lines."""
    return [b.strip() for b in re.split(r"\n\s*\n", text) if b.strip()]


def test_findings_page_opens_with_the_generated_summary_table(rows: list[FidelityRow]) -> None:
    """After the title and the intro paragraph, the first block (the markers aside) is the per-paper
    summary table, one row per paper, as the code generates it from the committed stores."""
    text = (ROOT / FINDINGS_PAGE).read_text(encoding="utf-8")
    blocks = _blocks(text)
    assert blocks[0].startswith("# ") and not blocks[1].startswith(("#", "|", "<!--")), blocks[:2]
    first = next(b for b in blocks[2:] if not b.startswith("<!--"))
    assert blocks[2] == SUMMARY_BEGIN and first.startswith("|"), first[:80]
    body = [line for line in first.splitlines()[2:] if line.startswith("|")]
    assert [line.split("|")[1].strip() for line in body] == [p.name for p in PAPERS]
    assert summary_table(text) == summary_block(rows), "run: python run_benchmark.py fidelity"
    assert text.index(SUMMARY_END) < text.index("\n## "), "the summary comes before the first section"


def test_findings_page_names_no_internal_issue() -> None:
    """A reader has no issue tracker: the page says what changed, not which issue changed it."""
    text = (ROOT / FINDINGS_PAGE).read_text(encoding="utf-8")
    found = [m.group(0) for m in re.finditer(r"(?i)\bissues? #?\d+", text)]
    assert found == [], found
