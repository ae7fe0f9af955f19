"""The per-paper summary at the top of the findings page: for each paper the benchmark reproduces
(MMFeD3-HidE, FedMPO, FedMGS, FedMBridge), which of its suites print the paper's numbers, in how
many ranking columns its own method is tied for first in our tables, the range of the Kendall τ of those
tables (:mod:`benchmark.report.fidelity`), and how many adjacent ranks our seeds resolve.

A *ranking column* is one the Kendall τ scores: a column group x metric of a table that prints the
paper's number and ours for :data:`~benchmark.report.fidelity.MIN_METHODS` or more methods. In
it the methods are the table's ranked rows: not the reference rows (chance, linear, centralized
GNN), and not a cell with a collapsed or unlearned seed, which no table ranks
(:attr:`benchmark.report.flags.CellFlags.unrankable`). The own method is *tied for first* where
its cell is bold: not significantly below the column's best by the paired tests over seeds of
:mod:`benchmark.report.paired_tests`. Sorted by their mean over seeds, two adjacent
methods are *resolved* when their means differ by more than two standard errors of the
difference, ``sqrt(s1²/n1 + s2²/n2)`` over the cells' seeds (sample std, ddof 1); a pair with a
single-seed cell has no standard error and counts as unresolved.

``python run_benchmark.py fidelity`` computes it from the same table builds as the fidelity
table (:func:`ranked_table`), so both come from one pass over the stores
(:mod:`benchmark.report.fidelity_summary` writes them).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tabulate import tabulate

from benchmark.report.fidelity import MIN_METHODS, Fidelity, number_text

#: a table row as (row key, value) pairs, e.g. (("algorithm.name", "fedmpo"),)
RowKeys = tuple[tuple[str, Hashable], ...]
#: a difference counts as resolved above this many standard errors
RESOLVED_SE = 2.0


@dataclass(frozen=True)
class RankedCell:
    """One ranked method cell of a ranking column: its row, our mean, sample std and seed count
    (display units), and whether the table prints it first (bold)."""

    row: RowKeys
    mean: float
    std: float
    n: int
    first: bool


@dataclass(frozen=True)
class RankedColumn:
    """A ranking column of one table: its ranked method cells, and how many method cells it
    leaves out as collapsed or unlearned."""

    group: tuple[Hashable, ...]
    metric: str
    cells: tuple[RankedCell, ...]
    excluded: int

    def adjacent_pairs(self) -> tuple[int, int]:
        """(resolved, all) adjacent pairs of the cells sorted by mean (see the module docstring)."""
        ranked = sorted(self.cells, key=lambda c: c.mean)
        resolved = sum(_resolved(a, b) for a, b in zip(ranked, ranked[1:]))
        return resolved, max(len(ranked) - 1, 0)


def _resolved(a: RankedCell, b: RankedCell) -> bool:
    if a.n < 2 or b.n < 2 or not (math.isfinite(a.std) and math.isfinite(b.std)):
        return False
    return abs(a.mean - b.mean) > RESOLVED_SE * math.sqrt(a.std ** 2 / a.n + b.std ** 2 / b.n)


def ranked_table(records: Sequence[Any], spec: Mapping[str, Any]) -> tuple[Fidelity | None, tuple[RankedColumn, ...]]:
    """A table's fidelity (what :func:`benchmark.report.tables.make_table` reports) and its
    ranking columns, from one build of its cells (nothing rendered)."""
    from benchmark.report.table_cells import _build
    from benchmark.report.table_records import with_record_metrics
    from benchmark.report.table_spec import _parse_spec

    parsed = _parse_spec(spec)
    layout, _ = _build(with_record_metrics(records, parsed.metrics), parsed)
    if layout.fidelity is None:
        return None, ()
    return layout.fidelity, ranked_columns(layout)


def ranked_columns(layout: Any) -> tuple[RankedColumn, ...]:
    """The ranking columns of a built table (``table_cells._Layout``, typed loosely so this
    module does not import the one that builds it at import time): those its fidelity scores."""
    from benchmark.report.flags import reference_of

    spec = layout.spec
    out = []
    for column in layout.fidelity.columns:
        cells, excluded = [], 0
        for row in layout.rows:
            cell = layout.cells.get((row, column.group, column.metric))
            if reference_of(row, spec.rows) is not None or cell is None or cell.kind != "value" \
                    or not math.isfinite(cell.mean):
                continue
            if cell.flags is not None and cell.flags.unrankable:
                excluded += 1
                continue
            cells.append(RankedCell(tuple(zip(spec.rows, row)), float(cell.mean), float(cell.std), int(cell.n),
                                    cell.rank == 1))
        out.append(RankedColumn(column.group, column.metric, tuple(cells), excluded))
    return tuple(out)


@dataclass(frozen=True)
class Paper:
    """A paper, the prefix of its suites' names, and the row keys of its own method (a key a
    table's rows do not have is not asked: ``mmfed3_table4``'s MMFeD3 rows are HidE's)."""

    name: str
    prefix: str
    own: Mapping[str, str]

    def is_own(self, row: RowKeys) -> bool:
        keys = dict(row)
        return "algorithm.name" in keys and all(keys[k] == v for k, v in self.own.items() if k in keys)


