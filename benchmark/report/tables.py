"""Paper-style result tables (markdown + LaTeX) from result records and a suite's ``table:`` spec.

Layout: one row per value of ``rows`` (several keys give multi-level rows), one column group per
value of ``columns`` with one sub-column per metric. Cells print mean +- sample std (ddof=1) over
seeds in percent; best per sub-column bold, second underlined. Where the spec gives the paper's
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

import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from benchmark.errors import ConfigError, DataError, closest
from benchmark.report.fidelity import (MIN_METHODS, Fidelity, FidelityCell, kendall_fidelity, number_text, plural,
                                       tau_text)
from benchmark.guard import SPREAD_EPSILON, TAIL_SHARE
from benchmark.report.flags import REFERENCE_ALGORITHMS, REFERENCE_MARGIN, CellFlags, below_reference, reference_of, seed_flags
from benchmark.report.markdown import MAX_MARKDOWN_COLUMNS
from benchmark.report.markdown import md_escape_prose as _md_escape
from benchmark.report.records import (
    AVAILABILITY_PREFIX,
    COVERED_PREFIX,
    STD_DDOF,
    availability_columns,
    aggregate,
    apply_filters,
    check_keys,
    check_uniform,
    metric_column,
    records_frame,
    select_records,
    under_condition,
    value_key,
)

VALID_KEYS = (
    "rows", "row_order", "row_labels", "columns", "column_order", "column_labels",
    "metrics", "metric_labels", "key_labels", "lower_is_better", "raw_metrics", "decimals",
    "caption", "paper", "na", "filters", "column_metrics", "metric_decimals", "emphasis", "control",
    "split_wide",
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
_UPPER_TOKENS = {"auc", "ap", "f1", "mae", "mse", "rmse", "mrr", "ndcg", "roc", "pr", "acc"}

RowKey = tuple[Hashable, ...]


@dataclass
class TableOutput:
    """A rendered table; ``frame`` is long format, one row per (row, column group, metric),
    with mean/std in display units (percent unless the metric is listed in raw_metrics)."""

    markdown: str
    latex: str
    frame: pd.DataFrame
    footnotes: list[str] = field(default_factory=list)
    fidelity: Fidelity | None = None  # only for a ranking table (emphasis on) with paper numbers


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


# ---------------------------------------------------------------------------------------------
# spec parsing


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
    )


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


# ---------------------------------------------------------------------------------------------
# labels and formats


def _fmt_value(raw: Any) -> str:
    if isinstance(raw, float):
        return f"{raw:g}"
    return str(raw)


def key_label(key: str, labels: Mapping[str, str] | None = None) -> str:
    """Readable header for a param key: 'algorithm.name' -> 'Algorithm', 'missing.rate' -> 'Missing rate'."""
    if labels and key in labels:
        return labels[key]
    parts = key.split(".")
    base = parts[-2] if len(parts) > 1 and parts[-1] == "name" else " ".join(parts)
    base = base.replace("_", " ")
    return base[:1].upper() + base[1:]


def metric_label(metric: str, labels: Mapping[str, str] | None = None) -> str:
    """Readable metric header: 'macro_f1' -> 'Macro F1', 'val/accuracy' -> 'Accuracy (val)'."""
    if labels and metric in labels:
        return labels[metric]
    split, name = metric.rsplit("/", 1) if "/" in metric else ("", metric)
    words = [w.upper() if w.lower() in _UPPER_TOKENS else w.capitalize() for w in name.split("_") if w]
    text = " ".join(words) or metric
    return f"{text} ({split})" if split and split != "test" else text


# Every character LaTeX treats as markup, as text that prints it. In the OT1 font '<' and '>'
# print as inverted marks, so they are spelled out too.
_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
    "^": r"\textasciicircum{}", "_": r"\_", "%": r"\%", "~": r"\textasciitilde{}",
    "<": r"\textless{}", ">": r"\textgreater{}",
}
_LATEX_TEXT = {"±": r"$\pm$", "—": "---", "–": "--"}
_LATEX_CHARS = re.compile("[" + re.escape("".join(_LATEX_SPECIALS) + "".join(_LATEX_TEXT)) + r"]|[\x00-\x1f\x7f]")

# Math that can only typeset symbols: these commands, letters, digits, a few operators, and
# sub/superscripts of those. No other command, no '^^' (TeX's character-code escape), no
# unbalanced brace, so a caption may say $\alpha$ or $^{\dagger}$ and a name cannot run code.
_MATH_COMMANDS = ("alpha beta gamma delta epsilon varepsilon zeta eta theta lambda mu nu xi pi rho sigma "
                  "tau phi varphi chi psi omega Delta Gamma Lambda Omega Phi Pi Sigma Theta "
                  "pm mp times cdot leq geq le ge neq approx sim infty downarrow uparrow rightarrow "
                  "leftarrow dagger ddagger ldots cdots")
_MATH_CMD = r"\\(?:" + "|".join(_MATH_COMMANDS.split()) + r")(?![A-Za-z])"
_MATH_ATOM = rf"(?:{_MATH_CMD}|[A-Za-z0-9])"
_MATH_SCRIPT = rf"[\^_](?:{_MATH_ATOM}|\{{(?:{_MATH_ATOM}|[ ,.+\-])*\}})"
_SAFE_MATH = re.compile(rf"(\$(?:{_MATH_CMD}|{_MATH_SCRIPT}|[A-Za-z0-9 +\-=.,()/|<>])+\$)")


def _latex_text(text: str) -> str:
    """``text`` as LaTeX that prints it: every special escaped, control characters as spaces."""
    return _LATEX_CHARS.sub(lambda m: _LATEX_SPECIALS.get(m.group(), _LATEX_TEXT.get(m.group(), " ")), text)


def latex_escape(text: str) -> str:
    r"""Escape everything that reaches a .tex file (method names and other record values,
    labels, captions, notes) so it prints as written and can run no command
    (``\input``, ``\write18``); only math from the harmless set above (``$\alpha$``) is kept."""
    pieces = _SAFE_MATH.split(str(text))
    return "".join(piece if i % 2 else _latex_text(piece) for i, piece in enumerate(pieces))


@dataclass(frozen=True)
class _Format:
    esc: Callable[[str], str]
    pm: str
    bold: Callable[[str], str]
    underline: Callable[[str], str]
    dagger: str
    ddagger: str
    missing: str
    range_dash: str
    tau: str
    label_sep: str  # between a column group's label and a metric's
    collapsed: str = "×"      # a seed's model collapsed (every score equal)
    unconverged: str = "°"    # a seed stopped before converging
    below: str = "▽"          # below the linear reference (benchmark/report/flags.py)


_MD = _Format(
    esc=_md_escape, pm=" ± ", bold=lambda s: f"**{s}**", underline=lambda s: f"<u>{s}</u>",
    dagger="†", ddagger="‡", missing="—", range_dash="–", tau="τ", label_sep=" · ",
)
_TEX = _Format(
    esc=latex_escape, pm=r" $\pm$ ", bold=lambda s: rf"\textbf{{{s}}}",
    underline=lambda s: rf"\underline{{{s}}}", dagger=r"$^{\dagger}$", ddagger=r"$^{\ddagger}$",
    missing="---", range_dash="--", tau=r"$\tau$", label_sep=" / ",
    collapsed=r"$^{\times}$", unconverged=r"$^{\circ}$", below=r"$^{\triangledown}$",
)


@dataclass
class _Cell:
    kind: str  # "value" | "failed" | "na" | "missing"
    mean: float = math.nan
    std: float = math.nan
    n: int = 0
    attempted: int = 0  # ok + failed seeds, for the caption's seed count
    rank: int = 0  # 1 best, 2 second
    dagger: bool = False
    ddagger: bool = False
    control: float = math.nan  # mean under the table's control condition (display units)
    paper: float | str | None = None  # the paper's number, or "N/A" where it reports none
    flags: CellFlags | None = None  # the pathology guard over the cell's seeds

    def _ours(self, fmt: _Format, decimals: int) -> str:
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
            elif self.rank == 2:
                text = fmt.underline(text)
        text += (fmt.dagger if self.dagger else "") + (fmt.ddagger if self.ddagger else "")
        if self.flags is not None and self.kind == "value":
            text += ((fmt.collapsed if self.flags.collapsed else "") + (fmt.unconverged if self.flags.unconverged else "")
                     + (fmt.below if self.flags.below_reference else ""))
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


# ---------------------------------------------------------------------------------------------
# building


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

    def row_label(self, nk: Hashable) -> str:
        if nk not in self.spec.row_labels and isinstance(nk, str) and nk in REFERENCE_ALGORITHMS:
            return REFERENCE_ALGORITHMS[nk]
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
    availability (``record["availability"]``; with ``COVERED_PREFIX`` the share among the
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


def _availability_text(layout: _Layout, fmt: _Format) -> str:
    """'Measured availability ...: Fed3: text 0.22, numeric 0.18; ...' (empty without data)."""
    if not layout.availability:
        return ""

    def share(lo: float, hi: float) -> str:
        return f"{lo:.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}{fmt.range_dash}{hi:.2f}"

    parts = []
    for group in layout.groups:
        mods = layout.availability.get(group)
        if not mods:
            continue
        covered = layout.covered_availability.get(group, {})

        def item(m: str) -> str:
            own = f"{m} {share(*mods[m])}"
            if m in covered and share(*covered[m]) != share(*mods[m]):
                own += f" ({share(*covered[m])} of the entities the data gives it)"
            return own

        text = ", ".join(item(m) for m in sorted(mods))
        label = layout.group_label(group) if group else ""
        parts.append(f"{label}: {text}" if label else text)
    return ("Measured availability (share of the clients' nodes or entities holding each modality, "
            "over the runs shown): " + fmt.esc("; ".join(parts)) + ".")


def _build(records: Sequence[Mapping[str, Any]], spec: _Spec) -> tuple[_Layout, pd.DataFrame]:
    if not records:
        raise DataError("no result records to tabulate")
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
                                 flags=seed_flags(cell_records.get((row, group), [])))
                    if rec["n_failed"]:
                        failures[(row, group)] = (rec["n_failed"], rec["n_failed"] + rec["n_ok"], rec["failure"])
                cell.control = control_means.get((row, group, metric), math.nan)
                if (row, group, metric) in spec.paper:
                    cell.paper = spec.paper[(row, group, metric)]
                elif (row, group, metric) in spec.paper_na:
                    cell.paper = "N/A"
                cells[(row, group, metric)] = cell

    _mark_below_reference(cells, rows, groups, spec, cell_records)
    for group in groups:
        for metric in spec.metrics:
            values = [c for c in (cells[(r, group, metric)] for r in rows if reference_of(r, spec.rows) is None)
                      if c.kind == "value" and math.isfinite(c.mean)]  # an overflowed mean ranks nowhere
            if len(values) < 2 or not spec.emphasis:
                continue
            sign = 1.0 if metric in spec.lower_is_better else -1.0
            distinct = sorted({round(c.mean, spec.places(metric)) * sign for c in values})
            for c in values:
                shown = round(c.mean, spec.places(metric)) * sign
                c.rank = 1 if shown == distinct[0] else 2 if len(distinct) > 1 and shown == distinct[1] else 0

    subcols = [(group, metric) for group in groups for metric in spec.group_metrics(group)]

    layout = _Layout(spec, rows, groups, cells, subcols, raw, excluded, failures,
                     {g: availability[g] for g in groups if g in availability},
                     {g: covered_availability[g] for g in groups if g in covered_availability})
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


def _cell_records(records: Sequence[Mapping[str, Any]], selected: pd.DataFrame,
                  spec: _Spec) -> dict[tuple[RowKey, RowKey], list[Mapping[str, Any]]]:
    """The records each (row, column group) averages (the frame's index is a record's position)."""
    out: dict[tuple[RowKey, RowKey], list[Mapping[str, Any]]] = {}
    for i, rec in zip(selected.index, selected.to_dict("records")):
        row = tuple(value_key(rec[k]) for k in spec.rows)
        group = tuple(value_key(rec[k]) for k in spec.columns)
        out.setdefault((row, group), []).append(records[i])
    return out


def _mark_below_reference(cells: dict[tuple[RowKey, RowKey, str], _Cell], rows: list[RowKey], groups: list[RowKey],
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
                shared = recs and not any((r.get("algorithm") or {}).get("personalized") for r in recs)
                if reference_of(row, spec.rows) is None and cell.kind == "value" and shared and cell.flags is not None:
                    cell.flags.below_reference = below_reference(cell.mean, lin.mean, ch.mean,
                                                                 metric not in spec.lower_is_better, 2 * lin.std)


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
            if (group, metric) in shown and cell.kind == "value" and isinstance(cell.paper, float)]


# ---------------------------------------------------------------------------------------------
# rendering


def _body(layout: _Layout, fmt: _Format, subcols: list[tuple[RowKey, str]] | None = None) -> list[list[str]]:
    spec = layout.spec
    subcols = layout.subcols if subcols is None else subcols
    body: list[list[str]] = []
    previous: RowKey | None = None
    for row in layout.rows:
        labels = []
        for level, nk in enumerate(row):
            same_prefix = previous is not None and previous[: level + 1] == row[: level + 1]
            blank = level < len(row) - 1 and same_prefix
            labels.append("" if blank else fmt.esc(layout.row_label(nk)))
        cells = [layout.cells[(row, group, metric)].render(fmt, spec.places(metric))
                 for group, metric in subcols]
        body.append(labels + cells)
        previous = row
    return body


def _sub_header(layout: _Layout, metric: str, fmt: _Format) -> str:
    text = fmt.esc(metric_label(metric, layout.spec.metric_labels))
    if metric in layout.spec.lower_is_better:
        text += " ↓" if fmt is _MD else r" $\downarrow$"
    return text


def _caption(layout: _Layout, title: str, fmt: _Format) -> str:
    spec = layout.spec
    shown = layout.shown_cells()
    ns = sorted({c.attempted for c in shown if c.kind == "value"})
    pct = [m for m in spec.metrics if m not in spec.raw_metrics]
    raw_m = [metric_label(m, spec.metric_labels) for m in spec.metrics if m in spec.raw_metrics]
    units = "Metrics in %" if pct else "Metrics"
    if raw_m and pct:
        units += f" ({', '.join(raw_m)} unscaled)"
    if not ns:
        seeds = "no successful runs"
    elif ns[-1] == 1:
        seeds = "single seed, mean only"
    else:
        n_text = str(ns[0]) if ns[0] == ns[-1] else f"{ns[0]}{fmt.range_dash}{ns[-1]}"
        seeds = f"mean{fmt.pm}sample std (ddof={STD_DDOF}) over {n_text} seeds"
        if any(c.kind == "value" and c.n == 1 for c in shown):
            seeds += "; cells with one successful seed show the mean only"
    parts = []
    if title:
        parts.append(fmt.esc(title.rstrip(".")) + ".")
    if spec.caption:
        parts.append(fmt.esc(spec.caption.rstrip(".")) + ".")
    parts.append(f"{fmt.esc(units)}: {seeds}.")
    measured = _availability_text(layout, fmt)
    if measured:
        parts.append(measured)
    if spec.emphasis:
        parts.append("Best per column in bold, second underlined.")
    if spec.control is not None and any(not math.isnan(c.control) for c in shown):
        parts.append(fmt.esc(f"In brackets: the same method and column under the control ({spec.control.label}), "
                             "mean over its seeds from the same sweep."))
    if any(c.paper is not None for c in shown):
        parts.append("In parentheses: the number the original paper reports.")
    fidelity = _fidelity_text(layout, fmt)
    if fidelity:
        parts.append(fidelity)
    return " ".join(parts)


def _column_label(layout: _Layout, group: RowKey, metric: str, fmt: _Format) -> str:
    text = metric_label(metric, layout.spec.metric_labels)
    return f"{layout.group_label(group)}{fmt.label_sep}{text}" if group else text


def _fidelity_text(layout: _Layout, fmt: _Format) -> str:
    """The caption's fidelity sentence (empty for a table without it); see benchmark.report.fidelity."""
    fid = layout.fidelity
    if fid is None:
        return ""
    t = fmt.tau
    if not fid.measured:
        return fmt.esc(f"Fidelity: no column has the paper's number and ours for {MIN_METHODS} or more rows, "
                       f"so no Kendall {t} is given.")
    per = ", ".join(f"{_column_label(layout, c.group, c.metric, fmt)} {number_text(c.tau)}" for c in fid.columns)
    left = f"; {plural(len(fid.skipped), 'column')} with fewer comparable rows left out" if fid.skipped else ""
    return fmt.esc(f"Fidelity: Kendall {t} between our ranking of the rows and the paper's = {tau_text(fid)} "
                   f"(mean of the per-column {t}-b over {plural(len(fid.columns), 'column')} and "
                   f"{plural(fid.n_methods, 'row')}; "
                   f"{round(100 * fid.confidence)}% bootstrap interval over seeds, {fid.draws} draws{left}); "
                   f"per column: {per}.")


