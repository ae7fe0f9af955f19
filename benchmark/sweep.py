"""Suites -> cells -> records: expansion, resumable parallel execution, failure capture.

A suite YAML names a grid of run-config overrides, the seeds, per-scale overrides and the
report layout. Each (grid point, seed) is a *cell* with a stable id; a cell whose record
is already in the store is skipped, so a killed sweep re-run does only what is missing.
Workers append their own record the moment a cell finishes (atomic appends), so a kill
loses at most the cells in flight. A worker claims a cell before running it (see
:mod:`benchmark.claims`) and re-reads the store once it holds the claim, so two sweeps into
one store run every cell once; a cell claimed by a live sweep is waited for, not run again.

Two grid forms besides dotted config keys:

* a *named axis*: a grid key without a dot that ``axes:`` defines. Each value is a label
  whose config overrides live under ``axes.<key>.<label>``, with optional per-scale entries
  (``tiny`` / ``small`` / ``paper``). A paper column such as "DY" is one label whose dataset
  differs by scale (synthetic, an offline stand-in, the paper's data), so tables key on the
  label and the cell id stays the same whatever the label maps to.
* a *list of grids*: the cells are the union of each sub-grid's product (cells that two
  sub-grids share run once), for one-factor-at-a-time sweeps such as "missing rate at alpha
  0.5, then alpha at missing rate 0.3" without the full product.

A cell whose algorithm does not declare the cell's task (``Algorithm.tasks``) is not run
and not recorded: tables print N/A for it (see :func:`applicable`).

``control`` names a control condition the sweep also runs (``where: {missing.content:
shuffle}`` with a ``label``): its cells come from their own sub-grid, tables print their
mean in brackets beside the matching cell instead of averaging them in, and figures leave
them out (see :mod:`benchmark.report.tables`).

``isolate`` (``sweep --isolate``, or ``isolate: true`` in a suite) runs every cell in a
fresh interpreter that exits after it, so the peak memory a record states is that cell's
own and not a high-water mark left by earlier cells in a pooled worker. Efficiency suites
set it; it costs a torch import (a few seconds) per cell.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import multiprocessing
import os
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from joblib import Parallel, delayed
from tqdm.auto import tqdm

from benchmark.backends import SWEEP_BACKENDS, sweep_backend
from benchmark.claims import try_claim
from benchmark.config import build_run_config, deep_merge, expand_dotted, load_yaml
from benchmark.errors import ConfigError, closest
from benchmark.results import GIT_STATE_ENV, ResultStore, git_state, now_iso
from benchmark.threads import threads_per_job

SUITES_DIR = Path(__file__).with_name("suites")
SCALES = ("tiny", "small", "paper")
CLAIM_POLL_S = 2.0  # how often a sweep looks again at cells another sweep holds
SUITE_KEYS = ("name", "description", "base", "grid", "axes", "seeds", "scales", "default_scale", "table",
              "tables", "plots", "track", "paper_note", "regress", "stats", "isolate", "control", "resources")

log = logging.getLogger(__name__)


@dataclass
class Cell:
    """One run of a suite: grid values, seed, and the merged run config mapping."""

    suite: str
    scale: str
    params: dict[str, Any]
    seed: int
    config: dict[str, Any]

    @property
    def cell_id(self) -> str:
        key = json.dumps({"suite": self.suite, "scale": self.scale, "params": self.params, "seed": self.seed},
                         sort_keys=True, default=str)
        return hashlib.sha256(key.encode()).hexdigest()[:16]

    @property
    def algorithm(self) -> str:
        return str((self.config.get("algorithm") or {}).get("name", "fedavg"))

    @property
    def task(self) -> str:
        return str((self.config.get("task") or {}).get("name", "node_cls"))


def applicable(cell: Cell) -> bool:
    """False when the cell's algorithm is registered and does not declare the cell's task.

    Such a cell is N/A by definition (a prototype method has no link-prediction head): it is
    neither run nor recorded as failed, and tables print N/A for it. An unregistered
    algorithm counts as applicable, so its cell fails loudly instead of vanishing.
    """
    from benchmark import registry as R

    R.load_plugins()
    if cell.algorithm not in R.ALGORITHMS:
        return True
    return cell.task in tuple(getattr(R.ALGORITHMS.get(cell.algorithm), "tasks", ()) or ())


@dataclass
class Suite:
    name: str
    path: Path
    spec: dict[str, Any]
    grid: dict[str, list[Any]] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [0])
    # A paper table is often not one product (S-Ind takes no imputer; a sensitivity figure
    # varies one hyperparameter at a time), so ``grid`` may be a list of sub-grids whose
    # products are unioned. ``grid`` above is then the merged view (every key, every value).
    grids: list[dict[str, list[Any]]] | None = None
    # named axes: axis -> label -> config overrides (with optional per-scale entries)
    axes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def default_scale(self) -> str:
        return self.spec.get("default_scale", "small")

    def results_path(self, results_dir: str | Path, scale: str) -> Path:
        return Path(results_dir) / self.name / f"{scale}.jsonl"

    def _axis_overrides(self, key: str, label: Any, scale: str) -> dict[str, Any]:
        """Config overrides of one named-axis label at one scale (common part, then the scale's)."""
        entry = self.axes[key][str(label)] or {}
        common = {k: v for k, v in entry.items() if k not in SCALES}
        return deep_merge(expand_dotted(common), expand_dotted(entry.get(scale) or {}))

    def cells(self, scale: str | None = None, validate: bool = True) -> list[Cell]:
        """Every (grid point x seed) cell, each config validated before anything runs.

        Merge order (later wins): base, scales[scale], named-axis labels (in grid order),
        dotted grid values, seed. ``validate=False`` skips building the configs (for callers
        that check cells one by one).
        """
        scale = scale or self.default_scale
        if scale not in SCALES:
            raise ConfigError(f"unknown scale '{scale}'{closest(scale, SCALES)}; valid: {', '.join(SCALES)}")
        scales = self.spec.get("scales") or {}
        base = deep_merge(expand_dotted(self.spec.get("base") or {}), expand_dotted(scales.get(scale) or {}))
        out: list[Cell] = []
        seen: set[str] = set()
        for grid in self.grids or [self.grid]:
            keys = list(grid)
            for values in itertools.product(*(grid[k] for k in keys)):
                params = dict(zip(keys, values))
                over: dict[str, Any] = {}
                for k, v in params.items():
                    if k in self.axes:
                        over = deep_merge(over, self._axis_overrides(k, v, scale))
                over = deep_merge(over, expand_dotted({k: v for k, v in params.items() if k not in self.axes}))
                for seed in self.seeds:
                    cfg = deep_merge(base, over)
                    cfg["seed"] = seed
                    cell = Cell(self.name, scale, params, seed, cfg)
                    if cell.cell_id not in seen:  # sub-grids may overlap
                        seen.add(cell.cell_id)
                        out.append(cell)
        if validate:
            for c in out:
                build_run_config(c.config)  # fail on a bad key before any cell runs
        return out


def find_suite(name_or_path: str) -> Path:
    """A suite by name (benchmark/suites/NAME.yaml) or by path."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    candidate = SUITES_DIR / f"{name_or_path}.yaml"
    if candidate.is_file():
        return candidate
    names = sorted(x.stem for x in SUITES_DIR.glob("*.yaml"))
    raise ConfigError(f"unknown suite '{name_or_path}'{closest(name_or_path, names)}; valid: {', '.join(names)}")


def _check_axes(path: Path, axes: Any) -> dict[str, dict[str, Any]]:
    """``axes:`` maps an axis name (no dot) to labels, each a mapping of config overrides."""
    if not isinstance(axes, dict):
        raise ConfigError(f"{path}: 'axes' must map an axis name to {{label: config overrides}}")
    out: dict[str, dict[str, Any]] = {}
    for name, labels in axes.items():
        if "." in str(name):
            raise ConfigError(f"{path}: axis name '{name}' must not contain a dot (dotted keys are config keys)")
        if not isinstance(labels, dict) or not labels:
            raise ConfigError(f"{path}: axes.{name} must map labels to config overrides")
        for label, entry in labels.items():
            if entry is not None and not isinstance(entry, dict):
                raise ConfigError(f"{path}: axes.{name}.{label} must be a mapping of config overrides")
            for sc in SCALES:
                if entry and entry.get(sc) is not None and not isinstance(entry[sc], dict):
                    raise ConfigError(f"{path}: axes.{name}.{label}.{sc} must be a mapping of config overrides")
        out[str(name)] = {str(label): entry for label, entry in labels.items()}
    return out


_TOP_KEYS = ("seed", "dataset", "partition", "missing", "split", "task", "model", "algorithm", "train", "output")


def _check_axis_values(path: Path, grid: dict[str, list[Any]], axes: dict[str, dict[str, Any]]) -> None:
    """Every value of an axis key must be a defined label; a dotless key must be an axis."""
    for key, values in grid.items():
        if key in axes:
            for v in values:
                if str(v) not in axes[key]:
                    raise ConfigError(f"{path}: grid value '{v}' of axis '{key}' is not defined under axes.{key}"
                                      f"{closest(str(v), list(axes[key]))}; defined: {', '.join(axes[key])}")
        elif "." not in key and key not in _TOP_KEYS:
            raise ConfigError(f"{path}: grid key '{key}' is neither a dotted config key nor an axis"
                              f"{closest(key, list(axes))}; axes: {', '.join(axes) or '(none)'}")


def _check_control(path: Path, control: Any, grid: dict[str, list[Any]]) -> None:
    """A suite's ``control`` must name grid keys and values the grid runs, or it controls nothing."""
    if control is None:
        return
    where = control.get("where") if isinstance(control, dict) else None
    if not isinstance(where, dict) or not where or set(control) - {"where", "label"}:
        raise ConfigError(f"{path}: 'control' must be a mapping with 'where' (grid key -> value) and optional "
                          f"'label', got {control!r}")
    for key, value in where.items():
        if key not in grid:
            raise ConfigError(f"{path}: control key '{key}' is not a grid key{closest(str(key), list(grid))}")
        if value not in grid[key]:
            raise ConfigError(f"{path}: control value {key}={value!r} is in no sub-grid; the sweep would never run it")


def load_suite(name_or_path: str) -> Suite:
    path = find_suite(name_or_path)
    spec = load_yaml(path)
    for k in spec:
        if k not in SUITE_KEYS:
            raise ConfigError(f"{path}: unknown suite key '{k}'{closest(k, SUITE_KEYS)}; valid: {', '.join(SUITE_KEYS)}")
    axes = _check_axes(path, spec.get("axes") or {})
    raw = spec.get("grid") or {}
    grids = raw if isinstance(raw, list) and raw else [raw]
    for g in grids:
        if not isinstance(g, dict) or not all(isinstance(v, list) and v for v in g.values()):
            raise ConfigError(f"{path}: 'grid' must map dotted config keys to non-empty lists "
                              "(or be a list of such mappings, whose products are unioned)")
        _check_axis_values(path, g, axes)
    grid: dict[str, list[Any]] = {}
    for g in grids:
        for k, values in g.items():
            grid.setdefault(k, [])
            grid[k] += [v for v in values if v not in grid[k]]
    seeds = spec.get("seeds", [0])
    if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"{path}: 'seeds' must be a list of integers")
    _check_control(path, spec.get("control"), grid)
    return Suite(name=spec.get("name", path.stem), path=path, spec=spec, grid=grid, seeds=seeds,
                 grids=grids if isinstance(raw, list) and raw else None, axes=axes)


