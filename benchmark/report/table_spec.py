"""A suite's ``table:`` spec, parsed and checked: rows, columns, metrics, labels, orders, paper
numbers, controls. Part of :mod:`benchmark.report.tables`."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchmark.errors import ConfigError, closest
from benchmark.report.records import value_key
from benchmark.report.table_text import RowKey

VALID_KEYS = (
    "rows", "row_order", "row_labels", "columns", "column_order", "column_labels",
    "metrics", "metric_labels", "key_labels", "lower_is_better", "raw_metrics", "decimals",
    "caption", "paper", "na", "filters", "column_metrics", "metric_decimals", "emphasis", "control",
    "split_wide", "fixed_budget",
    "title", "stem",  # read by the suite writer (report.suite_tables); make_table takes title too
)


# Record fields usable as table metrics: name -> (record field, dotted when nested, factor).
# Costs: printed unscaled and ranked lower-is-better without listing them in raw_metrics /
# lower_is_better. The *_ms ones are the per-round stage medians of ``benchmark.cost``.
RECORD_METRICS: dict[str, tuple[str, float]] = {
    "seconds_per_round": ("seconds_per_round", 1.0),
    "wall_time_s": ("wall_time_s", 1.0),
    "peak_memory_mb": ("peak_memory_mb", 1.0),
    "memory_growth_mb": ("memory_growth_mb", 1.0),
    "server_memory_mb": ("server_memory_mb", 1.0),
    "bytes_per_round": ("bytes_per_round", 1.0),
    "kb_per_round": ("bytes_per_round", 1.0 / 1024),
    "mb_per_round": ("bytes_per_round", 1.0 / 2**20),
    "download_ms": ("cost.download_s", 1000.0),
    "client_ms": ("cost.client_s", 1000.0),
    "upload_ms": ("cost.upload_s", 1000.0),
    "server_ms": ("cost.server_s", 1000.0),
    "other_ms": ("cost.other_s", 1000.0),
    "cot_ms": ("cost.cot_s", 1000.0),
    "cot_s": ("cost.cot_s", 1.0),
}


PAPER_NA = ("N/A", "n/a", "NA")


@dataclass
class _Spec:
    rows: list[str]
    columns: list[str]
    metrics: list[str]
    row_order: dict[Hashable, int]
    column_order: dict[Hashable, int]
    row_labels: dict[Hashable, str]
    column_labels: dict[Hashable, str]
    metric_labels: dict[str, str]
    key_labels: dict[str, str]
    lower_is_better: set[str]
    raw_metrics: set[str]
    decimals: int
    caption: str
    paper: dict[tuple[RowKey, RowKey, str], float]
    paper_raw: dict[Hashable, Any]
    na: dict[Hashable, set[str]]
    filters: dict[str, Any]
    column_metrics: dict[Hashable, list[str]] = field(default_factory=dict)
    metric_decimals: dict[str, int] = field(default_factory=dict)
    paper_na: set[tuple[RowKey, RowKey, str]] = field(default_factory=set)
    emphasis: bool = True  # bold best / underline second; off for tables of statistics
    control: "_Control | None" = None
    split_wide: bool = False  # markdown: one table per first-column-key value when too wide
    fixed_budget: bool = False  # the suite fixes every cell's rounds by design: convergence is not judged

    def group_metrics(self, group: RowKey) -> list[str]:
        """The metrics a column group shows: those of the first group value that column_metrics
        names, else all."""
        for nk in group:
            if nk in self.column_metrics:
                return self.column_metrics[nk]
        return self.metrics

    def places(self, metric: str) -> int:
        return self.metric_decimals.get(metric, self.decimals)


@dataclass(frozen=True)
class _Control:
    """Records matching ``where`` are a control condition: they leave the table's cells and
    their mean is printed in brackets beside the cell with the same row and column keys."""

    where: dict[str, Any]
    label: str


def _parse_control(spec: Mapping[str, Any], keys: list[str]) -> _Control | None:
    value = spec.get("control")
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) - {"where", "label"} or "where" not in value:
        raise ConfigError("table.control must be a mapping with 'where' (param -> value) and optional 'label', "
                          f"got {value!r}")
    where = value["where"]
    if not isinstance(where, Mapping) or not where:
        raise ConfigError(f"table.control.where must be a non-empty mapping of param -> value, got {where!r}")
    clash = sorted(set(where) & set(keys))
    if clash:
        raise ConfigError(f"table.control.where uses {', '.join(clash)}, which is a row or column key; "
                          "a control must be a condition the table's cells do not show")
    label = value.get("label") or ", ".join(f"{k} = {v}" for k, v in where.items())
    if not isinstance(label, str):
        raise ConfigError("table.control.label must be text")
    return _Control(dict(where), label.strip())


def _key_list(spec: Mapping[str, Any], name: str, required: bool) -> list[str]:
    value = spec.get(name)
    if value is None:
        if required:
            raise ConfigError(f"table spec needs '{name}'")
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(k, str) and k for k in items):
        raise ConfigError(f"table.{name} must be a name or a non-empty list of names, got {value!r}")
    if len(set(items)) != len(items):
        raise ConfigError(f"table.{name} lists a key twice: {items}")
    return list(items)


def _mapping(spec: Mapping[str, Any], name: str) -> Mapping[Any, Any]:
    value = spec.get(name) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"table.{name} must be a mapping, got {type(value).__name__}")
    return value


def _metric_subset(spec: Mapping[str, Any], name: str, metrics: list[str]) -> set[str]:
    value = spec.get(name) or []
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list):
        raise ConfigError(f"table.{name} must be a list of metric names")
    for m in value:
        if m not in metrics:
            raise ConfigError(f"table.{name} names metric '{m}' that is not in table.metrics{closest(m, metrics)}; "
                              f"metrics: {', '.join(metrics)}")
    return set(value)


def _order(spec: Mapping[str, Any], name: str) -> dict[Hashable, int]:
    value = spec.get(name) or []
    if not isinstance(value, list):
        raise ConfigError(f"table.{name} must be a list of values")
    order: dict[Hashable, int] = {}
    for i, v in enumerate(value):
        order.setdefault(value_key(v), i)
    return order


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a number, got {value!r}") from None


def _flatten_paper(paper: Mapping[Any, Any], n_rows: int, n_cols: int, metrics: list[str],
                   raw: dict[Hashable, Any],
                   na: set[tuple[RowKey, RowKey, str]] | None = None) -> dict[tuple[RowKey, RowKey, str], float]:
    """Nested ``row -> [column ->] metric -> number`` (one level per row/column key) to a flat dict.

    A value "N/A" records that the paper reports the method as not applicable there (into
    ``na``), which the table prints as such instead of a dash.
    """
    out: dict[tuple[RowKey, RowKey, str], float] = {}
    depth = n_rows + n_cols
    levels = "row" if not n_cols else "row -> column"

    def walk(node: Any, path: list[Hashable], shown: list[str]) -> None:
        where = "table.paper" + "".join(f"[{s}]" for s in shown)
        if not isinstance(node, Mapping):
            raise ConfigError(f"{where}: expected a mapping ({levels} -> metric -> number), got {node!r}")
        if len(path) == depth:
            for metric, value in node.items():
                if metric not in metrics:
                    raise ConfigError(f"{where}: unknown metric '{metric}'{closest(str(metric), metrics)}; "
                                      f"metrics: {', '.join(metrics)}")
                if value is None:
                    continue
                key = (tuple(path[:n_rows]), tuple(path[n_rows:]), metric)
                if isinstance(value, str) and value.strip() in PAPER_NA:
                    if na is not None:
                        na.add(key)
                    continue
                out[key] = _number(value, f"{where}[{metric}]")
            return
        for key, child in node.items():
            nk = value_key(key)
            raw.setdefault(nk, key)
            walk(child, [*path, nk], [*shown, str(key)])

    walk(paper, [], [])
    return out


def _parse_spec(spec: Any) -> _Spec:
    if not isinstance(spec, Mapping):
        raise ConfigError(f"table spec must be a mapping, got {type(spec).__name__}")
    for key in spec:
        if key not in VALID_KEYS:
            raise ConfigError(f"unknown table spec key '{key}'{closest(str(key), VALID_KEYS)}; "
                              f"valid: {', '.join(sorted(VALID_KEYS))}")
    rows = _key_list(spec, "rows", required=True)
    columns = _key_list(spec, "columns", required=False)
    both = set(rows) & set(columns)
    if both:
        raise ConfigError(f"table spec uses {', '.join(sorted(both))} as both rows and columns")
    metrics = _key_list(spec, "metrics", required=True)
    decimals = spec.get("decimals", 2)
    if not isinstance(decimals, int) or isinstance(decimals, bool) or not 0 <= decimals <= 6:
        raise ConfigError(f"table.decimals must be an integer from 0 to 6, got {decimals!r}")
    caption = spec.get("caption") or ""
    if not isinstance(caption, str):
        raise ConfigError("table.caption must be text")
    metric_labels = {str(k): str(v) for k, v in _mapping(spec, "metric_labels").items()}
    for m in metric_labels:
        if m not in metrics:
            raise ConfigError(f"table.metric_labels names metric '{m}' that is not in table.metrics"
                              f"{closest(m, metrics)}; metrics: {', '.join(metrics)}")
    na: dict[Hashable, set[str]] = {}
    for row, na_metrics in _mapping(spec, "na").items():
        listed = [na_metrics] if isinstance(na_metrics, str) else na_metrics
        if not isinstance(listed, list):
            raise ConfigError(f"table.na[{row}] must be a list of metrics or 'all'")
        if listed in (["all"], ["*"]):
            na[value_key(row)] = set(metrics)
            continue
        for m in listed:
            if m not in metrics:
                raise ConfigError(f"table.na[{row}] names metric '{m}' that is not in table.metrics"
                                  f"{closest(str(m), metrics)}; metrics: {', '.join(metrics)}")
        na[value_key(row)] = set(listed)
    paper_raw: dict[Hashable, Any] = {}
    paper_na: set[tuple[RowKey, RowKey, str]] = set()
    paper = _flatten_paper(_mapping(spec, "paper"), len(rows), len(columns), metrics, paper_raw, paper_na)
    column_metrics: dict[Hashable, list[str]] = {}
    for value, listed in _mapping(spec, "column_metrics").items():
        if not columns:
            raise ConfigError("table.column_metrics needs table.columns")
        listed = [listed] if isinstance(listed, str) else listed
        if not isinstance(listed, list) or not listed:
            raise ConfigError(f"table.column_metrics[{value}] must be a non-empty list of metrics")
        for m in listed:
            if m not in metrics:
                raise ConfigError(f"table.column_metrics[{value}] names metric '{m}' that is not in table.metrics"
                                  f"{closest(str(m), metrics)}; metrics: {', '.join(metrics)}")
        column_metrics[value_key(value)] = [m for m in metrics if m in listed]  # table order
    metric_decimals: dict[str, int] = {}
    for m, d in _mapping(spec, "metric_decimals").items():
        if m not in metrics:
            raise ConfigError(f"table.metric_decimals names metric '{m}' that is not in table.metrics"
                              f"{closest(str(m), metrics)}; metrics: {', '.join(metrics)}")
        if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= 6:
            raise ConfigError(f"table.metric_decimals[{m}] must be an integer from 0 to 6, got {d!r}")
        metric_decimals[str(m)] = d
    costs = {m for m in metrics if m in RECORD_METRICS}
    return _Spec(
        rows=rows,
        columns=columns,
        metrics=metrics,
        row_order=_order(spec, "row_order"),
        column_order=_order(spec, "column_order"),
        row_labels={value_key(k): str(v) for k, v in _mapping(spec, "row_labels").items()},
        column_labels={value_key(k): str(v) for k, v in _mapping(spec, "column_labels").items()},
        metric_labels=metric_labels,
        key_labels={str(k): str(v) for k, v in _mapping(spec, "key_labels").items()},
        lower_is_better=_metric_subset(spec, "lower_is_better", metrics) | costs,
        raw_metrics=_metric_subset(spec, "raw_metrics", metrics) | costs,
        decimals=decimals,
        caption=caption.strip(),
        paper=paper,
        paper_raw=paper_raw,
        na=na,
        filters=dict(_mapping(spec, "filters")),
        column_metrics=column_metrics,
        metric_decimals=metric_decimals,
        paper_na=paper_na,
        emphasis=_emphasis(spec),
        control=_parse_control(spec, rows + columns),
        split_wide=_split_wide(spec, columns),
        fixed_budget=_flag(spec, "fixed_budget"),
    )


def _flag(spec: Mapping[str, Any], key: str) -> bool:
    value = spec.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"table.{key} must be true or false, got {value!r}")
    return value


def _emphasis(spec: Mapping[str, Any]) -> bool:
    value = spec.get("emphasis", True)
    if not isinstance(value, bool):
        raise ConfigError(f"table.emphasis must be true or false, got {value!r}")
    return value


def _split_wide(spec: Mapping[str, Any], columns: list[str]) -> bool:
    value = spec.get("split_wide", False)
    if not isinstance(value, bool):
        raise ConfigError(f"table.split_wide must be true or false, got {value!r}")
    if value and not columns:
        raise ConfigError("table.split_wide splits by the first column key, and the table has no table.columns")
    return value