PAPERS: tuple[Paper, ...] = (
    Paper("MMFeD3-HidE", "mmfed3_", {"algorithm.name": "mmfed3", "algorithm.imputer": "hide"}),
    Paper("FedMPO", "fedmpo_", {"algorithm.name": "fedmpo"}),
    Paper("FedMGS", "fedmgs_", {"algorithm.name": "fedmgs"}),
    Paper("FedMBridge", "fedmbridge_", {"algorithm.name": "fedmbridge"}),
)


class ScoredTable(Protocol):
    """What the summary reads of a fidelity row (``fidelity_summary.FidelityRow``)."""

    @property
    def suite(self) -> str: ...

    @property
    def fidelity(self) -> Fidelity: ...

    @property
    def ranking(self) -> tuple[RankedColumn, ...]: ...


@dataclass(frozen=True)
class PaperSummary:
    """One paper's line of the summary."""

    paper: Paper
    suites: tuple[str, ...]
    tables: int
    own_first: int
    own_columns: int  # ranking columns where the own method has a ranked cell
    tau_low: float
    tau_high: float
    resolved: int
    pairs: int
    excluded: int


def summarize(rows: Sequence[ScoredTable], papers: Sequence[Paper] = PAPERS) -> list[PaperSummary]:
    """One summary per paper (in ``papers``' order) over the measured tables of its suites."""
    out = []
    for paper in papers:
        mine = [r for r in rows if r.suite.startswith(paper.prefix) and r.fidelity.measured]
        columns = [c for r in mine for c in r.ranking]
        own = [c for c in columns if any(paper.is_own(cell.row) for cell in c.cells)]
        pairs = [c.adjacent_pairs() for c in columns]
        taus = [r.fidelity.tau for r in mine]
        out.append(PaperSummary(
            paper, tuple(dict.fromkeys(r.suite for r in mine)), len(mine),
            sum(any(paper.is_own(cell.row) and cell.first for cell in c.cells) for c in own), len(own),
            min(taus, default=math.nan), max(taus, default=math.nan),
            sum(p[0] for p in pairs), sum(p[1] for p in pairs), sum(c.excluded for c in columns)))
    return out


def _tau_range(s: PaperSummary) -> str:
    if math.isnan(s.tau_low):
        return "-"
    low, high = number_text(s.tau_low), number_text(s.tau_high)
    return low if low == high else f"{low} to {high}"


def _share(part: int, whole: int) -> str:
    return f"{part} / {whole} ({round(100 * part / whole)}%)" if whole else "-"


def render_summary(summaries: Sequence[PaperSummary]) -> str:
    """The markdown table, then a one-line note on what it counts and leaves out."""
    head = ["Paper", "Suites with the paper's numbers", "Own method tied for first (ranking columns)",
            "Kendall τ (range over tables)", "Resolved adjacent pairs (> 2 SE)"]
    body = [[s.paper.name,
             ", ".join(f"`{n}`" for n in s.suites) or "-",
             f"{s.own_first} / {s.own_columns}" if s.own_columns else "-",
             _tau_range(s),
             _share(s.resolved, s.pairs)] for s in summaries]
    table = tabulate(body, headers=head, tablefmt="github", disable_numparse=True,
                     colalign=("left", "left", "right", "right", "right"))
    excluded = sum(s.excluded for s in summaries)
    left_out = f"{excluded} such method cells" if excluded else "none at present"
    note = (f"Ranking columns: the columns of a table with the paper's number and ours for {MIN_METHODS} or more "
            "methods (those its Kendall τ scores); the own method (MMFeD3-HidE: MMFeD3 with HidE, from either start) "
            "is tied for first where its cell is bold (not significantly below the column's best by paired tests over "
            "seeds), and a table without it (an ablation, say) counts in the pairs only. "
            "Left out, as from every table's ranks: the reference rows (chance, linear, centralized GNN) and any cell "
            f"with a collapsed (×) or unlearned (∅) seed ({left_out}); a pair with a single-seed cell counts as "
            "unresolved.")
    return f"{table}\n\n{note}"


__all__ = ["PAPERS", "Paper", "PaperSummary", "RankedCell", "RankedColumn", "ScoredTable", "ranked_columns",
           "ranked_table", "render_summary", "summarize"]
