"""The leaderboard: every suite's records as sortable, filterable tables.

``python run_benchmark.py leaderboard`` reads ``results/<suite>/<scale>.jsonl`` and writes

* ``tables/leaderboard_<suite>.md``: one markdown page per suite (a table per scale), and
* ``tables/leaderboard.html``: one self-contained static page (inline CSS/JS, plots as base64
  PNG, no server, no network) with click-to-sort columns, filters by track, task, dataset and
  missing setting, the robustness curves, and each row's provenance one click away.

A row is one *cell* of a suite (its grid parameters) under one ``(artifact_recipe, protocol)``
pair. Seeds are averaged only inside a row: records whose artifact recipe (the federated data
without the seed) or protocol hash (dataset, split, task, training, model) differ are never
averaged together, they become separate rows. The newest pair of a cell is its *current* row;
older pairs stay on the page as *superseded* rows (hidden until asked for), so a number never
silently mixes two code or data versions, and every row names the git commits that made it.

Beyond the task metrics each row carries the robustness AUC (area under the primary metric
vs missing rate, over the current rows of the same method and setting, normalised by the rate
range), the worst client's score and the spread (population std) across clients of the primary
metric at the selected round, bytes communicated per round and seconds per round.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import logging
import math
import numbers
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmark.errors import BenchmarkError, ConfigError, DataError
from benchmark.report.markdown import md_escape
from benchmark.results import ResultStore, now_iso

log = logging.getLogger(__name__)

ROBUSTNESS_X = "missing.rate"
# Params that have their own column (and filter); every other grid key gets a column of its own.
DEDICATED_PARAMS = ("algorithm.name", "task.name", "dataset.name", "missing.name", ROBUSTNESS_X)
FILTERS = (("track", "Track"), ("task", "Task"), ("dataset", "Dataset"), ("missing", "Missing setting"),
           ("rate", "Missing rate"))
HTML_NAME = "leaderboard.html"
REFERENCE_DIR = "reference"  # results/reference/ holds regression references, not records
_MAX_PLOTS_PER_SECTION = 8


# --------------------------------------------------------------------------- per-record scalars


def primary_metric_for(task_name: str | None) -> str | None:
    """The registered task's primary metric (None when the task is unknown here)."""
    from benchmark import registry as R

    R.load_plugins()
    if task_name and task_name in R.TASKS:
        return getattr(R.TASKS.get(task_name), "primary_metric", None)
    return None


