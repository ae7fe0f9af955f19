"""Reference rows in tables and figures whose rows are not methods.

A sensitivity grid (rows ``algorithm.lambda_rec``, columns ``algorithm.lambda_proto``) or an
ablation (rows ``variant``, columns ``setting``) runs one method; its references (chance, the
linear model, the centralized GNN: ``references:`` in the suite) are run once per setting and
carry none of the method's options. So that such a table still prints them as rows, each
reference record is listed under its own name in the row key and, for every column key it
does not carry, repeated under each value the method records hold: a reference does not
depend on the method's hyperparameters, so it reads the same in every such column. Tables whose
rows or columns are ``algorithm.name`` already list references as rows and are left alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import product
from typing import Any

from benchmark.record import Record, as_records
from benchmark.report.flags import REFERENCE_ALGORITHMS


def reference_name(record: Record) -> str | None:
    """The reference algorithm a record ran, or None for a method's record."""
    name = (record.params or {}).get("algorithm.name") or (record.algorithm or {}).get("name")
    return name if isinstance(name, str) and name in REFERENCE_ALGORITHMS else None


def _matches(record: Record, filters: Mapping[str, Any] | None) -> bool:
    """Whether a record passes a table's filters on the keys it carries (a key it lacks, such as
    a method option, does not exclude it)."""
    for key, allowed in (filters or {}).items():
        if key not in (record.params or {}):
            continue
        values = allowed if isinstance(allowed, (list, tuple, set)) else [allowed]
        if record.params[key] not in values:
            return False
    return True


def place_references(records: Sequence[Record | Mapping[str, Any]], rows: Sequence[str],
                     columns: Sequence[str], filters: Mapping[str, Any] | None = None) -> list[Record]:
    """The records with each reference placed in a table of ``rows`` x ``columns`` that does
    not list methods (see the module docstring); unchanged when the table lists
    ``algorithm.name``, has several row keys, or the records hold no reference."""
    recs = as_records(records)
    if "algorithm.name" in (*rows, *columns) or len(rows) != 1:
        return recs
    methods = [r for r in recs if reference_name(r) is None]
    references = [r for r in recs if reference_name(r) is not None and _matches(r, filters)]
    if not references:
        return recs
    row_key = rows[0]
    values: dict[str, list[Any]] = {}
    for key in columns:
        seen = [r.params[key] for r in methods if key in (r.params or {}) and _matches(r, filters)]
        values[key] = list(dict.fromkeys(seen))
    out = list(methods)
    for ref in references:
        params = {**ref.params, row_key: reference_name(ref)}
        missing = [k for k in columns if k not in ref.params]
        for combo in product(*(values[k] for k in missing)):
            out.append(replace(ref, params={**params, **dict(zip(missing, combo))}))
    return out


def reference_means(records: Sequence[Record | Mapping[str, Any]], metric_column: str,
                    filters: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Per reference algorithm, the mean of ``metric_column`` over its ok records that pass
    ``filters`` (a figure's note: a heatmap has no row to put them in)."""
    sums: dict[str, list[float]] = {}
    for rec in as_records(records):
        name = reference_name(rec)
        value = (rec.metrics or {}).get(metric_column)
        if name is None or not rec.ok or not _matches(rec, filters) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            sums.setdefault(name, []).append(float(value))
    return {name: sum(v) / len(v) for name in REFERENCE_ALGORITHMS if (v := sums.get(name))}


def reference_note(means: Mapping[str, float], percent: bool = True) -> str:
    """``means`` as one line ("Chance 25.0 · Linear 70.5"), in display units; "" for none."""
    def short(name: str) -> str:
        return REFERENCE_ALGORITHMS[name].split(" (")[0]

    return " · ".join(f"{short(n)} {v * 100:.1f}" if percent else f"{short(n)} {v:.3g}" for n, v in means.items())


__all__ = ["place_references", "reference_means", "reference_name", "reference_note"]
