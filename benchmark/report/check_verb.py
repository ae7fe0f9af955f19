"""The ``check`` verb: how many of a store's cells converged, collapsed (:mod:`benchmark.guard`) and
learned (:mod:`benchmark.learned`, against the chance reference of each setting).

``check SUITE [--scale S]`` reads the newest record of each of the suite's cells and prints
the cells, the failed ones, and the converged share, then up to ``--show`` unconverged cells
with the reason. ``check`` with no suite does it for every store under ``--results``.
It exits 0: a store that did not converge is a finding to read, not a broken command.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tabulate import tabulate

from benchmark.errors import BenchmarkError
from benchmark.guard import GuardCounts, count
from benchmark.learned import LEARNED_SES
from benchmark.report.flags import LearningCounts, count_learning
from benchmark.record import Record


def _current(suite: Any, scale: str, stored: list[Record]) -> tuple[int, int]:
    """(cells whose newest record in ``stored`` measures the suite as it is now, cells the suite
    runs at ``scale``): how far a re-run in slices has come; the sweep runs the difference."""
    from benchmark.sweep import applicable, current_cells

    cells = [c for c in suite.cells(scale, validate=False) if applicable(c)]
    done, _ = current_cells(cells, stored)
    return len(done), len(cells)


Row = tuple[str, str, GuardCounts, tuple[int, int], LearningCounts, bool]


def _rows(results: str, suites: list[str], scale: str | None) -> list[Row]:
    from benchmark.report.suite_tables import suite_records
    from benchmark.results import ResultStore
    from benchmark.sweep import load_suite

    out = []
    for name in suites:
        suite = load_suite(name)
        scales = [scale] if scale else sorted(p.stem for p in Path(results, suite.name).glob("*.jsonl"))
        for s in scales:
            stored = ResultStore(suite.results_path(results, s)).read()  # once: a KG store is large
            records = suite_records(suite, s, results, stored)
            if records:
                out.append((suite.name, s, count(records), _current(suite, s, stored), count_learning(records),
                            bool(suite.spec.get("fixed_budget"))))
    return out


def _stored_suites(results: str) -> list[str]:
    from benchmark.sweep import SUITES_DIR

    known = {p.stem for p in SUITES_DIR.glob("*.yaml")}
    return sorted(p.name for p in Path(results).iterdir() if p.is_dir() and p.name in known) if Path(results).is_dir() else []


def cmd_check(a: argparse.Namespace) -> int:
    suites = [a.suite] if a.suite else _stored_suites(a.results)
    rows = _rows(a.results, suites, a.scale)
    if not rows:
        where = f"suite '{a.suite}'" if a.suite else "any suite"
        raise BenchmarkError(f"no records for {where} in {a.results}/")
    table = [[name, scale, c.cells, c.failed, c.judged, "fixed budget" if fixed else c.converged,
              "n/a" if not c.judged or fixed else f"{c.converged_share:.0%}",
              f"{len(c.collapsed)} of {c.spread_judged}" if c.spread_judged else "n/a",
              f"{lc.learned} of {lc.judged}" if lc.judged else "n/a",
              f"{now} of {total}"] for name, scale, c, (now, total), lc, fixed in rows]
    print(tabulate(table, headers=["suite", "scale", "cells", "failed", "judged", "converged", "share", "collapsed",
                                   "learned", "current"], tablefmt="github"))
    print("collapsed: cells whose score spread is below the guard's epsilon, of the cells it can judge: those "
          "whose records carry a spread, and KG records made before it whose hits@1 shows distinct scores "
          "(n/a: none can be judged)")
    print(f"learned: cells whose best validation score beats their setting's chance reference by {LEARNED_SES:g} "
          "standard errors (from the validation size) and rose above the first evaluation, of the cells it can "
          "judge (n/a: the store has no chance reference and no curve failed to rise)")
    print("current: the suite's cells whose newest record measures the suite as it is now (same protocol and "
          "config); `sweep` runs the others, and the counts above include their older records until it does")
    for name, scale, c, _, lc, fixed in rows:
        for rec in c.collapsed[: a.show]:
            print(f"  {name}[{scale}] collapsed: {rec.params} seed {rec.seed}")
        for rec, v in ([] if fixed else c.unconverged[: a.show]):
            print(f"  {name}[{scale}] not converged: {rec.params} seed {rec.seed}: {v.reason}")
        if not fixed and len(c.unconverged) > a.show:
            print(f"  {name}[{scale}]: {len(c.unconverged) - a.show} more not converged")
        for rec, why in lc.unlearned[: a.show]:
            print(f"  {name}[{scale}] not learned: {rec.params} seed {rec.seed}: {why}")
        if len(lc.unlearned) > a.show:
            print(f"  {name}[{scale}]: {len(lc.unlearned) - a.show} more not learned")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `check` verb with the CLI."""
    p = sub.add_parser("check", help="how many of a store's cells converged (best round not in the last 10%% of "
                                     "rounds, validation no longer rising) and how many collapsed")
    p.add_argument("suite", nargs="?", help="a suite (default: every suite with a store under --results)")
    p.add_argument("--scale", choices=("tiny", "small", "paper"))
    p.add_argument("--results", default="results")
    p.add_argument("--show", type=int, default=5, help="unconverged cells to list per store")
    p.set_defaults(handler=cmd_check)