def _failed_record(cell: Cell, reason: str, rnd: int = -1) -> dict[str, Any]:
    return {"status": "failed", "error": {"round": rnd, "reason": reason}, "metrics": {}, "seed": cell.seed,
            "timestamp": now_iso()}


def execute_cell(cell: Cell, threads: int = 1) -> dict[str, Any]:
    """Run one cell in this process and return its record (ok or failed); stores nothing."""
    torch.set_num_threads(max(1, threads))
    from benchmark.engine import Engine

    try:
        cfg = build_run_config(cell.config)
        record = Engine(cfg).run()
    except Exception as e:  # noqa: BLE001 - a failing cell is recorded, the sweep goes on
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
        record = _failed_record(cell, f"{type(e).__name__}: {e}{where}")
    return stamp(cell, record)


def stamp(cell: Cell, record: dict[str, Any]) -> dict[str, Any]:
    """The cell's identity on its record (suite, scale, id, grid values, seed, worker)."""
    record.update({"suite": cell.suite, "scale": cell.scale, "cell_id": cell.cell_id, "params": cell.params,
                   "seed": cell.seed, "worker_pid": os.getpid()})
    return record


def failed_cell(cell: Cell, reason: str) -> dict[str, Any]:
    """The record of a cell whose worker died or raised outside the engine."""
    return stamp(cell, _failed_record(cell, reason))