def _footnotes(layout: _Layout, fmt: _Format) -> list[str]:
    notes = []
    partial = [(k, v) for k, v in layout.failures.items() if v[0] < v[1]]
    total = [(k, v) for k, v in layout.failures.items() if v[0] == v[1]]
    if partial:
        items = "; ".join(f"{layout.cell_label(*k)} ({nf} of {nt} seeds failed: {reason})"
                          for k, (nf, nt, reason) in partial)
        notes.append(f"{fmt.dagger} Some seeds failed; mean and std over the successful seeds only: "
                     + fmt.esc(items) + ".")
    if layout.excluded:
        items = "; ".join(f"{layout.cell_label(*k)}: {n} record(s) excluded, {reason}"
                          for k, (n, reason) in layout.excluded.items())
        notes.append(f"{fmt.ddagger} Cell mixed runs with different artifact recipes/protocols; only the most "
                     f"recent run group is averaged. " + fmt.esc(items) + ".")
    if total:
        items = "; ".join(f"{layout.cell_label(*k)} ({nf} seeds: {reason})" for k, (nf, _, reason) in total)
        notes.append("failed: all seeds failed, " + fmt.esc(items) + ".")
    shown = layout.shown_cells()
    if any(c.flags is not None and c.flags.collapsed for c in shown if c.kind == "value"):
        notes.append(f"{fmt.collapsed} Collapsed: at least one seed's scores are all equal (spread below "
                     f"{SPREAD_EPSILON:g}); the number measures no model.")
    if any(c.flags is not None and c.flags.unconverged for c in shown if c.kind == "value"):
        notes.append(f"{fmt.unconverged} Not converged: at least one seed's best round is in the last "
                     f"{TAIL_SHARE:.0%} of its rounds or its validation score was still rising "
                     f"(`check` lists them).")
    if any(c.flags is not None and c.flags.below_reference for c in shown if c.kind == "value"):
        notes.append(f"{fmt.below} Below reference: a shared-model method that gains less than "
                     f"{1 - REFERENCE_MARGIN:.0%} of the linear reference's gain over chance in its column.")
    kinds = {c.kind for c in shown}
    if "na" in kinds:
        notes.append("N/A: metric not applicable to this method.")
    if "missing" in kinds:
        notes.append(f"{fmt.missing}: no result.")
    return notes


