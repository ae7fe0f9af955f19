"""Which records a table or figure reads: a filter on grid keys, keys that must exist, and keys
that must not vary unseen (what a reader would otherwise average without knowing). Beside
:mod:`benchmark.report.records`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from benchmark.errors import ConfigError, closest
from benchmark.record import Record
from benchmark.report.records import CELL_CONTEXT_FIELDS, value_key


def under_condition(record: Record, where: Mapping[str, Any]) -> bool:
    """True when every ``key: value`` of ``where`` matches the record's params (a record
    without the key does not match): picks out a suite's control runs."""
    params = record.params or {}
    for key, allowed in where.items():
        values = allowed if isinstance(allowed, (list, tuple, set)) else [allowed]
        if key not in params or value_key(params[key]) not in {value_key(v) for v in values}:
            return False
    return True


def check_keys(frame: pd.DataFrame, keys: Iterable[str], what: str) -> None:
    """ConfigError naming any key that is no column of the records (a typo in a spec)."""
    available = list(frame.attrs.get("param_keys", [])) + list(CELL_CONTEXT_FIELDS)
    for key in keys:
        if key not in frame.columns:
            raise ConfigError(
                f"{what} refers to param '{key}', which no record has{closest(key, available)}; "
                f"params in the records: {', '.join(available) or '(none)'}"
            )


def apply_filters(frame: pd.DataFrame, filters: Mapping[str, Any] | None, what: str) -> pd.DataFrame:
    """Keep records whose columns match ``filters`` (a value, or a list of allowed values)."""
    if not filters:
        return frame
    if not isinstance(filters, Mapping):
        raise ConfigError(f"{what}: filters must be a mapping of param -> value(s), got {type(filters).__name__}")
    check_keys(frame, filters, f"{what} filters")
    mask = pd.Series(True, index=frame.index)
    for key, allowed in filters.items():
        values = allowed if isinstance(allowed, (list, tuple, set)) else [allowed]
        wanted = {value_key(v) for v in values}
        mask &= frame[key].map(value_key).isin(wanted)
    return frame[mask]


def check_uniform(frame: pd.DataFrame, keys: Sequence[str], what: str) -> None:
    """ConfigError when a param not in ``keys`` takes several values inside one cell.

    Records lacking the param entirely (older schema) are ignored rather than counted as a
    distinct value, so adding a grid key later does not break old result files.
    """
    others = [k for k in list(frame.attrs.get("param_keys", [])) + list(CELL_CONTEXT_FIELDS)
              if k not in keys and k in frame.columns]
    if frame.empty or not others:
        return
    groups = frame.groupby(list(keys), dropna=False, sort=False) if keys else [((), frame)]
    for _, group in groups:
        for key in others:
            values = {value_key(v) for v in group[key] if value_key(v) != "null"}
            if len(values) > 1:
                shown = ", ".join(sorted(map(str, values)))
                raise ConfigError(
                    f"{what}: param '{key}' takes several values ({shown}) within one cell of "
                    f"{', '.join(keys) or 'the table'}; add it to the rows/columns or pick one with filters"
                )
