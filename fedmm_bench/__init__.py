"""FedMM-Bench from Python: run a config, sweep a suite, load a store as a DataFrame.

    from fedmm_bench import run, load_results

    record = run("demo", algorithm__name="fedavg", train__rounds=3)
    print(record.status, record.test["accuracy"], record.guard["converged"])
    frame = load_results("demo", scale="small")

The same engine, sweep and store as the ``run_benchmark.py`` verbs; this module only turns
Python arguments into a run config and store lines into :class:`Record` objects or a frame.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmark import __version__
from benchmark.record import SCHEMA_VERSION, Record

__all__ = ["run", "sweep", "tune", "load_results", "Record", "SCHEMA_VERSION", "__version__"]


def _dotted(overrides: dict[str, Any]) -> dict[str, Any]:
    """``train__rounds=3`` -> ``{"train.rounds": 3}`` (a keyword cannot hold a dot)."""
    return {key.replace("__", "."): value for key, value in overrides.items()}


def _suite_base(name: str, scale: str) -> dict[str, Any]:
    """A suite's base config merged with one scale's overrides (no grid value, seed 0)."""
    from benchmark.config import deep_merge, expand_dotted
    from benchmark.sweep import load_suite

    spec = load_suite(name).spec
    scales = spec.get("scales") or {}
    return deep_merge(expand_dotted(spec.get("base") or {}), expand_dotted(scales.get(scale) or {}))


def _config_dict(config: Any, scale: str) -> dict[str, Any]:
    from benchmark.config import RunConfig, expand_dotted, load_yaml
    from benchmark.errors import ConfigError
    from benchmark.sweep import find_suite

    if config is None:
        return {}
    if isinstance(config, RunConfig):
        return config.to_dict()
    if isinstance(config, dict):
        return expand_dotted(config)
    if isinstance(config, (str, Path)):
        path = Path(config)
        if path.suffix in (".yaml", ".yml") or path.is_file():
            if not path.is_file():
                raise ConfigError(f"run config {path} not found")
            return expand_dotted(load_yaml(path))
        find_suite(str(config))  # an unknown name is one line listing the suites
        return _suite_base(str(config), scale)
    raise ConfigError(f"run() takes None, a suite name, a YAML path, a dict or a RunConfig, "
                      f"not {type(config).__name__}")


def run(config: Any = None, /, *, scale: str = "tiny", progress: bool = False, **overrides: Any) -> Record:
    """Run one config in this process and return its :class:`Record` (nothing is stored).

    ``config``: None (the defaults), a suite name (its base config at ``scale``), a path to a
    run YAML, a dict (nested or with dotted keys) or a ``RunConfig``. ``overrides`` are config
    keys with ``__`` for the dots (``train__rounds=3``); they win over ``config``.
    """
    import torch

    from benchmark.config import build_run_config, deep_merge, expand_dotted
    from benchmark.engine import Engine
    from benchmark.results import failed_on_non_finite
    from benchmark.threads import threads_per_job

    data = deep_merge(_config_dict(config, scale), expand_dotted(_dotted(overrides)))
    cfg = build_run_config(data)
    torch.set_num_threads(threads_per_job(1))  # what a sweep gives the same cell: same numbers
    record = Engine(cfg, progress=progress).run()
    return Record.from_dict(failed_on_non_finite(record))


def sweep(suite: str, scale: str = "tiny", *, results: str | Path = "results", jobs: int = 1,
          only: dict[str, Any] | None = None, progress: bool = False,
          with_method: str | None = None, tuned: bool = True) -> list[Record]:
    """Run the suite's cells missing from ``results/<suite>/<scale>.jsonl`` (a stored cell is
    skipped) and return the suite's current records, one per cell. ``only`` restricts the
    run to cells with these grid values or seed (``{"partition.num_clients": 3}``);
    ``with_method`` runs only that registered method's cells, one more row beside the suite's;
    ``tuned`` (the default) runs the choices of the suite's finished tuning studies (:func:`tune`)."""
    from benchmark.sweep import load_suite, run_suite

    records, _ = run_suite(load_suite(suite), scale, jobs=jobs, results_dir=results, progress=progress, only=only,
                           with_method=with_method, tuned=tuned)
    return records


def tune(suite: str, scale: str | None = None, *, only: dict[str, Any] | None = None,
         methods: list[str] | None = None, trials: int = 20, results: str | Path = "results",
         seed: int = 0, progress: bool = False) -> dict[str, dict[str, Any]]:
    """Run (or resume) the suite's equal-budget tuning studies (the ``tune`` verb): one Optuna
    study per (method, setting) of the selected cells, ``trials`` each, on validation data.
    Returns ``{study name: {"params", "value", "trial", "trials", "pruned"}}``; the choices
    are also written to ``results/tuning/<suite>/<scale>.yaml``, which later sweeps run."""
    from benchmark.tune.verb import tune_suite

    done = tune_suite(suite, scale, only or {}, list(methods or []), trials, results, seed, progress)
    return {r.name: {"params": r.params, "value": r.value, "trial": r.trial, "trials": r.finished,
                     "pruned": r.pruned} for r in done}


def load_results(suite: str, scale: str = "small", results: str | Path = "results"):  # -> pandas.DataFrame
    """Every current record of a suite's store as a pandas DataFrame, one row per record:
    the grid values (``algorithm.name`` ...), ``split/metric`` columns, status, seed and
    provenance. A cell re-run later supersedes its older records, as in the tables."""
    from benchmark.errors import DataError
    from benchmark.report.records import records_frame
    from benchmark.results import ResultStore
    from benchmark.record import latest_records
    from benchmark.sweep import load_suite

    path = load_suite(suite).results_path(results, scale)
    records = ResultStore(path).read() if Path(path).is_file() else []
    if not records:
        raise DataError(f"no records for suite '{suite}' at scale {scale} under {results} (looked for {path})")
    return records_frame(latest_records(records))