def _markdown_table(layout: _Layout, subcols: list[tuple[RowKey, str]]) -> str:
    spec = layout.spec
    headers = [_md_escape(key_label(k, spec.key_labels)) for k in spec.rows]
    for group, metric in subcols:
        sub = _sub_header(layout, metric, _MD)
        headers.append(f"{_md_escape(layout.group_label(group))} · {sub}" if group else sub)
    align = ["left"] * len(spec.rows) + ["right"] * len(subcols)
    return tabulate(_body(layout, _MD, subcols), headers=headers, tablefmt="github", colalign=align,
                    disable_numparse=True)


def _split_parts(layout: _Layout) -> list[tuple[str, list[tuple[RowKey, str]]]]:
    """(heading, sub-columns) of each markdown table: one per value of the first column key when
    ``split_wide`` is set and the whole table is wider than MAX_MARKDOWN_COLUMNS, else one."""
    spec = layout.spec
    if not spec.split_wide or len(spec.rows) + len(layout.subcols) <= MAX_MARKDOWN_COLUMNS:
        return [("", layout.subcols)]
    parts: dict[Hashable, list[tuple[RowKey, str]]] = {}
    for group, metric in layout.subcols:
        parts.setdefault(group[0], []).append((group, metric))
    key = spec.columns[0]
    out = []
    for nk, subcols in parts.items():
        label = spec.column_labels.get(nk) or f"{key_label(key, spec.key_labels)} = {_fmt_value(layout.raw.get(nk, nk))}"
        out.append((label, subcols))
    return out


