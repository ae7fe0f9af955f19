"""Leaderboard sections: every record store under ``results/`` becomes one suite-and-scale
section, its rows ordered and labelled from the suite's YAML (labels, metrics, track) when
that still exists, else from the records alone, so an old store still has a page."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.record import Record
from benchmark.errors import BenchmarkError
from benchmark.registry import display_name
from benchmark.report.fidelity_summary import FidelityRow
from benchmark.report.flags import REFERENCE_ALGORITHMS
from benchmark.report.leaderboard.rows import ROBUSTNESS_X, Row, attach_auc, group_rows, primary_metric_for
from benchmark.results import ResultStore

log = logging.getLogger(__name__)

# Params that have their own column (and filter); every other grid key gets a column of its own.
DEDICATED_PARAMS = ("algorithm.name", "task.name", "dataset.name", "missing.name", ROBUSTNESS_X)
REFERENCE_DIR = "reference"  # results/reference/ holds regression references, not records
# The headers of the dedicated setting columns (a grid column never takes one of these names).
SETTING_HEADERS = {"algorithm.name": "Method", "dataset.name": "Dataset", "missing.name": "Missing",
                   ROBUSTNESS_X: "Rate"}
# Readable headers of common grid keys; any other key gets its last dotted segment, capitalised.
PARAM_HEADERS = {
    "partition.num_clients": "Clients", "partition.alpha": "Dirichlet alpha", "train.rounds": "Rounds",
    "train.lr": "Learning rate", "train.local_epochs": "Local epochs", "algorithm.imputer": "Imputer",
    "algorithm.pretrained": "Pretrained", "missing.rate": "Missing rate",
}
# Display decimals: percent metrics as percent with 2, raw metrics (MRR, Hits@k, costs) with 3,
# unless the suite's table sets metric_decimals for the metric.
PERCENT_DECIMALS = 2
RAW_DECIMALS = 3


def fmt_param(value: Any) -> str:
    """A grid value as text: floats without trailing zeros, '-' for none."""
    if isinstance(value, float):
        return f"{value:g}"
    return "-" if value is None else str(value)


def readable_key(key: str) -> str:
    """A header for a grid key: 'partition.num_clients' -> 'Clients', 'algorithm.sync_client' -> 'Sync client'."""
    if key in PARAM_HEADERS:
        return PARAM_HEADERS[key]
    text = key.rsplit(".", 1)[-1].replace("_", " ").strip() or key
    return text[:1].upper() + text[1:]


@dataclass
class Section:
    """All rows of one suite at one scale, with the suite's labels and figures."""

    suite: str
    scale: str
    description: str
    track: str | None
    rows: list[Row]
    metrics: list[str]
    primary: str
    percent: dict[str, bool]
    labels: dict[str, str]  # algorithm name -> the suite table's label of it
    metric_labels: dict[str, str]
    extra_params: list[str]
    decimals: dict[str, int] = field(default_factory=dict)  # metric -> decimals shown (in display units)
    param_labels: dict[str, str] = field(default_factory=dict)  # grid key -> column header
    value_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # grid key -> value text -> label
    figures: list[tuple[str, Path]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fidelity: list[FidelityRow] = field(default_factory=list)  # the suite's tables against the paper's ranking
    fixed_budget: bool = False  # the suite fixes its rounds by design: the guard judges no convergence

    def track_of(self, row: Row) -> str:
        return self.track or row.task

    def method_label(self, row: Row) -> str:
        """The row's method as the suite's table names it (``TableData.row_label``'s order): the
        suite's ``row_labels``, else a reference row's table label ('Chance (reference)', ...),
        else, for a method the suite does not name (run beside it, or submitted), the display
        name its records carry, else its class's."""
        if row.method in self.labels:
            return self.labels[row.method]
        if row.method in REFERENCE_ALGORITHMS:
            return REFERENCE_ALGORITHMS[row.method]
        stored = next((str(n) for r in row.records if (n := (r.algorithm or {}).get("display_name"))), "")
        return stored or display_name(row.method)

    def method_labels(self) -> dict[str, str]:
        """Every method of the section by the name its rows show (figure legends use it)."""
        return {row.method: self.method_label(row) for row in self.rows}

    def param_label(self, key: str) -> str:
        return self.param_labels.get(key) or readable_key(key)

    def param_text(self, row: Row, key: str) -> str:
        """A grid value of the row as shown: the table's label of the value where it has one."""
        text = fmt_param(row.params.get(key))
        return self.value_labels.get(key, {}).get(text, text)

    def places(self, metric: str, percent: bool | None = None) -> int:
        """Decimals of a metric in display units (``percent`` as the section says unless given)."""
        pct = self.percent.get(metric, True) if percent is None else percent
        default = PERCENT_DECIMALS if pct else RAW_DECIMALS
        return self.decimals.get(metric, default)


def suite_spec(name: str) -> dict[str, Any]:
    """The suite YAML when it still exists (labels, metrics, track), else an empty spec."""
    from benchmark.sweep import SUITES_DIR, load_suite

    if not (SUITES_DIR / f"{name}.yaml").is_file():
        return {}
    try:
        return load_suite(name).spec
    except BenchmarkError as e:
        log.warning("suite %s: spec not readable (%s); using record values only", name, e)
        return {}


def suite_tables(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The suite's table specs: its ``table``, then each of its ``tables``."""
    found = [spec.get("table")] + list(spec.get("tables") or [])
    return [t for t in found if isinstance(t, Mapping)]


def _keys(value: Any) -> list[str]:
    """A table's ``rows`` / ``columns`` entry as a list of keys."""
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]


def _mapping(table: Mapping[str, Any], name: str) -> Mapping[Any, Any]:
    value = table.get(name)
    return value if isinstance(value, Mapping) else {}


def _labels(tables: list[Mapping[str, Any]], rows: list[Row],
            extra: list[str]) -> tuple[dict[str, str], dict[str, dict[str, str]], dict[str, str]]:
    """(method labels, value labels per grid key, header per grid key) from the suite's tables.

    A table's ``row_labels`` hold labels for the values of all its row keys in one mapping, so a
    label is taken for a key only where the table has that key among its rows and the value
    occurs in this section: method labels for the algorithm names, value labels for the other
    grid columns. Headers come from the tables' ``key_labels``, else :func:`readable_key`; a
    header that another column already has gets the readable name (or the key) added.
    """
    methods = {r.method for r in rows}
    present = {k: {fmt_param(r.params.get(k)) for r in rows} for k in extra}
    labels: dict[str, str] = {}
    values: dict[str, dict[str, str]] = {}
    key_labels: dict[str, str] = {}
    for table in tables:
        row_keys = _keys(table.get("rows"))
        row_labels = {fmt_param(k): str(v) for k, v in _mapping(table, "row_labels").items()}
        if "algorithm.name" in row_keys:
            for value, label in row_labels.items():
                if value in methods:
                    labels.setdefault(value, label)
        for key in row_keys:
            for value, label in row_labels.items():
                if key in present and value in present[key]:
                    values.setdefault(key, {}).setdefault(value, label)
        for key, label in _mapping(table, "key_labels").items():
            key_labels.setdefault(str(key), str(label))
    taken = {h.lower() for h in SETTING_HEADERS.values()}
    headers: dict[str, str] = {}
    for key in extra:
        header = key_labels.get(key) or readable_key(key)
        if header.lower() in taken and key in key_labels and readable_key(key).lower() not in taken:
            header = f"{header} ({readable_key(key)})"
        if header.lower() in taken:
            header = f"{header} ({key})"
        taken.add(header.lower())
        headers[key] = header
    return labels, values, headers


def _setting(params: Mapping[str, Any]) -> str:
    """A row's grid values but its method: what a cell of the suite must share with it."""
    return json.dumps({k: v for k, v in params.items() if k != "algorithm.name"}, sort_keys=True, default=str)


def suite_settings(name: str, scale: str) -> set[str] | None:
    """The settings (grid values but the method) the suite runs now at ``scale``; None when the
    suite no longer exists or cannot be expanded (every row is then judged by its records)."""
    from benchmark.sweep import SUITES_DIR, load_suite

    if not (SUITES_DIR / f"{name}.yaml").is_file():
        return None
    try:
        return {_setting(c.params) for c in load_suite(name).cells(scale)}
    except BenchmarkError as e:
        log.warning("suite %s: cells not readable (%s); every row counts as current", name, e)
        return None


def retire_old_settings(rows: list[Row], live: set[str] | None) -> None:
    """A row whose setting the suite no longer runs (a grid value renamed or dropped, as
    ``algorithm.pretrain_share`` gave way to ``algorithm.pretrained``) is superseded, never
    listed with the current runs. A submitted method's rows share the suite's settings, so
    they stay current. A store none of whose rows has a setting of the suite was not made from
    its grid (a hand-made store under a suite's name), so its rows are judged by their records."""
    if live is None or not any(_setting(row.params) in live for row in rows):
        return
    for row in rows:
        if row.current and _setting(row.params) not in live:
            row.current = False


def make_section(suite: str, scale: str, records: list[Record]) -> Section | None:
    """The section of one store: rows, metrics (primary first when the spec names none), AUCs,
    and the display order (current rows first, then by setting, rate and primary score).

    Labels, metrics, raw (non-percent) metrics and decimals come from every table of the suite
    (``table`` or each of ``tables``); a cost metric a table lists (seconds_per_round, ...) is
    read from the records as the tables read it, and is never a percentage.
    """
    from benchmark.report.tables import RECORD_METRICS, with_record_metrics

    spec = suite_spec(suite)
    tables = suite_tables(spec)
    listed = list(dict.fromkeys(str(m) for t in tables for m in t.get("metrics") or []))
    rows = group_rows(suite, scale, with_record_metrics(records, listed))
    if not rows:
        return None
    retire_old_settings(rows, suite_settings(suite, scale))
    seen = sorted({k[len("test/"):] for r in rows for k in r.stats if k.startswith("test/")})
    tasks = {r.task for r in rows}
    primary = next((p for p in (primary_metric_for(t) for t in sorted(tasks)) if p), None)
    metrics = listed or seen
    primary = primary if primary in metrics or primary in seen else (metrics[0] if metrics else "accuracy")
    if primary not in metrics:
        metrics.insert(0, primary)
    raw = {str(m) for t in tables for m in t.get("raw_metrics") or []} | set(RECORD_METRICS)
    percent = {m: m not in raw for m in metrics}
    decimals: dict[str, int] = {}
    for table in tables:
        for m, d in _mapping(table, "metric_decimals").items():
            if isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= 6:
                decimals.setdefault(str(m), d)
    grid_keys = list(dict.fromkeys(k for r in rows for k in r.params))
    extra = [k for k in grid_keys if k not in DEDICATED_PARAMS]
    labels, value_labels, param_labels = _labels(tables, rows, extra)
    attach_auc(rows, primary)
    order = list(dict.fromkeys(str(v) for t in tables for v in t.get("row_order") or []))

    def sort_key(r: Row) -> tuple[Any, ...]:
        rest = json.dumps({k: r.params.get(k) for k in extra}, sort_keys=True, default=str)
        stat = r.stats.get(f"test/{primary}")
        rank = order.index(r.method) if r.method in order else len(order)
        return (not r.current, rest, r.rate if r.rate is not None else -1.0,
                -(stat.mean if stat and stat.n else -math.inf), rank, r.method)

    rows.sort(key=sort_key)
    desc = str(spec.get("description") or "").strip()
    metric_labels: dict[str, str] = {}
    for table in tables:
        for k, v in _mapping(table, "metric_labels").items():
            metric_labels.setdefault(str(k), str(v))
    return Section(suite=suite, scale=scale, description=desc, track=spec.get("track"), rows=rows,
                   metrics=metrics, primary=primary, percent=percent, labels=labels, metric_labels=metric_labels,
                   extra_params=extra, decimals=decimals, param_labels=param_labels, value_labels=value_labels,
                   fixed_budget=bool(spec.get("fixed_budget")))


def discover(results_dir: str | Path) -> list[tuple[str, str, Path]]:
    """(suite, scale, path) of every record store under ``results_dir``."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.glob("*/*.jsonl")):
        if path.parent.name == REFERENCE_DIR:
            continue
        found.append((path.parent.name, path.stem, path))
    return found


def collect_sections(results_dir: str | Path) -> list[Section]:
    """One section per (suite, scale) store that holds at least one record."""
    sections = []
    for suite, scale, path in discover(results_dir):
        section = make_section(suite, scale, ResultStore(path).read())
        if section is not None:
            sections.append(section)
    return sections