def _finite(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def record_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """Every number a row can show for one record.

    ``test/<m>`` (test score at the best validation round), ``worst_client/<m>`` (the lowest
    per-client test score), ``spread/<m>`` (population std of the per-client test scores, so a
    federation of one client has spread 0), ``bytes_per_round`` and ``seconds_per_round``.
    Missing or non-finite values are left out rather than turned into zeros.
    """
    out: dict[str, float] = {}
    for key, value in (record.get("metrics") or {}).items():
        v = _finite(value)
        if v is not None and str(key).startswith("test/"):
            out[str(key)] = v
    for key, values in (record.get("per_client") or {}).items():
        vals = [v for v in (_finite(x) for x in values or []) if v is not None]
        if not vals or not str(key).startswith("test/"):
            continue
        name = str(key)[len("test/"):]
        out[f"worst_client/{name}"] = min(vals)
        out[f"spread/{name}"] = statistics.pstdev(vals) if len(vals) > 1 else 0.0
    for key in ("bytes_per_round", "seconds_per_round"):
        v = _finite(record.get(key))
        if v is not None:
            out[key] = v
    return out


# --------------------------------------------------------------------------- rows


@dataclass
class Stat:
    """Mean and sample std (ddof=1; NaN below two values) of one scalar over a row's seeds."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        n = len(values)
        mean = statistics.fmean(values) if n else math.nan
        std = statistics.stdev(values) if n > 1 else math.nan
        return cls(mean, std, n)


@dataclass
class Row:
    """One leaderboard row: a suite cell under one (artifact recipe, protocol) pair."""

    suite: str
    scale: str
    params: dict[str, Any]
    recipe: str
    protocol: str
    records: list[dict[str, Any]]
    current: bool = True
    stats: dict[str, Stat] = field(default_factory=dict)
    auc: float = math.nan

    @property
    def cell_key(self) -> str:
        return json.dumps(self.params, sort_keys=True, default=str)

    def _config(self, section: str) -> dict[str, Any]:
        for rec in self.records:
            cfg = (rec.get("config") or {}).get(section)
            if isinstance(cfg, dict):
                return cfg
        return {}

    def value(self, key: str) -> Any:
        """A dotted config value, from the params first, else from the records' config."""
        if key in self.params:
            return self.params[key]
        section, _, name = key.partition(".")
        return self._config(section).get(name)

    @property
    def method(self) -> str:
        return str(self.value("algorithm.name") or "?")

    @property
    def task(self) -> str:
        return str(self.value("task.name") or "?")

    @property
    def dataset(self) -> str:
        return str(self.value("dataset.name") or "?")

    @property
    def missing(self) -> str:
        return str(self.value("missing.name") or "?")

    @property
    def rate(self) -> float | None:
        return _finite(self.value(ROBUSTNESS_X))

    @property
    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("status") == "ok"]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("status") != "ok"]

    @property
    def latest(self) -> str:
        return max((str(r.get("timestamp") or "") for r in self.records), default="")

    def prov_values(self, key: str) -> list[str]:
        """Distinct values of one provenance field over the row's records, in seed order."""
        seen: dict[str, None] = {}
        for rec in sorted(self.records, key=lambda r: str(r.get("seed"))):
            value = (rec.get("provenance") or {}).get(key)
            if value is not None and value != "":
                seen.setdefault(json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value))
        return list(seen)

    @property
    def code_versions(self) -> list[str]:
        """Short git sha of each record ('+dirty' when uncommitted changes were present),
        plus the submission file's hash for submitted methods."""
        out: dict[str, None] = {}
        for rec in self.records:
            prov = rec.get("provenance") or {}
            sha = str(prov.get("git_sha") or "unknown")
            text = (sha[:10] if sha != "unknown" else sha) + ("+dirty" if prov.get("git_dirty") else "")
            sub = rec.get("submission") or {}
            if sub.get("sha256"):
                text += f" / {sub.get('file', 'submission')}@{str(sub['sha256'])[:10]}"
            out.setdefault(text)
        return list(out) or ["unknown"]


def _group_rows(suite: str, scale: str, records: Iterable[Mapping[str, Any]]) -> list[Row]:
    """Split one store's records into rows: by cell params, then by (recipe, protocol).

    Within a row a seed's newest record wins (a retried cell replaces its failure); store order
    is append order, so later lines are newer even when timestamps tie.
    """
    rows: dict[tuple[str, str, str], dict[Any, dict[str, Any]]] = {}
    for rec in records:
        if not isinstance(rec, Mapping) or rec.get("status") not in ("ok", "failed"):
            continue
        prov = rec.get("provenance") or {}
        key = (json.dumps(rec.get("params") or {}, sort_keys=True, default=str),
               str(prov.get("artifact_recipe") or ""), str(prov.get("protocol") or ""))
        rows.setdefault(key, {})[json.dumps(rec.get("seed"))] = dict(rec)
    out = [Row(suite=suite, scale=scale, params=json.loads(k[0]), recipe=k[1], protocol=k[2],
               records=list(by_seed.values())) for k, by_seed in rows.items()]
    newest: dict[str, Row] = {}
    for row in out:
        best = newest.get(row.cell_key)
        if best is None or row.latest >= best.latest:
            newest[row.cell_key] = row
    for row in out:
        row.current = newest[row.cell_key] is row
        scalars = [record_scalars(r) for r in row.ok]
        keys = sorted({k for s in scalars for k in s})
        row.stats = {k: Stat.of([s[k] for s in scalars if k in s]) for k in keys}
    return out


