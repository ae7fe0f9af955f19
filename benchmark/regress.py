"""Metric regression: run the CI suite(s) fresh and compare every metric with stored references.

``python run_benchmark.py regress`` runs each suite that has a ``regress:`` section (``ci`` by
default: tiny synthetic graph, CPU, three seeds) in a temporary results directory, so nothing
cached can hide a change, and compares the per-cell seed means with
``results/reference/<suite>.json``. The allowed deviation of a metric is

    tolerance = max(k * std_ref, floor)

where ``std_ref`` is the sample std over the reference seeds (at least ``min_seeds``), ``k`` the
suite's band width and ``floor`` the metric's floor, which carries deterministic metrics (bytes
per round has std 0) and protects against a lucky near-zero seed spread. A metric is *worse*
than its band (below for ``direction: higher``, above for ``lower``, either way for ``both``) is
a regression: the command prints a one-line verdict, then only the rows outside their band,
and exits 1. References made under another protocol or artifact recipe are named once, with
the command that refreshes them. Leaving the band on the good side
is reported as "improved" and passes; ``--update`` accepts the new numbers on purpose.

A track's CI cells can live in its own suite: the ``regress:`` section of ``ci.yaml`` may list
other suites under ``also:`` with their own band spec (kg_smoke for the KG track), each with a
reference file of its own. Without ``--suite`` the run also checks that every track a suite
declares (its ``track:`` key) is covered by one of these suites, so a new track cannot slip in
untested; tasks that no suite uses yet are listed but not required.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmark.record import Record, as_records
from benchmark.errors import BenchmarkError, ConfigError, DataError, first_line
from benchmark.stopping import as_interrupted

REFERENCE_DIR = Path("results") / "reference"
#: where regress reads the finished tuning studies' choices (benchmark.tuned): the committed
#: ones, as the sweeps that made the reference records did (its own records go to a temporary
#: directory, which holds no studies)
TUNED_FROM = Path("results")
DIRECTIONS = ("higher", "lower", "both")
SPEC_KEYS = ("k", "min_seeds", "scale", "metrics", "also")
RULE_KEYS = ("direction", "floor")
FAILING = ("REGRESSION", "CHANGED", "FAILED", "MISSING", "NEW", "UNCOVERED")


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class MetricRule:
    """Which way is worse for a metric, and its minimum tolerance."""

    direction: str
    floor: float


@dataclass
class RegressSpec:
    """A suite's ``regress:`` section, validated."""

    k: float
    min_seeds: int
    scale: str
    metrics: dict[str, MetricRule] = field(default_factory=dict)


def parse_spec(suite: Any, raw: Mapping[str, Any] | None = None, where: str | None = None) -> RegressSpec:
    """Validate a band spec (``suite.spec['regress']`` unless ``raw`` is given, e.g. from ``also:``);
    every problem is a ConfigError naming where the spec lives."""
    raw = suite.spec.get("regress") if raw is None else raw
    where = where or f"{suite.path}: regress"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"suite '{suite.name}' has no 'regress:' section and no CI suite lists it under "
                          f"regress.also; add k, min_seeds and metrics")
    for key in raw:
        if key not in SPEC_KEYS:
            raise ConfigError(f"{where}: unknown key '{key}'; valid: {', '.join(SPEC_KEYS)}")
    also = raw.get("also") or {}
    if not isinstance(also, Mapping) or not all(isinstance(v, Mapping) for v in also.values()):
        raise ConfigError(f"{where}.also must map suite names to their regress specs")
    k = float(raw.get("k", 3.0))
    min_seeds = int(raw.get("min_seeds", 3))
    if k <= 0 or min_seeds < 2:
        raise ConfigError(f"{where}: k must be > 0 and min_seeds >= 2 (a std needs two seeds)")
    metrics = raw.get("metrics")
    if not isinstance(metrics, Mapping) or not metrics:
        raise ConfigError(f"{where}.metrics must map metric names to {{direction, floor}}")
    rules = {}
    for name, rule in metrics.items():
        rule = rule or {}
        if not isinstance(rule, Mapping) or any(r not in RULE_KEYS for r in rule):
            raise ConfigError(f"{where}.metrics.{name}: expected keys {', '.join(RULE_KEYS)}")
        direction = str(rule.get("direction", "higher"))
        if direction not in DIRECTIONS:
            raise ConfigError(f"{where}.metrics.{name}.direction must be one of {', '.join(DIRECTIONS)}")
        floor = float(rule.get("floor", 0.0))
        if floor < 0:
            raise ConfigError(f"{where}.metrics.{name}.floor must be >= 0")
        rules[str(name)] = MetricRule(direction, floor)
    return RegressSpec(k=k, min_seeds=min_seeds, scale=str(raw.get("scale", suite.default_scale)), metrics=rules)