def run_cell(cell: Cell, results_path: str, threads: int = 1) -> dict[str, Any]:
    """Run one cell in this process and append its record (ok or failed) to the store."""
    record = execute_cell(cell, threads)
    ResultStore(results_path).append(record)
    return record


HELD = "held"  # status of a cell another live sweep holds (not a record; never stored)
CELL_SECONDS = "_cell_seconds"  # wall time of a cell run here, data build included (never stored)


def run_claimed_cell(cell: Cell, results_path: str, threads: int, seen: int) -> dict[str, Any]:
    """Claim a cell, then run it unless a record appeared since planning (``seen`` records then).

    Returns the new record, the record another sweep wrote meanwhile, or ``{"status": HELD}``
    while a live process holds the claim.
    """
    claim = try_claim(results_path, cell.cell_id)
    if claim is None:
        return {"status": HELD, "cell_id": cell.cell_id}
    try:
        mine = [r for r in ResultStore(results_path).read() if r.get("cell_id") == cell.cell_id]
        if len(mine) > seen:
            return mine[-1]
        start = time.perf_counter()
        record = run_cell(cell, results_path, threads)  # stored by now; the key below is not
        return {**record, CELL_SECONDS: time.perf_counter() - start}
    finally:
        claim.release()


def run_suite(suite: Suite, scale: str | None = None, jobs: int = 1, results_dir: str | Path = "results",
              retry_failed: bool = False, progress: bool = True,
              overrides: dict[str, Any] | None = None,
              only: dict[str, Any] | None = None,
              isolate: bool | None = None, backend: str = "joblib",
              address: str | None = None) -> tuple[list[dict[str, Any]], int]:
    """Run the cells not yet in the store; returns (all records of this suite+scale, cells run now).

    ``backend`` names a sweep backend (``benchmark.backends.SWEEP_BACKENDS``): ``joblib``
    (local processes, the default) or ``ray`` (Ray tasks; ``address`` joins an existing
    cluster, else a local instance starts). Every backend skips the cells already stored.

    ``only`` restricts the run to cells whose grid values (or ``seed``) equal the given ones,
    e.g. ``{"partition.num_clients": 3}``: a first pass on a small machine; the other cells
    stay missing (the table says so) until a later sweep runs them."""
    scale = scale or suite.default_scale
    if isolate is None:
        isolate = bool(suite.spec.get("isolate", False))
    runner = sweep_backend(backend)
    resources = cell_resources(suite)
    cells = select_cells(suite.cells(scale), only or {})
    if overrides:
        for c in cells:
            c.config = deep_merge(c.config, expand_dotted(overrides))
    store = ResultStore(suite.results_path(results_dir, scale))
    existing = store.read()
    done = {r["cell_id"] for r in existing if r.get("status") == "ok" or not retry_failed}
    na = [c for c in cells if not applicable(c)]
    if na:
        pairs = sorted({f"{c.algorithm}/{c.task}" for c in na})
        log.info("%s[%s]: %d cells N/A (algorithm not defined for the task), not run: %s",
                 suite.name, scale, len(na), ", ".join(pairs))
    na_ids = {c.cell_id for c in na}
    cells = [c for c in cells if c.cell_id not in na_ids]
    todo = [c for c in cells if c.cell_id not in done]
    jobs = max(1, min(jobs, len(todo) or 1))
    threads = threads_per_job(jobs)  # FEDMM_THREADS overrides
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc=f"{suite.name}[{scale}]",
               disable=not progress, unit="cell")
    pinned = os.environ.get(GIT_STATE_ENV)
    if pinned is None:  # workers record the code state the sweep started with (see git_state)
        sha, dirty = git_state()
        os.environ[GIT_STATE_ENV] = f"{sha}:{int(dirty)}"
    try:
        seen = {c.cell_id: sum(r.get("cell_id") == c.cell_id for r in existing) for c in todo}
        _run_until_recorded(runner, todo, str(store.path), threads, jobs, isolate, bar, seen,
                            {"address": address, "resources": resources})
    finally:
        if pinned is None:
            os.environ.pop(GIT_STATE_ENV, None)
    bar.close()
    return latest_records(store.read(), {c.cell_id for c in cells}), len(todo)


