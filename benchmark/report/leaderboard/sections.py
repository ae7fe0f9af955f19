"""Leaderboard sections: every record store under ``results/`` becomes one suite-and-scale
section, its rows ordered and labelled from the suite's YAML (labels, metrics, track) when
that still exists, else from the records alone, so an old store still has a page."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.errors import BenchmarkError
from benchmark.report.fidelity_summary import FidelityRow
from benchmark.report.leaderboard.rows import ROBUSTNESS_X, Row, attach_auc, group_rows, primary_metric_for
from benchmark.results import ResultStore

log = logging.getLogger(__name__)

# Params that have their own column (and filter); every other grid key gets a column of its own.
DEDICATED_PARAMS = ("algorithm.name", "task.name", "dataset.name", "missing.name", ROBUSTNESS_X)
REFERENCE_DIR = "reference"  # results/reference/ holds regression references, not records


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
    labels: dict[str, str]
    metric_labels: dict[str, str]
    extra_params: list[str]
    figures: list[tuple[str, Path]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fidelity: list[FidelityRow] = field(default_factory=list)  # the suite's tables against the paper's ranking

    def track_of(self, row: Row) -> str:
        return self.track or row.task


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


def make_section(suite: str, scale: str, records: list[dict[str, Any]]) -> Section | None:
    """The section of one store: rows, metrics (primary first when the spec names none), AUCs,
    and the display order (current rows first, then by setting, rate and primary score)."""
    rows = group_rows(suite, scale, records)
    if not rows:
        return None
    spec = suite_spec(suite)
    table = spec.get("table") or ((spec.get("tables") or [{}])[0])
    labels: dict[str, str] = {}
    if table.get("rows") in ("algorithm.name", ["algorithm.name"]):
        labels = {str(k): str(v) for k, v in (table.get("row_labels") or {}).items()}
    seen = sorted({k[len("test/"):] for r in rows for k in r.stats if k.startswith("test/")})
    tasks = {r.task for r in rows}
    primary = next((p for p in (primary_metric_for(t) for t in sorted(tasks)) if p), None)
    metrics = [str(m) for m in table.get("metrics") or []] or seen
    primary = primary if primary in metrics or primary in seen else (metrics[0] if metrics else "accuracy")
    if primary not in metrics:
        metrics.insert(0, primary)
    raw = {str(m) for m in table.get("raw_metrics") or []}
    percent = {m: m not in raw for m in metrics}
    grid_keys = list(dict.fromkeys(k for r in rows for k in r.params))
    extra = [k for k in grid_keys if k not in DEDICATED_PARAMS]
    attach_auc(rows, primary)
    order = [str(v) for v in table.get("row_order") or []]

    def sort_key(r: Row) -> tuple[Any, ...]:
        rest = json.dumps({k: r.params.get(k) for k in extra}, sort_keys=True, default=str)
        stat = r.stats.get(f"test/{primary}")
        rank = order.index(r.method) if r.method in order else len(order)
        return (not r.current, rest, r.rate if r.rate is not None else -1.0,
                -(stat.mean if stat and stat.n else -math.inf), rank, r.method)

    rows.sort(key=sort_key)
    desc = str(spec.get("description") or "").strip()
    metric_labels = {str(k): str(v) for k, v in (table.get("metric_labels") or {}).items()}
    return Section(suite=suite, scale=scale, description=desc, track=spec.get("track"), rows=rows,
                   metrics=metrics, primary=primary, percent=percent, labels=labels, metric_labels=metric_labels,
                   extra_params=extra)


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