def regress_plan() -> dict[str, tuple[Mapping[str, Any], str]]:
    """The CI set: suite name -> (its band spec, where the spec lives).

    Every suite under benchmark/suites/ with a ``regress:`` section, plus each suite listed
    under such a section's ``also:`` (a track whose suite file belongs to the track keeps its
    CI spec in ci.yaml). A suite named twice is a ConfigError: one suite, one reference.
    """
    from benchmark.config import load_yaml
    from benchmark.sweep import SUITES_DIR

    plan: dict[str, tuple[Mapping[str, Any], str]] = {}

    def add(name: str, spec: Mapping[str, Any], where: str) -> None:
        if name in plan:
            raise ConfigError(f"{where}: suite '{name}' already has a regress spec in {plan[name][1]}")
        plan[name] = (spec, where)

    for path in sorted(SUITES_DIR.glob("*.yaml")):
        spec = (load_yaml(path) or {}).get("regress")
        if not isinstance(spec, Mapping):
            continue
        name = str(load_yaml(path).get("name", path.stem))
        add(name, {k: v for k, v in spec.items() if k != "also"}, f"{path}: regress")
        for other, sub in (spec.get("also") or {}).items():
            if isinstance(sub, Mapping) and "also" in sub:
                raise ConfigError(f"{path}: regress.also.{other} cannot itself have 'also'")
            add(str(other), sub, f"{path}: regress.also.{other}")
    return plan


def spec_for(suite: Any, plan: Mapping[str, tuple[Mapping[str, Any], str]]) -> RegressSpec:
    """The suite's own ``regress:`` section, else the one a CI suite lists for it under ``also:``."""
    if isinstance(suite.spec.get("regress"), Mapping):
        return parse_spec(suite)
    if suite.name in plan:
        raw, where = plan[suite.name]
        return parse_spec(suite, raw, where)
    return parse_spec(suite)


# --------------------------------------------------------------------------- summaries


def cell_label(params: Mapping[str, Any]) -> str:
    """Stable readable key of a cell: its params, sorted, as k=v."""
    def fmt(v: Any) -> str:
        return f"{v:g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k}={fmt(params[k])}" for k in sorted(params)) or "(single cell)"