def _run_until_recorded(runner: Any, todo: list[Cell], store_path: str, threads: int, jobs: int, isolate: bool,
                        bar: Any, seen: dict[str, int], options: dict[str, Any]) -> None:
    """Run the cells; those another sweep holds are looked at again until they have a record."""
    walls: list[float] = []
    while todo:
        held = runner(todo, store_path, threads, jobs, isolate, bar, seen, walls, **options)
        todo = [c for c in todo if c.cell_id in held]
        if todo:
            bar.set_postfix_str(f"waiting for {len(todo)} cell(s) another sweep runs")
            time.sleep(CLAIM_POLL_S)


def tick(bar: Any, walls: list[float], jobs: int, rec: dict[str, Any]) -> None:
    """One finished cell on the progress bar, with the ETA from finished cells' wall times."""
    if isinstance(rec.get(CELL_SECONDS), float):
        walls.append(rec[CELL_SECONDS])
    bar.update(1)
    bar.set_postfix_str(f"{rec.get('status')}{_eta(walls, bar.total - bar.n, jobs)}")


def cell_resources(suite: Suite) -> dict[str, float]:
    """What one cell asks of a cluster: ``resources: {cpus: 1, gpus: 0.25}`` in the suite
    (a GPU fraction lets several small cells share one GPU); one CPU and no GPU by default."""
    spec = suite.spec.get("resources") or {}
    if not isinstance(spec, dict) or set(spec) - {"cpus", "gpus"}:
        raise ConfigError(f"{suite.path}: 'resources' takes cpus and gpus, e.g. {{cpus: 1, gpus: 0.25}}")
    cpus, gpus = spec.get("cpus", 1), spec.get("gpus", 0)
    if not isinstance(cpus, (int, float)) or not isinstance(gpus, (int, float)) or cpus <= 0 or gpus < 0 \
            or (gpus > 1 and gpus != int(gpus)):
        raise ConfigError(f"{suite.path}: resources.cpus must be > 0 and resources.gpus a fraction in [0, 1] "
                          f"or a whole number, got cpus={cpus!r}, gpus={gpus!r}")
    return {"cpus": float(cpus), "gpus": float(gpus)}