def _attach_auc(rows: list[Row], primary: str) -> None:
    """Robustness AUC of the primary metric over missing rate for each current setting.

    The curve joins the seed-mean test score of the current rows that share everything but the
    missing rate (and the protocol: a different training setup is a different curve). It needs
    two rates or more, and a setting with a rate where every seed failed gets no AUC, since an
    area over a shorter range would flatter it.
    """
    from benchmark.report.plots import curve_auc

    col = f"test/{primary}"
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if not row.current:
            continue
        rest = {k: v for k, v in row.params.items() if k != ROBUSTNESS_X}
        groups.setdefault((json.dumps(rest, sort_keys=True, default=str), row.protocol), []).append(row)
    for members in groups.values():
        points = [(m.rate, m.stats.get(col)) for m in members]
        if len({p[0] for p in points}) < 2 or any(x is None or s is None or s.n == 0 for x, s in points):
            continue
        auc = float(curve_auc([x for x, _ in points], [s.mean for _, s in points]))  # type: ignore[union-attr]
        for m in members:
            m.auc = auc


# --------------------------------------------------------------------------- sections


@dataclass
class Column:
    """A table column: header, how to get a display text and a sort value from a row."""

    key: str
    label: str
    numeric: bool
    text: Callable[[Row], str]
    sort: Callable[[Row], Any]
    hint: str = ""


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

    def track_of(self, row: Row) -> str:
        return self.track or row.task


def _suite_spec(name: str) -> dict[str, Any]:
    """The suite YAML when it still exists (labels, metrics, track), else an empty spec."""
    from benchmark.sweep import SUITES_DIR, load_suite

    if not (SUITES_DIR / f"{name}.yaml").is_file():
        return {}
    try:
        return load_suite(name).spec
    except BenchmarkError as e:
        log.warning("suite %s: spec not readable (%s); using record values only", name, e)
        return {}


def _make_section(suite: str, scale: str, records: list[dict[str, Any]]) -> Section | None:
    rows = _group_rows(suite, scale, records)
    if not rows:
        return None
    spec = _suite_spec(suite)
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
    _attach_auc(rows, primary)
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
        section = _make_section(suite, scale, ResultStore(path).read())
        if section is not None:
            sections.append(section)
    return sections


# --------------------------------------------------------------------------- formatting


def _fmt_num(value: float | None, percent: bool, decimals: int = 2) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value * (100.0 if percent else 1.0):.{decimals}f}"


def _fmt_stat(stat: Stat | None, percent: bool) -> str:
    if stat is None or stat.n == 0:
        return "-"
    text = _fmt_num(stat.mean, percent)
    if stat.n > 1 and math.isfinite(stat.std):
        text += f" ± {_fmt_num(stat.std, percent)}"
    return text


def _fmt_bytes(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.2f} {unit}"
    return f"{value:.0f} B"


