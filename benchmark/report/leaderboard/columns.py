"""The leaderboard's columns and number formats, shared by the markdown and the HTML page so
both say the same thing about a row."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmark.report.flags import CellFlags, chance_of_setting, mark_learning, seed_flags
from benchmark.report.leaderboard.rows import Row, Stat
from benchmark.report.leaderboard.sections import SETTING_HEADERS, Section, fmt_param

__all__ = ["PARTS", "Column", "columns", "failure_text", "fmt_bytes", "fmt_num", "fmt_param", "fmt_stat",
           "guard_text", "percent_header"]


@dataclass
class Column:
    """A table column: header, how to get a display text and a sort value from a row, and which
    part of a row it shows (``PARTS``; the markdown page prints the parts as separate tables).

    ``sorts_as_shown``: the number a cell's text starts with orders the rows as ``sort`` does
    (a score in display units, rounded: rows only tie where their texts do), so the HTML page
    leaves the sort value out and its script sorts by the shown number."""

    key: str
    label: str
    numeric: bool
    text: Callable[[Row], str]
    sort: Callable[[Row], Any]
    hint: str = ""
    part: str = "setting"
    sorts_as_shown: bool = False


# What a row's columns say: the setting that identifies it, its scores, and its clients, cost
# and provenance. The HTML page shows them in one scrolling table, markdown in two.
PARTS = ("setting", "score", "cost")


def fmt_num(value: float | None, percent: bool, decimals: int = 2) -> str:
    """A number as text ('-' when missing or not finite), times 100 for percent metrics."""
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * (100.0 if percent else 1.0):.{decimals}f}"


def fmt_stat(stat: Stat | None, percent: bool, decimals: int = 2) -> str:
    """'mean ± std' over seeds; the std only where there are two seeds or more."""
    if stat is None or stat.n == 0:
        return "-"
    text = fmt_num(stat.mean, percent, decimals)
    if stat.n > 1 and math.isfinite(stat.std):
        text += f" ± {fmt_num(stat.std, percent, decimals)}"
    return text


def percent_header(label: str, percent: bool) -> str:
    """A header that says when its numbers are percentages: 'Accuracy' -> 'Accuracy (%)'."""
    return f"{label} (%)" if percent and "%" not in label else label


def fmt_bytes(value: float | None) -> str:
    """Bytes in the largest unit that keeps the number at least 1."""
    if value is None or not math.isfinite(value):
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def _mean(row: Row, key: str) -> float | None:
    stat = row.stats.get(key)
    return stat.mean if stat is not None and stat.n else None


def columns(section: Section) -> list[Column]:
    """The section's columns; markdown and HTML share them so both pages say the same.

    Results come first and the filterable context (track, task) last, so the numbers stay in
    view on a narrow screen; the Code column opens the row's provenance.
    """
    p = section.primary
    chance = chance_of_setting([rec for row in section.rows for rec in row.records])
    judged = not section.fixed_budget  # a fixed-budget suite is not judged for convergence
    pct = section.percent.get(p, True)
    places = section.places(p)
    unit = " (%)" if pct else ""
    cols = [
        Column("method", SETTING_HEADERS["algorithm.name"], False, section.method_label, lambda r: r.method,
               "algorithm.name, as the suite's table names it (sorts by registry name)"),
        Column("dataset", SETTING_HEADERS["dataset.name"], False, lambda r: r.dataset, lambda r: r.dataset,
               "dataset.name"),
        Column("missing", SETTING_HEADERS["missing.name"], False, lambda r: r.missing, lambda r: r.missing,
               "missing.name: the missing-modality setting"),
        Column("rate", SETTING_HEADERS["missing.rate"], True, lambda r: fmt_param(r.rate), lambda r: r.rate,
               "missing.rate: the missing rate"),
    ]
    for key in section.extra_params:
        numeric = all(isinstance(r.params.get(key), (int, float)) and not isinstance(r.params.get(key), bool)
                      for r in section.rows if key in r.params)
        cols.append(Column(f"param:{key}", section.param_label(key), numeric,
                           lambda r, k=key: section.param_text(r, k),
                           lambda r, k=key, num=numeric: r.params.get(k) if num else fmt_param(r.params.get(k)),
                           f"grid parameter {key}"))
    from benchmark.report.tables import metric_label

    for m in section.metrics:
        m_pct = section.percent.get(m, True)
        cols.append(Column(f"test/{m}", percent_header(metric_label(m, section.metric_labels), m_pct), True,
                           lambda r, m=m, q=m_pct, d=section.places(m): fmt_stat(r.stats.get(f"test/{m}"), q, d),
                           lambda r, m=m: _mean(r, f"test/{m}"),
                           f"test {m} at the best validation round, mean ± std over seeds"
                           + (", in percent" if m_pct else ", raw value (not a percentage)"), part="score",
                           sorts_as_shown=True))
    cols += [
        Column("auc", percent_header("Robust. AUC", pct), True, lambda r: fmt_num(r.auc, pct, places),
               lambda r: r.auc, f"area under test {p} vs missing rate, divided by the rate range{unit}",
               part="score", sorts_as_shown=True),
        Column("worst", percent_header("Worst client", pct), True,
               lambda r: fmt_stat(r.stats.get(f"worst_client/{p}"), pct, places),
               lambda r: _mean(r, f"worst_client/{p}"), f"lowest per-client test {p}{unit}", part="cost",
               sorts_as_shown=True),
        Column("spread", percent_header("Client spread", pct), True,
               lambda r: fmt_stat(r.stats.get(f"spread/{p}"), pct, places),
               lambda r: _mean(r, f"spread/{p}"), f"population std across clients of test {p}{unit}", part="cost",
               sorts_as_shown=True),
        Column("bytes", "Bytes/round", True, lambda r: fmt_bytes(_mean(r, "bytes_per_round")),
               lambda r: _mean(r, "bytes_per_round"), "bytes up + down per training round (ledger)", part="cost"),
        Column("seconds", "s/round", True,
               lambda r, d=section.places("seconds_per_round", False):
                   fmt_num(_mean(r, "seconds_per_round"), False, d),
               lambda r: _mean(r, "seconds_per_round"), "median seconds per round", part="cost", sorts_as_shown=True),
        Column("seeds", "Seeds ok", True, lambda r: f"{len(r.ok)}/{len(r.records)}", lambda r: len(r.ok),
               "successful seeds / seeds run", part="cost", sorts_as_shown=True),
        Column("guard", "Guard", False, lambda r: guard_text(r, chance(r.records[0]) if r.records else None, judged),
               lambda r: _flagged(r, chance(r.records[0]) if r.records else None, judged),
               "the pathology guard over the row's seeds: collapsed (every score equal), unconverged and "
               "not learned (no better than its setting's chance reference, or never rose) seeds "
               "(benchmark/guard.py, benchmark/learned.py); 'ok' when none is flagged", part="cost"),
        Column("code", "Code", False, lambda r: ", ".join(r.code_versions), lambda r: r.latest,
               "git commit(s) of the row; click for provenance (sorts by run time)", part="cost"),
        Column("track", "Track", False, section.track_of, section.track_of, "benchmark track", part="cost"),
        Column("task", "Task", False, lambda r: r.task, lambda r: r.task, "task.name", part="cost"),
    ]
    return cols


def _row_flags(row: Row, chance: float | None, judge_convergence: bool = True) -> CellFlags:
    flags = seed_flags(row.records, judge_convergence)
    mark_learning(flags, [r for r in row.records if r.ok], chance)
    return flags


def _flagged(row: Row, chance: float | None = None, judge_convergence: bool = True) -> int:
    flags = _row_flags(row, chance, judge_convergence)
    return flags.collapsed + flags.unconverged + flags.unlearned


def guard_text(row: Row, chance: float | None = None, judge_convergence: bool = True) -> str:
    """'ok', or how many of the row's seeds collapsed, stopped before converging or did not learn
    (against ``chance``, its setting's chance score; without one only the rise is judged)."""
    flags = _row_flags(row, chance, judge_convergence)
    parts = [f"{n} {what}" for n, what in ((flags.collapsed, "collapsed"), (flags.unconverged, "unconverged"),
                                           (flags.unlearned, "not learned")) if n]
    return ", ".join(parts) or "ok"


def failure_text(row: Row) -> str:
    """Each failed seed of a row with its reason, one phrase per seed."""
    reasons = sorted({f"seed {r.seed}: {r.reason or 'unknown error'}"
                      for r in row.failed})
    return "; ".join(reasons)
