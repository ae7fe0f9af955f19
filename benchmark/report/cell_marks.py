"""Marks a table cell gets from the reference rows of its column: below the linear reference
(``flags.below_reference``), and not learned against the chance reference (``flags.unlearned``,
:mod:`benchmark.learned`). Apart from ``table_cells`` so that module keeps to building cells."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmark.report.flags import CellFlags, below_reference, chance_score, mark_learning, reference_of
from benchmark.report.table_spec import _Spec
from benchmark.report.table_text import RowKey

#: a table cell (``table_cells._Cell``: ``kind``, ``mean``, ``std``, ``flags``), typed loosely so
#: this module does not import the one that imports it
Cells = dict[tuple[RowKey, RowKey, str], Any]


def mark_below_reference(cells: Cells, rows: list[RowKey], groups: list[RowKey],
                          spec: _Spec, cell_records: dict[tuple[RowKey, RowKey], list[Mapping[str, Any]]]) -> None:
    """Flag shared-model cells below the linear reference of their column (``flags.below_reference``)."""
    refs = {reference_of(r, spec.rows): r for r in rows if reference_of(r, spec.rows) is not None}
    if "linear" not in refs or "chance" not in refs:
        return
    for group in groups:
        for metric in spec.metrics:
            lin, ch = cells.get((refs["linear"], group, metric)), cells.get((refs["chance"], group, metric))
            if lin is None or ch is None or lin.kind != "value" or ch.kind != "value":
                continue
            for row in rows:
                cell = cells[(row, group, metric)]
                recs = cell_records.get((row, group), [])
                shared = recs and not any((r.algorithm or {}).get("personalized") for r in recs)
                if reference_of(row, spec.rows) is None and cell.kind == "value" and shared and cell.flags is not None:
                    cell.flags.below_reference = below_reference(cell.mean, lin.mean, ch.mean,
                                                                 metric not in spec.lower_is_better, 2 * lin.std)


def mark_unlearned(cells: Cells, rows: list[RowKey], groups: list[RowKey],
                    spec: _Spec, cell_records: dict[tuple[RowKey, RowKey], list[Mapping[str, Any]]]) -> None:
    """Count each cell's seeds that did not learn (``flags.unlearned``), against the chance
    reference of its column where the table shows one; without one only the rise is judged."""
    chance_rows = [r for r in rows if reference_of(r, spec.rows) == "chance"]
    for group in groups:
        chance = next((c for r in chance_rows if (c := chance_score(cell_records.get((r, group), []))) is not None),
                      None)
        for row in rows:
            recs = cell_records.get((row, group), [])
            counted = CellFlags()
            mark_learning(counted, recs, chance)
            if not counted.unlearned:
                continue
            for metric in spec.metrics:
                cell = cells[(row, group, metric)]
                if cell.kind == "value" and cell.flags is not None:
                    cell.flags.unlearned = counted.unlearned
                    cell.flags.reasons += counted.reasons


__all__ = ["mark_below_reference", "mark_unlearned"]