def _fmt_param(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "-" if value is None else str(value)


def _mean(row: Row, key: str) -> float | None:
    stat = row.stats.get(key)
    return stat.mean if stat is not None and stat.n else None


def columns(section: Section) -> list[Column]:
    """The section's columns; markdown and HTML share them so both pages say the same.

    Results come first and the filterable context (track, task) last, so the numbers stay in
    view on a narrow screen; the Code column opens the row's provenance.
    """
    p = section.primary
    pct = section.percent.get(p, True)
    unit = " (%)" if pct else ""
    cols = [
        Column("method", "Method", False, lambda r: section.labels.get(r.method, r.method), lambda r: r.method,
               "algorithm (registry name on sorting)"),
        Column("dataset", "Dataset", False, lambda r: r.dataset, lambda r: r.dataset, "dataset.name"),
        Column("missing", "Missing", False, lambda r: r.missing, lambda r: r.missing, "missing-modality setting"),
        Column("rate", "Rate", True, lambda r: _fmt_param(r.rate), lambda r: r.rate, "missing rate"),
    ]
    for key in section.extra_params:
        numeric = all(isinstance(r.params.get(key), (int, float)) and not isinstance(r.params.get(key), bool)
                      for r in section.rows if key in r.params)
        cols.append(Column(f"param:{key}", key, numeric, lambda r, k=key: _fmt_param(r.params.get(k)),
                           lambda r, k=key, num=numeric: r.params.get(k) if num else _fmt_param(r.params.get(k)),
                           "grid parameter"))
    from benchmark.report.tables import metric_label

    for m in section.metrics:
        m_pct = section.percent.get(m, True)
        cols.append(Column(f"test/{m}", metric_label(m, section.metric_labels), True,
                           lambda r, m=m, q=m_pct: _fmt_stat(r.stats.get(f"test/{m}"), q),
                           lambda r, m=m: _mean(r, f"test/{m}"),
                           f"test {m} at the best validation round, mean ± std over seeds"
                           + (" (%)" if m_pct else "")))
    cols += [
        Column("auc", "Robust. AUC", True, lambda r: _fmt_num(r.auc, pct), lambda r: r.auc,
               f"area under test {p} vs missing rate, divided by the rate range{unit}"),
        Column("worst", "Worst client", True, lambda r: _fmt_stat(r.stats.get(f"worst_client/{p}"), pct),
               lambda r: _mean(r, f"worst_client/{p}"), f"lowest per-client test {p}{unit}"),
        Column("spread", "Client spread", True, lambda r: _fmt_stat(r.stats.get(f"spread/{p}"), pct),
               lambda r: _mean(r, f"spread/{p}"), f"population std across clients of test {p}{unit}"),
        Column("bytes", "Bytes/round", True, lambda r: _fmt_bytes(_mean(r, "bytes_per_round")),
               lambda r: _mean(r, "bytes_per_round"), "bytes up + down per training round (ledger)"),
        Column("seconds", "s/round", True, lambda r: _fmt_num(_mean(r, "seconds_per_round"), False, 3),
               lambda r: _mean(r, "seconds_per_round"), "median seconds per round"),
        Column("seeds", "Seeds ok", True, lambda r: f"{len(r.ok)}/{len(r.records)}", lambda r: len(r.ok),
               "successful seeds / seeds run"),
        Column("code", "Code", False, lambda r: ", ".join(r.code_versions), lambda r: r.latest,
               "git commit(s) of the row; click for provenance (sorts by run time)"),
        Column("track", "Track", False, section.track_of, section.track_of, "benchmark track"),
        Column("task", "Task", False, lambda r: r.task, lambda r: r.task, "task.name"),
    ]
    return cols


def _failure_text(row: Row) -> str:
    reasons = sorted({f"seed {r.get('seed')}: {(r.get('error') or {}).get('reason', 'unknown error')}"
                      for r in row.failed})
    return "; ".join(reasons)


# --------------------------------------------------------------------------- markdown


def render_markdown(sections: Sequence[Section], suite: str) -> str:
    """The markdown page of one suite: a table per scale, figures, provenance notes."""
    parts = [f"# Leaderboard: {md_escape(suite)}", ""]
    own = [s for s in sections if s.suite == suite]
    if own and own[0].description:
        parts += [own[0].description, ""]
    parts += ["Rows are suite cells under one artifact recipe and protocol; seeds are averaged only within a "
              "row. Metrics are test scores at the best validation round, mean ± sample std over seeds"
              " (percent unless raw). Robustness AUC: area under the primary metric vs missing rate divided "
              "by the rate range. Superseded rows come from an older recipe or protocol of the same cell and "
              "are never averaged with the current one.", ""]
    for sec in own:
        cols = columns(sec)
        parts += [f"## {md_escape(sec.suite)} [scale: {md_escape(sec.scale)}]", ""]
        for label, rows in (("Current runs", [r for r in sec.rows if r.current]),
                            ("Superseded runs", [r for r in sec.rows if not r.current])):
            if not rows:
                continue
            body = [[md_escape(c.text(r)) for c in cols] + [md_escape(r.recipe[:12] or "-"),
                                                             md_escape(r.protocol[:12] or "-")] for r in rows]
            head = [md_escape(c.label) for c in cols] + ["Artifact recipe", "Protocol"]
            parts += [f"### {label}", "", tabulate(body, headers=head, tablefmt="github", disable_numparse=True), ""]
            fails = [(r, _failure_text(r)) for r in rows if r.failed]
            for r, text in fails:
                parts.append(f"- failed seeds of {md_escape(r.method)} ({md_escape(r.cell_key)}): {md_escape(text)}")
            if fails:
                parts.append("")
        for title, path in sec.figures:
            parts += [f"![{md_escape(title)}]({path.name})", ""]
        for note in sec.notes:
            parts += [f"> {md_escape(note)}", ""]
    return "\n".join(parts).rstrip() + "\n"


# --------------------------------------------------------------------------- HTML

_CSS = """
:root { --fg:#1d2330; --muted:#5b6577; --line:#d9dee7; --head:#eef1f6; --old:#f7f3e8; --bad:#a8261b; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0 auto; padding: 1.2em 2em 3em; max-width: 1600px; }
h1 { margin: 0 0 .2em; font-size: 1.6em; }
h2 { margin: 1.6em 0 .3em; font-size: 1.25em; border-bottom: 2px solid var(--line); padding-bottom: .2em; }
h2 small { color: var(--muted); font-weight: normal; }
.meta, .desc, .note { color: var(--muted); }
#filters { position: sticky; top: 0; z-index: 2; background: #fff; padding: .6em 0; display: flex;
           flex-wrap: wrap; gap: .5em 1.2em; align-items: center; border-bottom: 1px solid var(--line); }
#filters label { white-space: nowrap; }
#filters select { margin-left: .3em; }
.scroll { overflow-x: auto; }
table.board { border-collapse: collapse; width: 100%; margin: .6em 0; font-variant-numeric: tabular-nums; }
table.board th, table.board td { border-bottom: 1px solid var(--line); padding: .3em .55em; text-align: left;
                                 vertical-align: top; white-space: nowrap; }
table.board th { background: var(--head); cursor: pointer; user-select: none; position: relative; }
table.board th[data-type="num"], table.board td.num { text-align: right; }
table.board th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: .75em; }
table.board th[aria-sort="descending"]::after { content: " \\25BC"; font-size: .75em; }
table.board tr.superseded td { background: var(--old); color: var(--muted); }
table.board tr.superseded td:first-child::after { content: " (superseded)"; font-size: .8em; }
table.board tr.has-failures td.seeds { color: var(--bad); font-weight: 600; }
details summary { cursor: pointer; color: #2456a6; }
details[open] summary { font-weight: 600; }
details .prov { position: fixed; z-index: 10; top: 8vh; left: 50%; transform: translateX(-50%);
                width: min(54em, 92vw); max-height: 80vh; overflow: auto; background: #fff; white-space: normal;
                border: 1px solid var(--line); border-radius: 6px; box-shadow: 0 8px 30px rgba(0,0,0,.25);
                padding: .8em 1.1em; text-align: left; color: var(--fg); }
details .prov h3 { margin: 0 0 .4em; font-size: 1.05em; }
details .prov p { margin: .5em 0 0; color: var(--muted); font-size: .85em; }
details dl { margin: 0; display: grid; grid-template-columns: max-content 1fr; gap: .15em .9em; font-size: .9em; }
details dt { color: var(--muted); }
details dd { margin: 0; word-break: break-all; }
figure { margin: .8em 0; display: inline-block; vertical-align: top; }
figure img { max-width: 560px; width: 100%; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: .9em; }
.empty { color: var(--muted); font-style: italic; }
"""

_JS = """
(function () {
  "use strict";
  var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-filter]"));
  var showOld = document.getElementById("show-superseded");
  var counter = document.getElementById("row-count");

  function applyFilters() {
    var wanted = {};
    selects.forEach(function (s) { if (s.value !== "") { wanted[s.getAttribute("data-filter")] = s.value; } });
    var total = 0;
    Array.prototype.forEach.call(document.querySelectorAll("table.board"), function (table) {
      var visible = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
        var show = showOld.checked || tr.getAttribute("data-current") === "1";
        Object.keys(wanted).forEach(function (k) {
          if (tr.getAttribute("data-" + k) !== wanted[k]) { show = false; }
        });
        tr.hidden = !show;
        if (show) { visible += 1; }
      });
      var empty = table.parentNode.parentNode.querySelector(".empty");
      if (empty) { empty.hidden = visible > 0; }
      total += visible;
    });
    counter.textContent = total + " row" + (total === 1 ? "" : "s") + " shown";
  }

  function cellValue(tr, index, numeric) {
    var raw = tr.cells[index].getAttribute("data-sort");
    if (raw === null || raw === "") { return null; }
    if (numeric) { var f = parseFloat(raw); return isNaN(f) ? null : f; }
    return raw.toLowerCase();
  }

  function sortBy(th) {
    var table = th.closest("table");
    var index = Array.prototype.indexOf.call(th.parentNode.cells, th);
    var numeric = th.getAttribute("data-type") === "num";
    var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index, numeric), y = cellValue(b, index, numeric);
      if (x === null && y === null) { return 0; }
      if (x === null) { return 1; }   // empty values last in both directions
      if (y === null) { return -1; }
      return x < y ? -sign : (x > y ? sign : 0);
    });
    rows.forEach(function (tr) { body.appendChild(tr); });
  }

  Array.prototype.forEach.call(document.querySelectorAll("table.board thead th"), function (th) {
    th.addEventListener("click", function () { sortBy(th); });
    var hint = th.getAttribute("data-hint");
    th.setAttribute("title", (hint ? hint + "; " : "") + "click to sort");
  });
  // One provenance panel at a time; a click outside it or Escape closes it.
  document.addEventListener("click", function (e) {
    Array.prototype.forEach.call(document.querySelectorAll("details[open]"), function (d) {
      if (!d.contains(e.target)) { d.open = false; }
    });
  });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") {
      Array.prototype.forEach.call(document.querySelectorAll("details[open]"), function (d) { d.open = false; });
    }
  });
  selects.forEach(function (s) { s.addEventListener("change", applyFilters); });
  showOld.addEventListener("change", applyFilters);
  applyFilters();
})();
"""


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _sort_attr(value: Any) -> str:
    """The data-sort text: plain decimal for any real number (numpy's included), '' for none/NaN."""
    if value is None or isinstance(value, (bool, str)):
        return "" if value is None else str(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        return repr(f) if math.isfinite(f) else ""
    return str(value)


def _filter_values(section: Section, row: Row) -> dict[str, str]:
    return {"track": section.track_of(row), "task": row.task, "dataset": row.dataset, "missing": row.missing,
            "rate": _fmt_param(row.rate)}


def _provenance_html(section: Section, row: Row) -> str:
    """The details a reader needs to trust or reproduce a row, behind one click."""
    items: list[tuple[str, str]] = [
        ("suite / scale", f"{row.suite} / {row.scale}"),
        ("cell", json.dumps(row.params, sort_keys=True, default=str)),
        ("git sha", ", ".join(row.prov_values("git_sha")) or "unknown"),
        ("uncommitted changes", ", ".join(sorted({str(bool((r.get("provenance") or {}).get("git_dirty")))
                                                   for r in row.records}))),
        ("artifact recipe", row.recipe or "unknown"),
        ("protocol", row.protocol or "unknown"),
        ("config hash", ", ".join(row.prov_values("config_hash")) or "unknown"),
    ]
    for rec in sorted(row.records, key=lambda r: str(r.get("seed"))):
        prov = rec.get("provenance") or {}
        status = rec.get("status")
        if status != "ok":
            status = f"failed: {(rec.get('error') or {}).get('reason', 'unknown error')}"
        items.append((f"seed {rec.get('seed')}", f"artifact {prov.get('artifact_hash', 'unknown')}; {status}; "
                                                  f"{rec.get('timestamp', '')}"))
    items.append(("device", ", ".join(row.prov_values("device")) or "unknown"))
    for v in row.prov_values("versions"):
        try:
            versions = json.loads(v)
            items.append(("versions", ", ".join(f"{k} {versions[k]}" for k in sorted(versions))))
        except (json.JSONDecodeError, TypeError, AttributeError):
            items.append(("versions", v))
    subs = {json.dumps(r.get("submission"), sort_keys=True) for r in row.records if r.get("submission")}
    for s in sorted(subs):
        items.append(("submission", s))
    dl = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items)
    rate = f" at missing rate {_fmt_param(row.rate)}" if row.rate is not None else ""
    head = f"Provenance: {section.labels.get(row.method, row.method)}{rate}" + ("" if row.current else " (superseded)")
    return (f"<details><summary>{_esc(', '.join(row.code_versions))}</summary><div class=\"prov\">"
            f"<h3>{_esc(head)}</h3><dl>{dl}</dl><p>Click outside or press Escape to close.</p></div></details>")


def _section_html(section: Section, index: int) -> str:
    cols = columns(section)
    head = "".join(f'<th data-key="{_esc(c.key)}" data-type="{"num" if c.numeric else "text"}" '
                   f'data-hint="{_esc(c.hint)}">{_esc(c.label)}</th>' for c in cols)
    body = []
    for row in section.rows:
        attrs = " ".join(f'data-{k}="{_esc(v)}"' for k, v in _filter_values(section, row).items())
        cls = " ".join(x for x in ("superseded" if not row.current else "",
                                   "has-failures" if row.failed else "") if x)
        cells = []
        for c in cols:
            css = " ".join(x for x in ("num" if c.numeric else "", "seeds" if c.key == "seeds" else "") if x)
            content = _provenance_html(section, row) if c.key == "code" else _esc(c.text(row))
            title = f' title="{_esc(_failure_text(row))}"' if c.key == "seeds" and row.failed else ""
            css_attr = f' class="{css}"' if css else ""
            cells.append(f'<td data-col="{_esc(c.key)}" data-sort="{_esc(_sort_attr(c.sort(row)))}"'
                         f"{css_attr}{title}>{content}</td>")
        cls_attr = f' class="{cls}"' if cls else ""
        body.append(f'<tr {attrs} data-current="{1 if row.current else 0}"{cls_attr}>{"".join(cells)}</tr>')
    figures = []
    for title, path in section.figures:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        figures.append(f'<figure><img alt="{_esc(title)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{_esc(title)}</figcaption></figure>")
    notes = "".join(f'<p class="note">{_esc(n)}</p>' for n in section.notes)
    desc = f'<p class="desc">{_esc(section.description)}</p>' if section.description else ""
    return (f'<section class="suite" id="s{index}" data-suite="{_esc(section.suite)}" '
            f'data-scale="{_esc(section.scale)}"><h2>{_esc(section.suite)} <small>scale: {_esc(section.scale)}'
            f"</small></h2>{desc}"
            f'<div class="scroll"><table class="board"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>'
            f'<p class="empty" hidden>No rows of this suite match the filters.</p>'
            f'<div class="figures">{"".join(figures)}</div>{notes}</section>')


def render_html(sections: Sequence[Section], source: str) -> str:
    """The whole static page: filters, one sortable table per suite and scale, figures."""
    options = []
    for key, label in FILTERS:
        values = sorted({_filter_values(s, r)[key] for s in sections for r in s.rows},
                        key=lambda v: (_finite(v) is None, _finite(v) or 0.0, v))
        opts = '<option value="">all</option>' + "".join(f'<option value="{_esc(v)}">{_esc(v)}</option>'
                                                         for v in values)
        options.append(f'<label>{_esc(label)}<select data-filter="{key}">{opts}</select></label>')
    n_old = sum(1 for s in sections for r in s.rows if not r.current)
    options.append(f'<label><input type="checkbox" id="show-superseded"> show superseded runs ({n_old})</label>')
    options.append('<span id="row-count" class="meta"></span>')
    body = "".join(_section_html(s, i) for i, s in enumerate(sections)) or \
        '<p class="empty">No result records yet: run a sweep, then the leaderboard.</p>'
    rules = ("Each row is one suite cell under one artifact recipe and protocol; seeds are averaged only "
             "within a row, never across recipes or protocols. Metrics: test score at the best validation "
             "round, mean ± sample std over seeds, in percent. Robustness AUC: area under the primary metric vs "
             "missing rate over the rate range. Worst client / client spread: lowest per-client score and "
             "population std across clients of the primary metric. Click a column to sort; click a Code entry "
             "for the row's provenance.")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>FedMM-Bench leaderboard</title><style>{_CSS}</style></head><body>"
            f"<header><h1>FedMM-Bench leaderboard</h1><p class=\"meta\">Built {_esc(now_iso())} from "
            f"{_esc(source)}. {_esc(rules)}</p></header>"
            f'<div id="filters">{"".join(options)}</div>{body}<script>{_JS}</script></body></html>\n')


# --------------------------------------------------------------------------- figures


def _setting(row: Row) -> dict[str, Any]:
    """The row's params apart from the curve's x (missing rate) and hue (method)."""
    return {k: v for k, v in row.params.items() if k not in (ROBUSTNESS_X, "algorithm.name")}


def _plot_sections(sections: Sequence[Section], out_dir: Path) -> None:
    """Robustness curves (primary metric vs missing rate, one line per method) per section.

    Only current rows are drawn, one figure per combination of the other grid parameters, so a
    line never mixes recipes, protocols or settings. A figure that cannot be drawn becomes a
    note on the page instead of stopping the leaderboard.
    """
    from benchmark.report.plots import robustness_plot

    for sec in sections:
        current = [r for r in sec.rows if r.current and r.ok]
        if len({r.rate for r in current if r.rate is not None}) < 2:
            continue
        combos: dict[str, dict[str, Any]] = {}
        for r in current:
            combos.setdefault(json.dumps(_setting(r), sort_keys=True, default=str), _setting(r))
        if len(combos) > _MAX_PLOTS_PER_SECTION:
            sec.notes.append(f"{len(combos)} parameter settings; figures drawn for the first "
                             f"{_MAX_PLOTS_PER_SECTION} only (the table has all).")
        for i, (key, rest) in enumerate(list(combos.items())[:_MAX_PLOTS_PER_SECTION]):
            records = [rec for r in current if json.dumps(_setting(r), sort_keys=True, default=str) == key
                       for rec in r.records]
            if ROBUSTNESS_X not in (records[0].get("params") or {}):
                continue
            setting = ", ".join(f"{k}={_fmt_param(v)}" for k, v in rest.items())
            title = f"{sec.suite} [{sec.scale}]: {sec.primary} vs missing rate" + (f" ({setting})" if setting else "")
            suffix = f"_{i}" if len(combos) > 1 else ""
            stem = out_dir / f"leaderboard_{sec.suite}_{sec.scale}_robustness{suffix}"
            try:
                paths = robustness_plot(records, x=ROBUSTNESS_X, metric=sec.primary, hue="algorithm.name",
                                        out_stem=stem, title=title, hue_labels=sec.labels or None,
                                        percent=sec.percent.get(sec.primary, True))
            except (ConfigError, DataError) as e:
                sec.notes.append(f"figure not drawn: {e}")
                continue
            sec.figures.append((title, next(p for p in paths if p.suffix == ".png")))


# --------------------------------------------------------------------------- entry points


@dataclass
class LeaderboardOutput:
    """What `build_leaderboard` wrote."""

    html: Path
    markdown: list[Path]
    figures: list[Path]
    sections: list[Section]


def build_leaderboard(results_dir: str | Path = "results", out_dir: str | Path = "tables",
                      html_path: str | Path | None = None, plots: bool = True) -> LeaderboardOutput:
    """Read every record store under ``results_dir``; write the markdown pages and the HTML page."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = collect_sections(results_dir)
    if plots:
        _plot_sections(sections, out)
    md_paths = []
    for suite in dict.fromkeys(s.suite for s in sections):
        path = out / f"leaderboard_{suite}.md"
        path.write_text(render_markdown(sections, suite), encoding="utf-8")
        md_paths.append(path)
    html_file = Path(html_path) if html_path else out / HTML_NAME
    html_file.parent.mkdir(parents=True, exist_ok=True)
    html_file.write_text(render_html(sections, str(results_dir)), encoding="utf-8")
    figures = [p for s in sections for _, p in s.figures]
    return LeaderboardOutput(html=html_file, markdown=md_paths, figures=figures, sections=sections)


def cmd_leaderboard(a: argparse.Namespace) -> int:
    """`leaderboard`: rebuild the pages and say where they are."""
    res = build_leaderboard(a.results, a.out, a.html, plots=a.plots)
    if not res.sections:
        print(f"no result records under {a.results}/; the page says so. Run a sweep first, e.g. "
              f"python run_benchmark.py sweep demo --scale tiny")
    for s in res.sections:
        n_cur = sum(r.current for r in s.rows)
        print(f"{s.suite}[{s.scale}]: {n_cur} current rows, {len(s.rows) - n_cur} superseded")
    for p in res.markdown:
        print(f"wrote {p}")
    print(f"wrote {res.html}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `leaderboard` verb with the CLI."""
    p = sub.add_parser("leaderboard", help="build the leaderboard: markdown per suite + one static HTML page")
    p.add_argument("--results", default="results", help="results directory (one folder per suite)")
    p.add_argument("--out", default="tables", help="output directory for the pages and figures")
    p.add_argument("--html", default=None, help=f"HTML page path (default: OUT/{HTML_NAME})")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="skip the robustness figures")
    p.set_defaults(handler=cmd_leaderboard)
