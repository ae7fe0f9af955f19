"""The ``tune`` verb: equal-budget studies for a suite's methods on validation data.

``tune SUITE [--scale S] [--only KEY=VALUE]... [--method NAME]... [--trials N]`` runs one study
per (method, setting) of the selected cells, on the suite's first seed, every method with the
same ``--trials`` budget (the reference rows included), and writes the choices to
``results/tuning/<suite>/<scale>.yaml``. A killed ``tune`` resumes from its journal.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from benchmark.cell import Cell
from benchmark.errors import ConfigError
from benchmark.tune.study import DEFAULT_BUDGET, StudyResult, run_study, write_choices
from benchmark.tuned import cell_grid_keys, control_keys, study_name, tuning_paths


def study_cells(suite: Any, scale: str, only: dict[str, Any], methods: list[str]) -> dict[str, Cell]:
    """One cell per (method, setting), by study name: the selected cells at the suite's first
    seed (applicable ones, not a control cell: a control runs its setting's choice), restricted
    to ``methods`` when given."""
    from benchmark.sweep import applicable, select_cells

    ignored = control_keys(suite)
    cells = [c for c in select_cells(suite.cells(scale), only) if c.seed == suite.seeds[0] and applicable(c)
             and not any(k in c.params for k in ignored)]
    if methods:
        known = sorted({c.algorithm for c in cells})
        for m in methods:
            if m not in known:
                raise ConfigError(f"--method {m}: not a method of the selected cells; they run {', '.join(known)}")
        cells = [c for c in cells if c.algorithm in methods]
    seen: dict[str, Cell] = {}
    for c in cells:
        seen.setdefault(study_name(c, ignored), c)
    return seen


def tune_suite(suite_name: str, scale: str | None = None, only: dict[str, Any] | None = None,
               methods: list[str] | None = None, budget: int = DEFAULT_BUDGET, results_dir: str | Path = "results",
               seed: int = 0, progress: bool = True) -> list[StudyResult]:
    """Run (or resume) every study of the selection; returns their results, also written to YAML."""
    from benchmark.sweep import load_suite

    suite = load_suite(suite_name)
    scale = scale or suite.default_scale
    cells = study_cells(suite, scale, only or {}, list(methods or []))
    journal, chosen = tuning_paths(results_dir, suite.name, scale)
    bar = tqdm(total=len(cells) * budget, desc=f"tune {suite.name}[{scale}]", unit="trial", disable=not progress)
    results = []
    for name, cell in cells.items():
        start = bar.n

        def tick(r: StudyResult, start: int = start) -> None:
            bar.n = start + r.finished
            best = "-" if r.value is None else f"{r.value:.4f}"
            bar.set_postfix_str(f"{r.name} {r.finished}/{r.budget} best {best}")
            bar.refresh()

        result = run_study(cell, journal, budget, seed, on_trial=tick, name=name,
                           fixed=frozenset(cell_grid_keys(suite, cell)))
        bar.n = start + budget
        bar.refresh()
        results.append(result)
        write_choices(chosen, [result])  # after each study: a kill loses at most the one in flight
    bar.close()
    return results


def cmd_tune(a: argparse.Namespace) -> int:
    from benchmark.config import parse_override

    results = tune_suite(a.suite, a.scale, dict(parse_override(o) for o in a.only), a.methods, a.trials,
                         a.results, a.seed, progress=True)
    for r in results:
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.params.items())
        best = "no complete trial" if r.value is None else f"best validation {r.value:.4f} (trial {r.trial})"
        print(f"{r.name}: {r.finished} trials ({r.pruned} pruned), {best}: {shown or 'nothing searched'}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `tune` verb with the CLI."""
    p = sub.add_parser("tune", help="equal-budget Optuna studies of a suite's methods on validation data")
    p.add_argument("suite")
    p.add_argument("--scale", choices=("tiny", "small", "paper"))
    p.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                   help="tune only the cells with this grid value (repeatable), e.g. --only setting=dy")
    p.add_argument("--method", dest="methods", action="append", default=[], metavar="NAME",
                   help="tune only this method (repeatable; default: every method of the selection)")
    p.add_argument("--trials", type=int, default=DEFAULT_BUDGET,
                   help=f"trials per study, the same for every method (default {DEFAULT_BUDGET})")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    p.add_argument("--results", default="results", help="results directory (studies under results/tuning/)")
    p.set_defaults(handler=cmd_tune)


__all__ = ["add_parser", "study_cells", "tune_suite"]
