"""Record fields a table can list as metrics (cost fields, guard flags), and which cells print N/A
because their method does not declare the column's task. Part of
:mod:`benchmark.report.tables`."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from benchmark.record import Record, as_records
from benchmark.report.flags import REFERENCE_ALGORITHMS
from benchmark.report.records import metric_column, value_key
from benchmark.report.table_spec import RECORD_METRICS, _Spec
from benchmark.report.table_text import RowKey


def record_field(rec: Record, path: str) -> Any:
    """The value at a dotted field path of a record (None where any step is missing): the
    first step names a :class:`Record` field, the rest keys inside it (``cost.client_s``)."""
    head, *rest = path.split(".")
    value = getattr(rec, head, None)
    for step in rest:
        value = value.get(step) if isinstance(value, Mapping) else None
    return value


def with_record_metrics(records: Sequence[Record | Mapping[str, Any]], metrics: Sequence[str]) -> list[Record]:
    """The records (JSON objects read as records), as copies whose ``metrics`` also hold the
    cost fields listed (tables and figures read them as ``test/<name>``)."""
    records = as_records(records)
    wanted = [m for m in metrics if m in RECORD_METRICS]
    if not wanted:
        return records
    out: list[Record] = []
    for rec in records:
        extra = {}
        for m in wanted:
            fld, factor = RECORD_METRICS[m]
            value = record_field(rec, fld)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and rec.ok:
                extra[metric_column(m)] = float(value) * factor
        out.append(replace(rec, metrics={**rec.metrics, **extra}) if extra else rec)
    return out


def _record_task(rec: Record) -> str | None:
    """The task a record ran: its task.name param, else its config (failed records may lack it)."""
    params = rec.params or {}
    if "task.name" in params:
        return str(params["task.name"])
    task = ((rec.config or {}).get("task") or {}).get("name")
    return str(task) if task else None


def _undeclared_cells(records: Sequence[Record], frame: pd.DataFrame, spec: _Spec,
                      rows: list[RowKey], groups: list[RowKey]) -> set[tuple[RowKey, RowKey]]:
    """(row, group) cells whose method does not declare the cell's task (printed N/A).

    The method is the ``algorithm.name`` row or column value (in a table whose rows are one
    method option, only the reference rows name one); the task is the ``task.name``
    value when it is a row/column key, else the one task of the records that share the cell's
    other keys (a column such as "DY" runs link prediction for every method). Unregistered
    methods or an unknown / ambiguous task leave the cell alone.
    """
    keys = spec.rows + spec.columns
    if "algorithm.name" in keys:
        a_pos, only_references = keys.index("algorithm.name"), False
    elif len(spec.rows) == 1:  # rows are one method option: the reference rows hold their name there
        a_pos, only_references = 0, True
    else:
        return set()
    from benchmark import registry as R

    t_pos = keys.index("task.name") if "task.name" in keys else None
    tasks_by_rest: dict[tuple[Hashable, ...], set[str]] = {}
    if t_pos is None:
        for idx in frame.index:
            task = _record_task(records[idx])
            if task is None:
                continue
            nks = tuple(value_key(frame.at[idx, k]) for k in keys)
            rest = nks[:a_pos] + nks[a_pos + 1:]
            tasks_by_rest.setdefault(rest, set()).add(task)
    out: set[tuple[RowKey, RowKey]] = set()
    for row in rows:
        for group in groups:
            nks = row + group
            alg = str(nks[a_pos])
            if only_references and alg not in REFERENCE_ALGORITHMS:
                continue
            if t_pos is not None:
                task: str | None = str(nks[t_pos])
            else:
                found = tasks_by_rest.get(nks[:a_pos] + nks[a_pos + 1:], set())
                task = next(iter(found)) if len(found) == 1 else None
            if task is not None and not R.applicable(alg, task):
                out.add((row, group))
    return out
