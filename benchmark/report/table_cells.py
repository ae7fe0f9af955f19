"""The table's cells from the records: selection, aggregation over seeds, flags, references and
the fidelity inputs. Part of :mod:`benchmark.report.tables`."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from benchmark.record import Record, as_records
from benchmark.errors import ConfigError, DataError, closest
from benchmark.report.fidelity import Fidelity, FidelityCell, kendall_fidelity
from benchmark.report.paired_tests import ColumnTest, adjacent_resolved, tied_for_first
from benchmark.report.flags import (
    REFERENCE_ALGORITHMS,
    CellFlags,
    reference_of,
    seed_flags,
)
from benchmark.report.cell_marks import mark_below_reference, mark_unlearned
from benchmark.report.record_filters import apply_filters, check_keys, check_uniform, under_condition
from benchmark.report.records import (
    AVAILABILITY_PREFIX,
    COVERED_PREFIX,
    aggregate,
    algorithm_display_names,
    availability_columns,
    metric_column,
    records_frame,
    select_records,
    value_key,
)
from benchmark.report.reference_rows import place_references
from benchmark.report.table_records import _undeclared_cells
from benchmark.report.table_spec import _Spec
from benchmark.report.table_text import RowKey, _fmt_value, _Format, key_label


@dataclass
class _Cell:
    kind: str  # "value" | "failed" | "na" | "missing"
    mean: float = math.nan
    std: float = math.nan
    n: int = 0
    attempted: int = 0  # ok + failed seeds, for the caption's seed count
    rank: int = 0  # 1: tied for first in its column (paired tests over seeds), else 0
    dagger: bool = False
    ddagger: bool = False
    control: float = math.nan  # mean under the table's control condition (display units)
    paper: float | str | None = None  # the paper's number, or "N/A" where it reports none
    flags: CellFlags | None = None  # the pathology guard over the cell's seeds

    def _ours(self, fmt: _Format, decimals: int) -> str:
        # bold: tied for first by paired tests over seeds (rank 1); nothing else is emphasized
        if self.kind == "na":
            return "N/A"
        if self.kind == "missing":
            return fmt.missing
        if self.kind == "failed":
            text = "failed"
        else:
            text = f"{self.mean:.{decimals}f}"
            if self.n > 1 and not math.isnan(self.std):
                text += f"{fmt.pm}{self.std:.{decimals}f}"
            if self.rank == 1:
                text = fmt.bold(text)
        text += (fmt.dagger if self.dagger else "") + (fmt.ddagger if self.ddagger else "")
        if self.flags is not None and self.kind == "value":
            text += ((fmt.collapsed if self.flags.collapsed else "") + (fmt.unconverged if self.flags.unconverged else "")
                     + (fmt.unlearned if self.flags.unlearned else "") + (fmt.below if self.flags.below_reference else ""))
        return text

    def render(self, fmt: _Format, decimals: int) -> str:
        """Ours, then the control's mean in brackets, then the paper's number in parentheses."""
        text = self._ours(fmt, decimals)
        if not math.isnan(self.control):
            text += f" [{self.control:.{decimals}f}]"
        if isinstance(self.paper, float):
            text += f" ({self.paper:.{decimals}f})"
        elif self.paper is not None and self.kind != "na":
            text += f" ({fmt.esc(str(self.paper))})"
        return text


def _sort_key(nk: Hashable, order: Mapping[Hashable, int]) -> tuple[Any, ...]:
    if isinstance(nk, str) and nk in REFERENCE_ALGORITHMS:  # reference rows last, in their own order
        return (2, list(REFERENCE_ALGORITHMS).index(nk), 0, 0.0, "")
    if nk in order:
        return (0, order[nk], 0, 0.0, "")
    if isinstance(nk, float):
        return (1, 0, 0, nk, "")
    return (1, 0, 1, 0.0, str(nk))


@dataclass
class _Layout:
    """Everything needed to render: ordered rows/groups, cells and labels."""

    spec: _Spec
    rows: list[RowKey]
    groups: list[RowKey]
    cells: dict[tuple[RowKey, RowKey, str], _Cell]
    subcols: list[tuple[RowKey, str]]  # (group, metric)
    raw: dict[Hashable, Any]
    excluded: dict[tuple[RowKey, RowKey], tuple[int, str]]
    failures: dict[tuple[RowKey, RowKey], tuple[int, int, str]]
    availability: dict[RowKey, dict[str, tuple[float, float]]] = field(default_factory=dict)
    covered_availability: dict[RowKey, dict[str, tuple[float, float]]] = field(default_factory=dict)
    fidelity: Fidelity | None = None
    # algorithm name -> the display name its records carry (record.algorithm.display_name)
    display_names: dict[Hashable, str] = field(default_factory=dict)
    # (group, metric) -> the paired tests of the column, and its (resolved, total) adjacent pairs
    column_tests: dict[tuple[RowKey, str], ColumnTest] = field(default_factory=dict)
    adjacent_pairs: dict[tuple[RowKey, str], tuple[int, int]] = field(default_factory=dict)

    def row_label(self, nk: Hashable) -> str:
        if nk not in self.spec.row_labels and isinstance(nk, str) and nk in REFERENCE_ALGORITHMS:
            return REFERENCE_ALGORITHMS[nk]
        if nk not in self.spec.row_labels and nk in self.display_names:
            return self.display_names[nk]  # a method the suite does not label (run beside it): its class's name
        return self.spec.row_labels.get(nk, _fmt_value(self.raw.get(nk, nk)))

    def group_label(self, group: RowKey) -> str:
        parts = []
        for key, nk in zip(self.spec.columns, group):
            if nk in self.spec.column_labels:
                parts.append(self.spec.column_labels[nk])
            else:
                parts.append(f"{key_label(key, self.spec.key_labels)}={_fmt_value(self.raw.get(nk, nk))}")
        return " / ".join(parts)

    def shown_cells(self) -> list[_Cell]:
        """The cells the table prints (column_metrics hides a group's other metrics)."""
        return [self.cells[(row, group, metric)] for row in self.rows for group, metric in self.subcols]

    def cell_label(self, row: RowKey, group: RowKey) -> str:
        text = " / ".join(self.row_label(nk) for nk in row)
        return f"{text} @ {self.group_label(group)}" if group else text


def _measured_availability(selected: pd.DataFrame, spec: _Spec,
                           prefix: str = AVAILABILITY_PREFIX) -> dict[RowKey, dict[str, tuple[float, float]]]:
    """Per column group, the (min, max) over its successful runs of each modality's measured
    availability (``record.availability``; with ``COVERED_PREFIX`` the share among the
    nodes the data gives the modality), so a caption says what the models met rather
    than only the rate the masker was given. Records from before the field existed add nothing."""
    present = availability_columns(selected, prefix)
    ok = selected[selected["status"] == "ok"] if present else selected.iloc[0:0]
    out: dict[RowKey, dict[str, tuple[float, float]]] = {}
    for _, rec in ok.iterrows():
        group = tuple(value_key(rec[k]) for k in spec.columns)
        for col in present:
            value = rec[col]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            name = col[len(prefix):]
            lo, hi = out.setdefault(group, {}).get(name, (value, value))
            out[group][name] = (min(lo, value), max(hi, value))
    return out


def _build(records: Sequence[Record | Mapping[str, Any]], spec: _Spec) -> tuple[_Layout, pd.DataFrame]:
    if not records:
        raise DataError("no result records to tabulate")
    records = place_references(records, spec.rows, spec.columns, spec.filters)
    frame = records_frame(records)
    keys = spec.rows + spec.columns
    check_keys(frame, keys, "table spec")
    frame = apply_filters(frame, spec.filters, "table")
    if frame.empty:
        raise ConfigError(f"table filters {spec.filters} match no records")
    metric_cols = [metric_column(m) for m in spec.metrics]
    known = [c for c in frame.attrs.get("metric_keys", [])]
    for m, col in zip(spec.metrics, metric_cols):
        if col not in frame.columns:
            # with column_metrics a metric may belong to groups that have no records yet
            if (frame["status"] == "ok").any() and not spec.column_metrics:
                names = [c.split("/", 1)[1] if c.startswith("test/") else c for c in known]
                raise ConfigError(f"table metric '{m}' (column '{col}') is in no record{closest(m, names)}; "
                                  f"metrics in the records: {', '.join(names) or '(none)'}")
            frame[col] = math.nan
    control_means: dict[tuple[RowKey, RowKey, str], float] = {}
    if spec.control is not None:
        # the frame's index is each record's position, so the suite's one rule decides
        under = pd.Series([under_condition(records[i], spec.control.where) for i in frame.index],
                          index=frame.index, dtype="bool")
        control_means = _control_means(frame[under], spec, metric_cols)
        frame = frame[~under]
        if frame.empty:
            raise ConfigError(f"every record matches table.control {spec.control.where}; nothing is left to tabulate")
    check_uniform(frame, keys, "table spec")
    selected, exclusions = select_records(frame, keys)
    agg = aggregate(selected, keys, metric_cols)
    availability = _measured_availability(selected, spec)
    covered_availability = _measured_availability(selected, spec, COVERED_PREFIX)

    raw: dict[Hashable, Any] = {}
    for key in keys:
        for v in agg[key]:
            raw.setdefault(value_key(v), v)
    for nk, v in spec.paper_raw.items():
        raw.setdefault(nk, v)

    by_cell: dict[tuple[RowKey, RowKey, str], dict[str, Any]] = {}
    row_set: dict[RowKey, None] = {}
    group_set: dict[RowKey, None] = {}
    for rec in agg.to_dict("records"):
        row = tuple(value_key(rec[k]) for k in spec.rows)
        group = tuple(value_key(rec[k]) for k in spec.columns)
        metric = spec.metrics[metric_cols.index(rec["metric"])]
        by_cell[(row, group, metric)] = rec
        row_set.setdefault(row, None)
        group_set.setdefault(group, None)
    for row, group, _ in spec.paper:
        row_set.setdefault(row, None)
        group_set.setdefault(group, None)
    if len(spec.rows) == 1:
        for nk in spec.row_order:
            row_set.setdefault((nk,), None)
            raw.setdefault(nk, nk)
    rows = sorted(row_set, key=lambda r: tuple(_sort_key(nk, spec.row_order) for nk in r))
    groups = sorted(group_set, key=lambda g: tuple(_sort_key(nk, spec.column_order) for nk in g)) or [()]

    excluded = {
        (tuple(value_key(v) for v in ex.cell[:len(spec.rows)]),
         tuple(value_key(v) for v in ex.cell[len(spec.rows):])): (ex.n_excluded, ex.reason)
        for ex in exclusions
    }
    failures: dict[tuple[RowKey, RowKey], tuple[int, int, str]] = {}
    cells: dict[tuple[RowKey, RowKey, str], _Cell] = {}
    undeclared = _undeclared_cells(records, frame, spec, rows, groups)
    cell_records = _cell_records(records, selected, spec)
    for row in rows:
        na_metrics = set().union(*(spec.na.get(nk, set()) for nk in row))
        for group in groups:
            for metric in spec.metrics:
                rec = by_cell.get((row, group, metric))
                has_excl = (row, group) in excluded
                if metric in na_metrics or (row, group) in undeclared:
                    cell = _Cell("na")
                elif rec is None or rec["n_ok"] + rec["n_failed"] == 0:
                    cell = _Cell("missing")
                elif rec["n_ok"] == 0:
                    cell = _Cell("failed", ddagger=has_excl)
                    failures[(row, group)] = (rec["n_failed"], rec["n_failed"], rec["failure"])
                elif rec["n"] == 0:
                    cell = _Cell("missing", ddagger=has_excl)
                else:
                    scale = 1.0 if metric in spec.raw_metrics else 100.0
                    cell = _Cell("value", mean=rec["mean"] * scale, std=rec["std"] * scale, n=rec["n"],
                                 attempted=rec["n"] + rec["n_failed"],
                                 dagger=rec["n_failed"] > 0, ddagger=has_excl,
                                 flags=seed_flags(cell_records.get((row, group), []),
                                                  judge_convergence=not spec.fixed_budget))
                    if rec["n_failed"]:
                        failures[(row, group)] = (rec["n_failed"], rec["n_failed"] + rec["n_ok"], rec["failure"])
                cell.control = control_means.get((row, group, metric), math.nan)
                if (row, group, metric) in spec.paper:
                    cell.paper = spec.paper[(row, group, metric)]
                elif (row, group, metric) in spec.paper_na:
                    cell.paper = "N/A"
                cells[(row, group, metric)] = cell

    mark_below_reference(cells, rows, groups, spec, cell_records)
    mark_unlearned(cells, rows, groups, spec, cell_records)
    per_seed = _seed_scores(selected, spec, metric_cols)
    tests: dict[tuple[RowKey, str], ColumnTest] = {}
    pairs: dict[tuple[RowKey, str], tuple[int, int]] = {}
    for group in groups:
        for metric in spec.metrics:
            ranked = {r: c for r in rows if reference_of(r, spec.rows) is None
                      and (c := cells[(r, group, metric)]).kind == "value"
                      and math.isfinite(c.mean)  # an overflowed mean ranks nowhere
                      and not (c.flags is not None and c.flags.unrankable)}  # nor a collapsed or unlearned cell
            if len(ranked) < 2 or not spec.emphasis:
                continue
            # bold: every method tied for first by paired tests over the seeds (paired_tests.py)
            test = tied_for_first({r: per_seed.get((r, group, metric), {}) for r in ranked},
                                  higher_is_better=metric not in spec.lower_is_better)
            tests[(group, metric)] = test
            pairs[(group, metric)] = adjacent_resolved({r: per_seed.get((r, group, metric), {}) for r in ranked},
                                                       higher_is_better=metric not in spec.lower_is_better)
            for r, c in ranked.items():
                c.rank = 1 if r in test.tied else 0

    subcols = [(group, metric) for group in groups for metric in spec.group_metrics(group)]

    layout = _Layout(spec, rows, groups, cells, subcols, raw, excluded, failures,
                     {g: availability[g] for g in groups if g in availability},
                     {g: covered_availability[g] for g in groups if g in covered_availability})
    shown = set(subcols)
    layout.column_tests = {k: v for k, v in tests.items() if k in shown}
    layout.adjacent_pairs = {k: v for k, v in pairs.items() if k in shown}
    if "algorithm.name" in spec.rows:
        layout.display_names = algorithm_display_names(as_records(records))
    if spec.paper and spec.emphasis:  # a table of statistics (emphasis off) ranks nothing
        layout.fidelity = kendall_fidelity(_fidelity_cells(selected, spec, metric_cols, cells, subcols))
    out_rows = []
    for row in rows:
        for group in groups:
            for metric in spec.group_metrics(group):
                cell = cells[(row, group, metric)]
                rec = by_cell.get((row, group, metric)) or {}
                out_rows.append({
                    **{k: raw.get(nk, nk) for k, nk in zip(spec.rows, row)},
                    **{k: raw.get(nk, nk) for k, nk in zip(spec.columns, group)},
                    "metric": metric,
                    "mean": cell.mean if cell.kind == "value" else math.nan,
                    "std": cell.std if cell.kind == "value" else math.nan,
                    "n": cell.n,
                    "n_failed": int(rec.get("n_failed", 0)),
                    "n_excluded": excluded.get((row, group), (0, ""))[0],
                    "status": cell.kind,
                    "rank": cell.rank,
                    "paper": spec.paper.get((row, group, metric), math.nan),
                    "control": cell.control,
                })
    out = pd.DataFrame(out_rows, columns=[*spec.rows, *spec.columns, "metric", "mean", "std", "n",
                                          "n_failed", "n_excluded", "status", "rank", "paper", "control"])
    return layout, out


def _seed_scores(selected: pd.DataFrame, spec: _Spec,
                 metric_cols: list[str]) -> dict[tuple[RowKey, RowKey, str], dict[int, float]]:
    """Each (row, column group, metric) cell's score per seed, from the records it averages (ok
    records with a finite value): what the paired tests compare."""
    out: dict[tuple[RowKey, RowKey, str], dict[int, float]] = {}
    ok = selected[selected["status"] == "ok"] if "status" in selected.columns else selected
    for line in ok.to_dict("records"):  # a frame line per record (records_frame), not a record
        row = tuple(value_key(line[k]) for k in spec.rows)
        group = tuple(value_key(line[k]) for k in spec.columns)
        seed = line["seed"] if "seed" in line else None
        if seed is None or (isinstance(seed, float) and math.isnan(seed)):
            continue
        for metric, col in zip(spec.metrics, metric_cols):
            value = line[col] if col in line else None
            if isinstance(value, (int, float)) and math.isfinite(value):
                out.setdefault((row, group, metric), {})[int(seed)] = float(value)
    return out


def _cell_records(records: Sequence[Record | Mapping[str, Any]], selected: pd.DataFrame,
                  spec: _Spec) -> dict[tuple[RowKey, RowKey], list[Mapping[str, Any]]]:
    """The records each (row, column group) averages (the frame's index is a record's position)."""
    out: dict[tuple[RowKey, RowKey], list[Mapping[str, Any]]] = {}
    for i, rec in zip(selected.index, selected.to_dict("records")):
        row = tuple(value_key(rec[k]) for k in spec.rows)
        group = tuple(value_key(rec[k]) for k in spec.columns)
        out.setdefault((row, group), []).append(records[i])
    return out


def _control_means(frame: pd.DataFrame, spec: _Spec, metric_cols: list[str]) -> dict[tuple[RowKey, RowKey, str], float]:
    """Per (row, column group, metric), the mean over seeds of the control's ok records (display
    units), chosen by the same rule as the cells (latest recipe and protocol, latest per seed)."""
    if frame.empty:
        return {}
    keys = spec.rows + spec.columns
    check_uniform(frame, keys, "table control")
    selected, _ = select_records(frame, keys)
    out: dict[tuple[RowKey, RowKey, str], float] = {}
    for rec in aggregate(selected, keys, metric_cols).to_dict("records"):
        if rec["n"] == 0:
            continue
        metric = spec.metrics[metric_cols.index(rec["metric"])]
        scale = 1.0 if metric in spec.raw_metrics else 100.0
        row = tuple(value_key(rec[k]) for k in spec.rows)
        group = tuple(value_key(rec[k]) for k in spec.columns)
        out[(row, group, metric)] = rec["mean"] * scale
    return out


def _fidelity_cells(selected: pd.DataFrame, spec: _Spec, metric_cols: list[str],
                    cells: Mapping[tuple[RowKey, RowKey, str], _Cell],
                    subcols: list[tuple[RowKey, str]]) -> list[FidelityCell]:
    """The shown cells that hold our value and the paper's number, with our value per run (the
    ok records :func:`aggregate` averaged, keyed by record, in display units): what the
    fidelity score ranks. N/A, failed and missing cells have no value and stay out."""
    runs: dict[tuple[RowKey, RowKey, str], dict[Hashable, float]] = {}
    ok = selected[selected["status"] == "ok"]
    for idx, rec in ok.iterrows():
        row = tuple(value_key(rec[k]) for k in spec.rows)
        group = tuple(value_key(rec[k]) for k in spec.columns)
        for metric, col in zip(spec.metrics, metric_cols):
            value = rec[col]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            scale = 1.0 if metric in spec.raw_metrics else 100.0
            runs.setdefault((row, group, metric), {})[idx] = float(value) * scale
    shown = set(subcols)
    return [FidelityCell(row, group, metric, cell.paper, runs.get((row, group, metric), {}))
            for (row, group, metric), cell in cells.items()
            if (group, metric) in shown and cell.kind == "value" and isinstance(cell.paper, float)
            and not (cell.flags is not None and cell.flags.unrankable)]  # no rank for a cell that did not learn
