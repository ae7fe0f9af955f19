"""A suite's tables from its records: which specs it declares, their file stems and titles, the
records of one scale's store. The `table` verb, the fidelity summary and the leaderboard all
build a suite's tables through here, so a table and the fidelity score printed about it on
another page come from the same spec and the same records."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmark.record import Record, as_records, latest_records
from benchmark.report.tables import TableOutput, make_table


@dataclass(frozen=True)
class SuiteTableSpec:
    """One ``table:`` (or ``tables:`` entry) of a suite, ready for :func:`make_table`."""

    stem: str  # file name without extension under tables/
    title: str
    spec: dict[str, Any]

    @property
    def ranks_against_paper(self) -> bool:
        """True when the table prints the paper's numbers and ranks its rows (emphasis on), i.e.
        when it has a fidelity score."""
        return bool(self.spec.get("paper")) and self.spec.get("emphasis", True) is not False


@dataclass(frozen=True)
class SuiteTable:
    """A rendered suite table and the stem it is written under."""

    stem: str
    output: TableOutput


def suite_table_specs(suite: Any, scale: str) -> list[SuiteTableSpec]:
    """The suite's table specs: the suite's ``control`` copied in where a spec names none, the
    stem ``<suite>_<scale>`` (``_<i>`` appended when there are several) unless it sets ``stem``,
    and the title (default: the suite's description) with the scale appended."""
    specs = suite.spec.get("tables") or ([suite.spec["table"]] if "table" in suite.spec else [])
    out = []
    for i, spec in enumerate(specs):
        spec = dict(spec)
        if suite.spec.get("control") and "control" not in spec:
            spec["control"] = suite.spec["control"]
        stem = spec.pop("stem", None) or (f"{suite.name}_{scale}" if len(specs) == 1 else f"{suite.name}_{scale}_{i}")
        title = spec.pop("title", suite.spec.get("description", suite.name))
        out.append(SuiteTableSpec(stem=str(stem), title=f"{title} [scale: {scale}]", spec=spec))
    return out


#: said in the caption of a table whose store is pending a re-run: the suite (and so the
#: caption's budget or protocol) has moved on, its records have not yet
PENDING_NOTE = ("Pending re-run (results/pending_rerun.json): these records predate a change to the suite, "
                "so a setting this caption states may not be theirs; each record's provenance holds its own config.")


def make_suite_tables(suite: Any, records: list[Record], scale: str, pending: bool = False) -> list[SuiteTable]:
    """Every table of the suite, rendered from ``records``; with ``pending`` (the store is listed
    in ``results/pending_rerun.json``) each caption ends with :data:`PENDING_NOTE`."""
    specs = suite_table_specs(suite, scale)
    if suite.spec.get("fixed_budget"):  # a cost or budget suite: its tables judge no convergence
        specs = [replace(t, spec={**t.spec, "fixed_budget": True}) for t in specs]
    if pending:
        specs = [replace(t, spec={**t.spec, "caption": _with_note(t.spec.get("caption"))}) for t in specs]
    tuned = tuning_note(suite.name, scale, records)
    if tuned:
        specs = [replace(t, spec={**t.spec, "caption": _with_note(t.spec.get("caption"), tuned)}) for t in specs]
    return [SuiteTable(t.stem, make_table(records, t.spec, title=t.title)) for t in specs]


def _with_note(caption: Any, note: str = PENDING_NOTE) -> str:
    text = str(caption or "").strip()
    return f"{text.rstrip('.')}. {note}" if text else note


def tuning_note(suite: str, scale: str, records: list[Any]) -> str:
    """What a caption says of tuning when some of its records ran a study's choice: the budget
    (trials per study, the same for every method), where the choices are, and which methods
    still run the suite's own settings. Empty when no record is tuned."""
    ok = [r for r in as_records(records) if r.ok]
    tuned = [r for r in ok if isinstance(r.tuning, dict)]
    if not tuned:
        return ""
    budgets = sorted({int(r.tuning.get("budget", 0)) for r in tuned})
    budget = " or ".join(str(b) for b in budgets)
    untuned = sorted({str((r.config.get("algorithm") or {}).get("name", "?")) for r in ok if r.tuning is None})
    rest = f"; not yet tuned (the suite's own settings): {', '.join(untuned)}" if untuned else ""
    return (f"Tuned: each method's hyperparameters in each column are the choice of one Optuna study (TPE sampler, "
            f"median pruning, first trial the suite's own setting) of {budget} trials on validation data at the "
            f"suite's first seed, the same budget for every method, the reference rows included "
            f"(results/tuning/{suite}/{scale}.yaml){rest}.")


def is_pending(suite: Any, scale: str, results_dir: str | Path) -> bool:
    """Whether ``results/pending_rerun.json`` lists the suite's store at ``scale``: its records
    then predate the suite, and its tables say so. The file names suites and means their
    small-scale stores (the ones re-run in slices), so another scale is never pending."""
    from benchmark.results import PENDING_SCALE, pending_stores

    return scale == PENDING_SCALE and suite.name in pending_stores(results_dir)


def suite_records(suite: Any, scale: str, results_dir: str | Path,
                  stored: list[Record] | None = None) -> list[Record]:
    """The newest record of each of the suite's cells at ``scale`` in ``results_dir`` (none when
    the store does not exist), methods run beside the suite's included; of each cell the store
    holds while the store is pending a re-run (``results/pending_rerun.json``): until the re-run lands it reports what it was made from.
    ``stored``: the store's records when the caller has read them already."""
    from benchmark.results import ResultStore

    from benchmark.sweep import beside_cell_ids

    if stored is None:
        stored = ResultStore(suite.results_path(results_dir, scale)).read()
    ids = None if is_pending(suite, scale, results_dir) else {c.cell_id for c in suite.cells(scale)}
    if ids is not None:  # and every method run beside the suite's (sweep --with-method, submit)
        ids |= beside_cell_ids(suite, scale, stored)
    return latest_records(stored, ids)
