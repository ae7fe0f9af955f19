"""Equal-budget tuning on validation data: one Optuna study per (method, setting, scale).

Why: a ranking of untuned defaults measures the defaults, and a method whose defaults were
chosen at another scale is handicapped at ours. Every method, the papers' own and the
reference rows alike, gets the same number of trials (``budget``); the study's first trial
is the suite's own setting (the paper's hyperparameters where the suite follows the paper),
so tuning can only improve on it.

* TPE sampling (seeded) and a median pruner fed the per-round validation curve through the
  engine's ``on_eval`` hook: a trial below the median of earlier trials at the same round
  stops there.
* The objective is the best validation score of the primary metric. No test number is read:
  the engine's hook sees validation only, and the objective reads ``val/<primary>`` alone
  (``tests/test_tune.py`` changes every test score and finds every trial bit-identical).
* Studies live in Optuna's journal file storage, ``results/tuning/<suite>/<scale>.journal``:
  append-only text, so a killed ``tune`` resumes with the trials it finished (a trial the kill
  interrupted is marked failed and not counted) and runs only the rest of the budget. One
  process writes a journal at a time.
* The chosen parameters go to ``results/tuning/<suite>/<scale>.yaml``, one entry per study,
  with the trial, its validation score and the budget; every sweep of the suite runs a
  finished study's choice (``benchmark/tuned.py``).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from benchmark import registry as R
from benchmark.cell import Cell
from benchmark.config import build_run_config, deep_merge, expand_dotted
from benchmark.errors import BenchmarkError
from benchmark.record import Record
from benchmark.safe_yaml import loads
from benchmark.tune.space import Dimension, current_values, search_space
from benchmark.tuned import study_name, tuning_paths

DEFAULT_BUDGET = 20           # trials per study: the same for every method
PRUNE_STARTUP_TRIALS = 5      # trials that run to the end before the pruner judges any
PRUNE_WARMUP_ROUNDS = 5       # rounds of a trial before it can be pruned


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:  # pragma: no cover - a dependency of the package
        raise BenchmarkError("tuning needs optuna: pip install optuna") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass
class StudyResult:
    """What one study chose, and how much of its budget it has used."""

    name: str
    budget: int
    finished: int
    params: dict[str, Any] = field(default_factory=dict)
    value: float | None = None
    trial: int | None = None
    pruned: int = 0
    space: list[str] = field(default_factory=list)


def _open(journal: Path, name: str, seed: int) -> Any:
    optuna = _optuna()
    journal.parent.mkdir(parents=True, exist_ok=True)
    from optuna.storages.journal import JournalFileBackend

    storage = optuna.storages.JournalStorage(JournalFileBackend(str(journal)))
    return optuna.create_study(
        study_name=name, storage=storage, direction="maximize", load_if_exists=True,
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=PRUNE_STARTUP_TRIALS,
                                           n_warmup_steps=PRUNE_WARMUP_ROUNDS))


def _finished(study: Any) -> list[Any]:
    """Trials that count against the budget: complete, pruned, or failed by their config (a NaN
    loss); not one a kill interrupted."""
    from optuna.trial import TrialState

    return [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            or (t.state == TrialState.FAIL and "failed" in t.user_attrs)]


def _check_same_cell(study: Any, cfg: Any) -> None:
    """A study measures one cell's protocol and config: stamp a new study with their hashes,
    and refuse to add trials to one made under another (its trials would not compare)."""
    from benchmark.results import protocol_hash

    mine = {"protocol": protocol_hash(cfg), "config_hash": cfg.hash()}
    stamped = {k: study.user_attrs.get(k) for k in mine}
    if not study.trials and not any(stamped.values()):
        for k, v in mine.items():
            study.set_user_attr(k, v)
        return
    if stamped != mine:
        raise BenchmarkError(f"study '{study.study_name}' was made for another protocol or config of its cell "
                             f"({stamped} != {mine}); move its journal aside to tune the cell as it is now")


def _abandon_interrupted(study: Any) -> int:
    """Mark the trials a killed run left running as failed (they count for nothing)."""
    from optuna.trial import TrialState

    stale = [t for t in study.trials if t.state == TrialState.RUNNING]
    for t in stale:
        study._storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    return len(stale)


def objective_for(cell: Cell, space: list[Dimension],
                  run: Callable[..., dict[str, Any]] | None = None) -> Callable[[Any], float]:
    """The objective of one study: the cell's config with the trial's values, run with the
    pruner watching the validation curve; returns the best validation score."""
    optuna = _optuna()
    from benchmark.engine import Engine

    primary = f"val/{R.TASKS.get(build_run_config(cell.config).task.name).primary_metric}"

    def default_run(cfg: Any, on_eval: Callable[[int, float], bool]) -> dict[str, Any]:
        return Engine(cfg, on_eval=on_eval).run(resume=False)

    runner = run or default_run

    def objective(trial: Any) -> float:
        params = {d.key: d.suggest(trial) for d in space}
        data = deep_merge(cell.config, expand_dotted(params))
        data.setdefault("train", {})["checkpoint_every"] = 0
        pruned = False

        def on_eval(rnd: int, score: float) -> bool:
            nonlocal pruned
            trial.report(float(score), rnd)
            pruned = trial.should_prune()
            return pruned

        record = Record.from_dict(runner(build_run_config(data), on_eval))
        if not record.ok:
            trial.set_user_attr("failed", str(record.reason)[:300])
            return float("nan")
        if pruned:
            raise optuna.TrialPruned()
        value = record.metrics.get(primary)
        trial.set_user_attr("best_round", int(record.best_round))
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            trial.set_user_attr("failed", f"no finite {primary}")
            return float("nan")
        return float(value)

    return objective


def run_study(cell: Cell, journal: Path, budget: int = DEFAULT_BUDGET, seed: int = 0,
              on_trial: Callable[[StudyResult], None] | None = None,
              run: Callable[..., dict[str, Any]] | None = None, name: str | None = None,
              fixed: frozenset[str] | set[str] = frozenset()) -> StudyResult:
    """Run the study of ``cell`` (its method on its setting; ``name``, else
    :func:`benchmark.tuned.study_name` of the cell) until ``budget`` trials have finished,
    resuming from ``journal``. A method that searches nothing runs one trial. ``fixed``: config
    keys the cell's grid sets (:func:`benchmark.tuned.cell_grid_keys`), never searched, since a
    sweep would not run a choice of them."""
    if budget < 1:
        raise BenchmarkError(f"a tuning budget is at least one trial, got {budget}")
    cfg = build_run_config(cell.config)
    space = [d for d in search_space(cfg) if d.key not in fixed]
    name = name or study_name(cell)
    study = _open(journal, name, seed)
    _check_same_cell(study, cfg)
    _abandon_interrupted(study)
    target = budget if space else 1
    first = current_values(cfg, space)
    left_out = sorted({d.key for d in space} - set(first))
    if left_out and not study.trials:
        warnings.warn(f"{name}: the suite's own {', '.join(left_out)} lie outside the searched ranges; "
                      f"the first trial samples them", stacklevel=2)
    if not study.trials:
        study.enqueue_trial(first, skip_if_exists=True)
    objective = objective_for(cell, space, run)
    while len(_finished(study)) < target:
        study.optimize(objective, n_trials=1, catch=())
        if on_trial is not None:
            on_trial(summarize(study, name, budget, space))
    return summarize(study, name, target, space)


def summarize(study: Any, name: str, budget: int, space: list[Dimension]) -> StudyResult:
    from optuna.trial import TrialState

    done = _finished(study)
    complete = [t for t in done if t.state == TrialState.COMPLETE]
    best = max(complete, key=lambda t: (t.value, -t.number)) if complete else None
    return StudyResult(name=name, budget=budget, finished=len(done), space=[d.key for d in space],
                       params=dict(best.params) if best else {}, value=best.value if best else None,
                       trial=best.number if best else None,
                       pruned=sum(t.state == TrialState.PRUNED for t in done))


def write_choices(path: Path, results: list[StudyResult]) -> None:
    """Merge the studies' choices into the suite's chosen-parameters YAML (atomically)."""
    data: dict[str, Any] = {}
    if path.is_file():
        data = loads(path.read_text(encoding="utf-8"), str(path)) or {}
    for r in results:
        data[r.name] = {"params": r.params, "value": r.value, "trial": r.trial, "trials": r.finished,
                        "budget": r.budget, "pruned": r.pruned, "searched": r.space}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["DEFAULT_BUDGET", "StudyResult", "objective_for", "run_study", "study_name",
           "tuning_paths", "write_choices"]