def summarize(records: Iterable[Record | Mapping[str, Any]], metrics: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per cell: params, provenance hashes, failures, and mean/std/n over the ok seeds per metric."""
    from benchmark.report.leaderboard import record_scalars

    wanted = list(metrics)
    cells: dict[str, dict[str, Any]] = {}
    for rec in as_records(records):
        label = cell_label(rec.params or {})
        cell = cells.setdefault(label, {"params": dict(rec.params or {}), "values": {m: [] for m in wanted},
                                        "failed": [], "seeds": [], "protocol": set(), "artifact_recipe": set()})
        cell["seeds"].append(rec.seed)
        prov = rec.provenance or {}
        for key in ("protocol", "artifact_recipe"):
            if prov.get(key):
                cell[key].add(str(prov[key]))
        if not rec.ok:
            cell["failed"].append(f"seed {rec.seed}: {rec.reason or 'unknown error'}")
            continue
        scalars = record_scalars(rec)
        for m in wanted:
            if m in scalars:
                cell["values"][m].append(scalars[m])
    out = {}
    for label, cell in sorted(cells.items()):
        stats = {}
        for m, vals in cell["values"].items():
            if vals:
                stats[m] = {"mean": statistics.fmean(vals), "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
                            "n": len(vals)}
        out[label] = {"params": cell["params"], "protocol": ",".join(sorted(cell["protocol"])),
                      "artifact_recipe": ",".join(sorted(cell["artifact_recipe"])), "failed": cell["failed"],
                      "seeds": sorted(cell["seeds"], key=str), "metrics": stats}
    return out


def make_reference(suite: Any, spec: RegressSpec, summary: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The reference document: per cell and metric mean, std, n, k and floor, plus provenance."""
    from benchmark.results import git_state, now_iso, package_versions

    sha, dirty = git_state()
    cells = {}
    for label, cell in summary.items():
        metrics = {}
        for m, rule in spec.metrics.items():
            st = cell["metrics"].get(m)
            if st is None:
                continue
            metrics[m] = {**st, "k": spec.k, "floor": rule.floor, "direction": rule.direction}
        cells[label] = {"params": cell["params"], "protocol": cell["protocol"],
                        "artifact_recipe": cell["artifact_recipe"], "metrics": metrics}
    return {"suite": suite.name, "scale": spec.scale, "seeds": list(suite.seeds), "k": spec.k,
            "created": now_iso(), "git_sha": sha, "git_dirty": dirty, "versions": package_versions(),
            "tolerance": "max(k * std, floor) around the reference mean; std is the sample std over seeds",
            "cells": cells}


# --------------------------------------------------------------------------- comparison


@dataclass
class Comparison:
    """One row of the diff table."""

    cell: str
    metric: str
    status: str
    ref: Mapping[str, Any] | None = None
    cur: Mapping[str, Any] | None = None
    tol: float | None = None
    note: str = ""

    @property
    def failing(self) -> bool:
        return self.status in FAILING


def _judge(ref: Mapping[str, Any], cur: Mapping[str, Any], direction: str, tol: float) -> str:
    delta = float(cur["mean"]) - float(ref["mean"])
    slack = tol + 1e-12 * max(1.0, abs(float(ref["mean"])))
    if direction == "both":
        return "CHANGED" if abs(delta) > slack else "ok"
    worse = -delta if direction == "higher" else delta
    if worse > slack:
        return "REGRESSION"
    if -worse > slack:
        return "improved"
    return "ok"


def compare(reference: Mapping[str, Any], current: Mapping[str, Mapping[str, Any]],
            spec: RegressSpec) -> list[Comparison]:
    """Every (cell, metric) of the reference and the current run, judged against its band."""
    out: list[Comparison] = []
    ref_cells = reference.get("cells") or {}
    for label in sorted(set(ref_cells) | set(current)):
        ref_cell, cur_cell = ref_cells.get(label), current.get(label)
        if ref_cell is None:
            out.append(Comparison(label, "-", "NEW", note="cell has no reference; if the suite changed on "
                                                          "purpose run: regress --update"))
            continue
        if cur_cell is None:
            out.append(Comparison(label, "-", "MISSING", note="reference cell did not run"))
            continue
        if cur_cell["failed"]:
            out.append(Comparison(label, "-", "FAILED", note="; ".join(cur_cell["failed"])))
            continue
        for metric in sorted(set(ref_cell.get("metrics") or {}) | set(spec.metrics)):
            ref = (ref_cell.get("metrics") or {}).get(metric)
            cur = cur_cell["metrics"].get(metric)
            rule = spec.metrics.get(metric)
            if ref is None:
                if cur is not None and rule is not None:
                    out.append(Comparison(label, metric, "NEW", cur=cur, note="metric has no reference"))
                continue
            if cur is None:
                out.append(Comparison(label, metric, "MISSING", ref=ref, note="metric absent from the current run"))
                continue
            direction = rule.direction if rule else str(ref.get("direction", "higher"))
            floor = rule.floor if rule else float(ref.get("floor", 0.0))
            tol = max(float(ref.get("k", spec.k)) * float(ref.get("std", 0.0)), floor)
            out.append(Comparison(label, metric, _judge(ref, cur, direction, tol), ref, cur, tol))
    return out


def provenance_drift(suite_name: str, reference: Mapping[str, Any],
                     current: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One note per provenance field (protocol, artifact recipe) on which the reference and the
    current run differ for some cell, with how to refresh the references."""
    ref_cells = reference.get("cells") or {}
    notes = []
    for what, words in (("protocol", "protocol"), ("artifact_recipe", "artifact recipe")):
        differ = [label for label in sorted(set(ref_cells) & set(current))
                  if ref_cells[label].get(what) and current[label].get(what)
                  and ref_cells[label][what] != current[label][what]]
        if differ:
            notes.append(f"note: the references of suite '{suite_name}' were made with another {words} "
                         f"({len(differ)} of {len(current)} cells); if that change is intended, refresh them with: "
                         f"python run_benchmark.py regress --suite {suite_name} --update")
    return notes


def suite_track(suite: Any) -> str:
    """A suite's track: its ``track:`` key, else the task its base config names."""
    if suite.spec.get("track"):
        return str(suite.spec["track"])
    base = suite.spec.get("base") or {}
    return str(base.get("task.name") or (base.get("task") or {}).get("name") or "node_cls")


def suite_tasks(suite: Any) -> set[str]:
    """Every task name a suite's cells use (any scale)."""
    from benchmark.config import deep_merge, expand_dotted

    base = expand_dotted(suite.spec.get("base") or {})
    tasks = set()
    for over in [{}, *((suite.spec.get("scales") or {}).values())]:
        cfg = deep_merge(base, expand_dotted(over or {}))
        tasks.add(str((cfg.get("task") or {}).get("name", "node_cls")))
    for key, values in suite.grid.items():
        if key == "task.name":
            tasks |= {str(v) for v in values}
    return tasks


def coverage(suite_names: Sequence[str]) -> tuple[list[Comparison], list[str]]:
    """(an UNCOVERED row for every track some suite declares that no CI suite covers,
    registered tasks that no suite uses at all, which are not tracks yet)."""
    from benchmark import registry as R
    from benchmark.sweep import SUITES_DIR, load_suite

    R.load_plugins()
    suites = [load_suite(str(p)) for p in sorted(SUITES_DIR.glob("*.yaml"))]
    covered = {suite_track(load_suite(n)) for n in suite_names}
    rows = []
    for track in sorted({suite_track(s) for s in suites} - covered):
        owners = ", ".join(s.name for s in suites if suite_track(s) == track)
        rows.append(Comparison("coverage", f"track {track}", "UNCOVERED",
                               note=f"no CI suite covers it; give suite {owners} a regress spec "
                                    f"(its own regress: section, or ci.yaml regress.also)"))
    used = set().union(*(suite_tasks(s) for s in suites)) if suites else set()
    return rows, [t for t in R.TASKS.names() if t not in used]


def _num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4f}"


def _stat(st: Mapping[str, Any] | None) -> str:
    if not st:
        return "-"
    return f"{_num(float(st['mean']))} ± {_num(float(st['std']))} (n={st['n']})"


def render(comparisons: Sequence[Comparison]) -> str:
    """The diff table, failing rows first so the reason is the first thing a CI log shows."""
    rows = sorted(comparisons, key=lambda c: (not c.failing, c.status == "ok", c.cell, c.metric))
    body = []
    for c in rows:
        delta = float(c.cur["mean"]) - float(c.ref["mean"]) if c.cur and c.ref else None
        body.append([c.cell, c.metric, _stat(c.ref), _stat(c.cur), "-" if delta is None else f"{delta:+.4g}",
                     _num(c.tol), c.status, c.note])
    return tabulate(body, headers=["cell", "metric", "reference", "current", "delta", "tolerance", "status", "note"],
                    tablefmt="github", disable_numparse=True)


# --------------------------------------------------------------------------- running


def reference_path(reference_dir: str | Path, suite_name: str) -> Path:
    """One reference file per suite, so a track's references change only with that track."""
    return Path(reference_dir) / f"{suite_name}.json"


def read_reference(path: Path) -> dict[str, Any]:
    """A reference document; DataError naming the file when it is not one."""
    try:
        reference = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DataError(f"{path}: not a readable reference ({type(e).__name__}: {first_line(e)}); "
                        f"rewrite it with: python run_benchmark.py regress --update") from None
    if not isinstance(reference, dict) or not isinstance(reference.get("cells"), dict):
        raise DataError(f"{path}: not a reference document (no 'cells' mapping); "
                        f"rewrite it with: python run_benchmark.py regress --update")
    return reference


def run_ci_suite(suite: Any, spec: RegressSpec, jobs: int, overrides: Mapping[str, Any],
                 keep: str | Path | None, progress: bool) -> list[Record]:
    """Run every cell of the suite fresh (a temporary store unless ``keep`` names a directory)."""
    from benchmark.sweep import run_suite

    if len(suite.seeds) < spec.min_seeds:
        raise ConfigError(f"suite '{suite.name}' has {len(suite.seeds)} seeds; regress needs at least "
                          f"{spec.min_seeds} for a seed-variance tolerance")
    if keep is not None:
        store = suite.results_path(keep, spec.scale)
        if store.exists():
            raise BenchmarkError(f"{store} exists; regress runs every cell fresh, so --keep needs a directory "
                                 f"without records of suite '{suite.name}'")
        records, _ = run_suite(suite, spec.scale, jobs, keep, progress=progress, overrides=dict(overrides),
                               tuned=TUNED_FROM)
        return records
    with tempfile.TemporaryDirectory(prefix="fedmm-regress-") as tmp:
        records, _ = run_suite(suite, spec.scale, jobs, tmp, progress=progress, overrides=dict(overrides),
                               tuned=TUNED_FROM)
    return records


def regress(suite_names: Sequence[str] | None = None, update: bool = False, overrides: Sequence[str] = (),
            jobs: int = 2, reference_dir: str | Path = REFERENCE_DIR, keep: str | Path | None = None,
            progress: bool = True) -> int:
    """Run, compare (or write references), print; returns the exit code (0 pass, 1 regression)."""
    from benchmark.config import parse_override
    from benchmark.sweep import load_suite

    explicit = bool(suite_names)
    plan = regress_plan()
    names = list(suite_names or plan)
    if not names:
        raise ConfigError("no suite has a 'regress:' section; add one (see benchmark/suites/ci.yaml)")
    if update and overrides:
        raise ConfigError("--update with --set would store references of a modified config; drop --set")
    parsed = dict(parse_override(o) for o in overrides)
    planned = []
    for name in names:  # every input problem fails before the first cell of any suite runs
        suite = load_suite(name)
        spec = spec_for(suite, plan)
        check_overrides(suite, spec.scale, parsed)
        ref_file = reference_path(reference_dir, suite.name)
        if not update and not ref_file.is_file():
            raise BenchmarkError(f"no reference {ref_file}; create it on purpose with: "
                                 f"python run_benchmark.py regress --suite {name} --update")
        reference = None if update else read_reference(ref_file)
        if reference is not None and reference.get("scale") != spec.scale:
            raise BenchmarkError(f"{ref_file} holds scale '{reference.get('scale')}' but the suite regresses "
                                 f"at '{spec.scale}'; run regress --update")
        planned.append((suite, spec, ref_file, reference))
    all_rows: list[Comparison] = []
    drift: list[str] = []
    written: list[Path] = []
    try:
        for suite, spec, ref_file, reference in planned:
            records = _run_timed(suite, spec, jobs, parsed, overrides, keep, progress)
            summary = summarize(records, spec.metrics)
            if update:
                write_reference(suite, spec, summary, ref_file)
                written.append(ref_file)
                continue
            all_rows += compare(reference, summary, spec)
            drift += provenance_drift(suite.name, reference, summary)
    except KeyboardInterrupt as e:
        raise as_interrupted(e, _stop_message(update, keep, written)) from None
    return 0 if update else report(all_rows, drift, names, explicit)


def check_overrides(suite: Any, scale: str, overrides: Mapping[str, Any]) -> None:
    """ConfigError (with the closest valid key, as ``run`` gives) when ``--set`` makes any cell
    of the suite invalid; otherwise every cell would run, fail, and count as a regression."""
    from benchmark.config import build_run_config, deep_merge, expand_dotted
    from benchmark.grid_keys import refuse_grid_overrides

    if not overrides:
        return
    refuse_grid_overrides(suite, dict(overrides))
    for cell in suite.cells(scale, validate=False):
        build_run_config(deep_merge(cell.config, expand_dotted(dict(overrides))))


def _run_timed(suite: Any, spec: RegressSpec, jobs: int, parsed: Mapping[str, Any], overrides: Sequence[str],
               keep: str | Path | None, progress: bool) -> list[Record]:
    """Run one CI suite fresh and say on stderr how long it took (stdout opens with the verdict)."""
    start = time.perf_counter()
    records = run_ci_suite(suite, spec, jobs, parsed, keep, progress)
    shown = f" with {' '.join(overrides)}" if overrides else ""
    cells = len({cell_label(r.params or {}) for r in records})
    print(f"regress {suite.name}[{spec.scale}]{shown}: {cells} cells x {len(suite.seeds)} seeds "
          f"in {time.perf_counter() - start:.0f}s, k={spec.k:g}", file=sys.stderr)
    return records


def write_reference(suite: Any, spec: RegressSpec, summary: Mapping[str, Mapping[str, Any]], ref_file: Path) -> None:
    """Write a suite's reference file; refuses when a cell failed (a reference must be whole)."""
    failed = {k: v["failed"] for k, v in summary.items() if v["failed"]}
    if failed:
        label, reasons = next(iter(failed.items()))
        raise BenchmarkError(f"not writing references: cell {label} failed ({reasons[0]})")
    ref = make_reference(suite, spec, summary)
    ref_file.parent.mkdir(parents=True, exist_ok=True)
    ref_file.write_text(json.dumps(ref, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    n_metrics = sum(len(cell["metrics"]) for cell in ref["cells"].values())
    print(f"wrote {ref_file} ({len(ref['cells'])} cells, {n_metrics} metric references)")


def report(all_rows: list[Comparison], drift: Sequence[str], names: Sequence[str], explicit: bool) -> int:
    """Print the verdict, provenance notes and the rows outside their band; the exit code."""
    unused: list[str] = []
    if not explicit:
        uncovered, unused = coverage(names)
        all_rows = all_rows + uncovered
    print(verdict(all_rows))
    for note in drift:
        print(note)
    outside = [c for c in all_rows if c.status != "ok"]
    if outside:
        print(render(outside))
    if unused:
        print(f"note: registered tasks that no suite uses yet (not a track, not checked): {', '.join(unused)}")
    bad = [c for c in all_rows if c.failing]
    if bad:
        if any(c.status != "UNCOVERED" for c in bad):
            print("If the change is intended, accept it with: python run_benchmark.py regress --update")
        return 1
    return 0


def _stop_message(update: bool, keep: str | Path | None, written: Sequence[Path]) -> str:
    """What an interrupted regress leaves behind."""
    kept = f"the records run so far are under {keep}" if keep is not None else "its records were temporary"
    if not update:
        return f"regress stopped: {kept}; nothing was compared"
    refs = ", ".join(str(p) for p in written) or "none"
    return f"regress stopped: {kept}; references rewritten before the stop: {refs}"


def verdict(rows: Sequence[Comparison]) -> str:
    """The first line regress prints: pass/fail, comparisons, how many left their band and how."""
    outside = [c for c in rows if c.status != "ok"]
    word = "FAIL" if any(c.failing for c in rows) else "OK"
    line = f"regress: {word}: {len(rows)} comparisons, {len(outside)} outside tolerance"
    if outside:
        kinds = [*FAILING, "improved"]
        line += " (" + ", ".join(f"{sum(c.status == s for c in outside)} {s}" for s in kinds
                                 if any(c.status == s for c in outside)) + ")"
    if any(c.status == "improved" for c in rows) and word == "OK":
        line += "; improvements pass, regress --update accepts them"
    return line


def cmd_regress(a: argparse.Namespace) -> int:
    """`regress` verb."""
    return regress(a.suites or None, a.update, a.overrides, a.jobs, a.reference_dir, a.keep)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `regress` verb with the CLI."""
    p = sub.add_parser("regress", help="run the CI suite and compare its metrics with results/reference/")
    p.add_argument("--suite", dest="suites", action="append", default=[], metavar="NAME",
                   help="suite (name or YAML path) with a regress: section; default: all such suites")
    p.add_argument("--update", action="store_true", help="rewrite the references from this run (on purpose)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key for every cell (e.g. train.lr=0 to see a regression)")
    p.add_argument("--jobs", type=int, default=2, help="cells in parallel (joblib processes)")
    p.add_argument("--reference-dir", default=str(REFERENCE_DIR), help="where <suite>.json references live")
    p.add_argument("--keep", default=None, metavar="DIR",
                   help="write the run's records under DIR instead of a temporary directory")
    p.set_defaults(handler=cmd_regress)