def _markdown(layout: _Layout, title: str) -> tuple[str, list[str]]:
    tables = [(f"*{_md_escape(heading)}*\n\n" if heading else "") + _markdown_table(layout, subcols)
              for heading, subcols in _split_parts(layout)]
    notes = _footnotes(layout, _MD)
    parts = ([f"**{_md_escape(title)}**"] if title else []) + tables + [_caption(layout, title, _MD)] + notes
    return "\n\n".join(parts) + "\n", notes


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _latex(layout: _Layout, title: str) -> str:
    spec = layout.spec
    n_keys = len(spec.rows)
    colspec = "l" * n_keys + "".join(
        "c" * sum(1 for g, _ in layout.subcols if g == group) for group in layout.groups
    )
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{_caption(layout, title, _TEX)}}}"]
    if title:
        lines.append(rf"\label{{tab:{_slug(title)}}}")
    lines += [rf"\begin{{tabular}}{{{colspec}}}", r"\toprule"]
    if spec.columns:
        top = [""] * n_keys
        rules = []
        start = n_keys + 1
        for group in layout.groups:
            width = sum(1 for g, _ in layout.subcols if g == group)
            top.append(rf"\multicolumn{{{width}}}{{c}}{{{latex_escape(layout.group_label(group))}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + width - 1}}}")
            start += width
        lines.append(" & ".join(top) + r" \\")
        lines.append(" ".join(rules))
    second = [latex_escape(key_label(k, spec.key_labels)) for k in spec.rows]
    second += [_sub_header(layout, m, _TEX) for _, m in layout.subcols]
    lines += [" & ".join(second) + r" \\", r"\midrule"]
    for i, (row, cells) in enumerate(zip(layout.rows, _body(layout, _TEX))):
        if n_keys > 1 and i and layout.rows[i - 1][0] != row[0]:
            lines.append(r"\addlinespace")
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    notes = _footnotes(layout, _TEX)
    if notes:
        lines += [r"\par\smallskip", r"{\footnotesize"] + [note + r"\par" for note in notes] + ["}"]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _record_field(rec: Any, path: str) -> Any:
    """The value at a dotted field path of a record (None where any step is missing)."""
    value = rec
    for step in path.split("."):
        value = value.get(step) if isinstance(value, Mapping) else None
    return value


