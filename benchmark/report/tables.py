"""Paper-style result tables (markdown + LaTeX) from result records and a suite's ``table:`` spec.

Layout: one row per value of ``rows`` (several keys give multi-level rows), one column group per
value of ``columns`` with one sub-column per metric. Cells print mean +- sample std (ddof=1) over
seeds in percent; in bold every method tied for first in its sub-column by paired tests over
seeds (``paired_tests.py``). Where the spec gives the paper's
number it follows ours in the same cell, in parentheses (``32.1 ± 0.5 (38.7)``), so a reader
compares without hunting for a second column; where the spec names a ``control`` (records the
sweep ran under a control condition, e.g. ``missing.content: shuffle``) the control's mean
follows in brackets (``32.1 ± 0.5 [7.7]``), so the table shows how much of a score survives
the control. Where the spec gives the paper's numbers, the caption also says how far our ranking of the
rows agrees with the paper's (a Kendall tau per column and its bootstrap interval over seeds,
:mod:`benchmark.report.fidelity`). A spec with ``split_wide: true`` prints a markdown table wider
than :data:`~benchmark.report.markdown.MAX_MARKDOWN_COLUMNS` as one table per value of its first
column key (per dataset, as papers split theirs), one caption for all. Which records form a cell follows
:mod:`benchmark.report.records` (latest recipe/protocol, failed seeds never averaged), and every
exclusion or failure is footnoted so a reader never sees an average that hides something.

Paper layouts mix tasks in one table (FedMPO Table 1: accuracy/F1 for node classification,
AUC/AP for link prediction, R@5/MRR for retrieval), so ``column_metrics`` gives a column value
its own metric subset. A method that does not declare a column's task (``Algorithm.tasks``,
looked up in the registry) prints N/A there without any ``na:`` entry: the sweep never runs
such a cell. Cost fields of the record (``seconds_per_round``, ``peak_memory_mb``, ...) can be
listed as metrics for efficiency tables; they print unscaled, lower is better.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from benchmark.record import Record
from benchmark.report.fidelity import Fidelity
from benchmark.report.table_cells import _build
from benchmark.report.table_records import RECORD_METRICS, with_record_metrics
from benchmark.report.table_render import _latex, _markdown
from benchmark.report.table_spec import VALID_KEYS, _parse_spec
from benchmark.report.table_text import key_label, latex_escape, metric_label


@dataclass
class TableOutput:
    """A rendered table; ``frame`` is long format, one row per (row, column group, metric),
    with mean/std in display units (percent unless the metric is listed in raw_metrics)."""

    markdown: str
    latex: str
    frame: pd.DataFrame
    footnotes: list[str] = field(default_factory=list)
    fidelity: Fidelity | None = None  # only for a ranking table (emphasis on) with paper numbers


def make_table(records: Sequence[Record | Mapping[str, Any]], spec: Mapping[str, Any], title: str = "") -> TableOutput:
    """Render ``records`` as a paper-style table following a suite's ``table:`` spec."""
    parsed = _parse_spec(spec)
    title = title or str(spec.get("title") or "")
    layout, frame = _build(with_record_metrics(records, parsed.metrics), parsed)
    markdown, notes = _markdown(layout, title)
    return TableOutput(markdown=markdown, latex=_latex(layout, title), frame=frame, footnotes=notes,
                       fidelity=layout.fidelity)


def write_table(output: TableOutput, out_dir: str | Path, stem: str) -> list[Path]:
    """Write ``<stem>.md`` and ``<stem>.tex`` under ``out_dir`` (created if needed)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, tex = out / f"{stem}.md", out / f"{stem}.tex"
    md.write_text(output.markdown, encoding="utf-8")
    tex.write_text(output.latex, encoding="utf-8")
    return [md, tex]


# The table is built in parts: table_spec (the suite's table: spec), table_records (record
# fields as metrics, N/A cells), table_cells (selection, aggregation, flags), table_text
# (labels, number formats, escaping) and table_render (markdown and LaTeX); this module is
# the entry point and keeps the names other modules import.
__all__ = ["RECORD_METRICS", "VALID_KEYS", "TableOutput", "key_label", "latex_escape", "make_table", "metric_label",
           "with_record_metrics", "write_table"]