def _eta(walls: list[float], remaining: int, jobs: int) -> str:
    """Remaining time from the mean wall time of the cells finished so far, ``jobs`` at a time."""
    if not walls or remaining <= 0:
        return ""
    secs = sum(walls) / len(walls) * remaining / max(1, jobs)
    return f" eta {int(secs // 3600)}:{int(secs % 3600 // 60):02d}:{int(secs % 60):02d}"


@SWEEP_BACKENDS.register("joblib")
def _run_cells(todo: list[Cell], store_path: str, threads: int, jobs: int, isolate: bool, bar: Any,
               seen: dict[str, int], walls: list[float], **_: Any) -> set[str]:
    """Run the cells (in this process, a pool of fresh processes, or one fresh process each).

    Ticks the bar per finished cell, with an ETA from finished cells' wall times; returns the
    ids of cells another sweep held. Pools never fork (joblib's loky and ``spawn`` start fresh
    interpreters), so several workers may share a GPU the parent process already initialised.
    """
    held: set[str] = set()

    def done(rec: dict[str, Any]) -> None:
        if rec.get("status") == HELD:
            held.add(str(rec["cell_id"]))
            return
        tick(bar, walls, jobs, rec)

    if isolate:
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, max_tasks_per_child=1) as pool:
            futures = [pool.submit(run_claimed_cell, c, store_path, threads, seen[c.cell_id]) for c in todo]
            for fut in as_completed(futures):
                done(fut.result())
    elif jobs == 1:
        for c in todo:
            done(run_claimed_cell(c, store_path, threads, seen[c.cell_id]))
    else:
        gen = Parallel(n_jobs=jobs, backend="loky", return_as="generator_unordered")(
            delayed(run_claimed_cell)(c, store_path, threads, seen[c.cell_id]) for c in todo)
        for rec in gen:
            done(rec)
    return held


def select_cells(cells: list[Cell], only: dict[str, Any]) -> list[Cell]:
    """The cells matching every ``key=value`` of ``only`` (grid keys or ``seed``)."""
    known = {k for c in cells for k in c.params} | {"seed"}
    for k in only:
        if k not in known:
            raise ConfigError(f"--only {k}: not a grid key of this suite{closest(k, sorted(known))}; "
                              f"valid: {', '.join(sorted(known))}")

    def value(c: Cell, k: str) -> Any:
        return c.seed if k == "seed" else c.params.get(k, object())

    return [c for c in cells if all(value(c, k) == v for k, v in only.items())]


def latest_records(records: list[dict[str, Any]], cell_ids: set[str] | None = None) -> list[dict[str, Any]]:
    """The newest record of each cell (a retried cell keeps only its last result)."""
    latest: dict[str, dict[str, Any]] = {}
    for r in records:
        cid = r.get("cell_id")
        if cid is None or (cell_ids is not None and cid not in cell_ids):
            continue
        latest[cid] = r
    return list(latest.values())