def with_record_metrics(records: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[Mapping[str, Any]]:
    """Copies of the records whose ``metrics`` also hold the cost fields listed (tables and
    figures read them as ``test/<name>``)."""
    wanted = [m for m in metrics if m in RECORD_METRICS]
    if not wanted:
        return list(records)
    out: list[Mapping[str, Any]] = []
    for rec in records:
        extra = {}
        for m in wanted:
            fld, factor = RECORD_METRICS[m]
            value = _record_field(rec, fld)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and rec.get("status") == "ok":
                extra[metric_column(m)] = float(value) * factor
        out.append({**rec, "metrics": {**(rec.get("metrics") or {}), **extra}} if extra else rec)
    return out


def _record_task(rec: Mapping[str, Any]) -> str | None:
    """The task a record ran: its task.name param, else its config (failed records may lack it)."""
    params = rec.get("params") or {}
    if "task.name" in params:
        return str(params["task.name"])
    task = ((rec.get("config") or {}).get("task") or {}).get("name")
    return str(task) if task else None


def _undeclared_cells(records: Sequence[Mapping[str, Any]], frame: pd.DataFrame, spec: _Spec,
                      rows: list[RowKey], groups: list[RowKey]) -> set[tuple[RowKey, RowKey]]:
    """(row, group) cells whose method does not declare the cell's task (printed N/A).

    The method is the ``algorithm.name`` row or column value; the task is the ``task.name``
    value when it is a row/column key, else the one task of the records that share the cell's
    other keys (a column such as "DY" runs link prediction for every method). Unregistered
    methods or an unknown / ambiguous task leave the cell alone.
    """
    keys = spec.rows + spec.columns
    if "algorithm.name" not in keys:
        return set()
    from benchmark import registry as R

    a_pos = keys.index("algorithm.name")
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
            if t_pos is not None:
                task: str | None = str(nks[t_pos])
            else:
                found = tasks_by_rest.get(nks[:a_pos] + nks[a_pos + 1:], set())
                task = next(iter(found)) if len(found) == 1 else None
            if task is not None and not R.applicable(alg, task):
                out.add((row, group))
    return out


def make_table(records: Sequence[Mapping[str, Any]], spec: Mapping[str, Any], title: str = "") -> TableOutput:
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
