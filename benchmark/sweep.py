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

import copy
import itertools
import json
import logging
import math
import multiprocessing
import os
import re
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joblib import Parallel, delayed
from tqdm.auto import tqdm

from benchmark.backends import SWEEP_BACKENDS, sweep_backend
# Cell, applicable and run_cell are read from here by other modules; they live in benchmark.cell
from benchmark.cell import CELL_SECONDS, HELD, Cell, applicable, run_cell, tick  # noqa: F401
from benchmark.claims import try_claim
from benchmark.config import (NAME_HELP, NAME_PATTERN, build_run_config, check_output_paths, deep_merge, expand_dotted,
                              load_yaml)
from benchmark.errors import ConfigError, closest
from benchmark.grid_keys import check_params_describe_config, refuse_grid_overrides
from benchmark.results import GIT_STATE_ENV, ResultStore, git_state, stale_reasons
from benchmark.tuned import apply_choices
from benchmark.record import Record, latest_records
from benchmark.safe_yaml import clip, short_repr
from benchmark.stopping import as_interrupted, stop_on_signals
from benchmark.threads import threads_per_job

SUITES_DIR = Path(__file__).with_name("suites")
SCALES = ("tiny", "small", "paper")
CLAIM_POLL_S = 2.0  # how often a sweep looks again at cells another sweep holds
SUITE_KEYS = ("name", "description", "base", "grid", "axes", "seeds", "scales", "default_scale", "table",
              "tables", "plots", "track", "paper_note", "regress", "stats", "isolate", "control", "resources",
              "references", "fixed_budget")
# The type of every suite key (a key written with no value counts as absent); their contents
# are checked below, or where they are used (regress, resources, table and plot specs).
SUITE_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "description": (str,), "track": (str,), "paper_note": (str,), "stats": (str,),
    "default_scale": (str,), "base": (dict,), "grid": (dict, list), "axes": (dict,), "seeds": (list,),
    "scales": (dict,), "table": (dict,), "tables": (list,), "plots": (list,), "regress": (dict,),
    "isolate": (bool,), "control": (dict,), "resources": (dict,), "references": (list,),
    "fixed_budget": (bool,)}
# A grid is a product: a few extra values multiply the cells, so a typo must not expand forever.
MAX_CELLS = 20_000          # cells of one suite at one scale (the largest suite has ~500)
MAX_GRID_VALUES = 1_000     # values of one grid key, sub-grids of one grid, seeds

log = logging.getLogger(__name__)






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

    def axis_overrides(self, key: str, label: Any, scale: str) -> dict[str, Any]:
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
                        over = deep_merge(over, self.axis_overrides(k, v, scale))
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
    """A suite by name (benchmark/suites/NAME.yaml, NAME an identifier) or by path."""
    p = Path(name_or_path)
    try:
        if p.suffix in (".yaml", ".yml") and p.is_file():
            return p
        candidate = SUITES_DIR / f"{name_or_path}.yaml"
        if re.fullmatch(NAME_PATTERN, name_or_path) and candidate.is_file():
            return candidate
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte: no suite
        pass
    names = sorted(x.stem for x in SUITES_DIR.glob("*.yaml"))
    raise ConfigError(f"unknown suite '{clip(name_or_path)}'{closest(name_or_path, names)}; "
                      f"valid: {', '.join(names)}")


def _check_name(path: Path, what: str, name: Any) -> None:
    """A name that becomes a file or folder name must be an identifier (no '..', no '/')."""
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        raise ConfigError(f"{path}: {what} must be {NAME_HELP}, got {short_repr(name)}")


def _check_types(path: Path, spec: dict[Any, Any]) -> None:
    """Every key is a suite key and holds a value of its type."""
    words = {str: "a string", dict: "a mapping", list: "a list", bool: "true or false"}
    for k, value in spec.items():
        if k not in SUITE_KEYS:
            raise ConfigError(f"{path}: unknown suite key '{clip(str(k))}'{closest(str(k), SUITE_KEYS)}; "
                              f"valid: {', '.join(SUITE_KEYS)}")
        kinds = SUITE_TYPES[k]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ConfigError(f"{path}: '{k}' must be {' or '.join(words[t] for t in kinds)}, "
                              f"got {short_repr(value)}")


def _check_overrides(path: Path, where: str, value: Any) -> None:
    """Config overrides: every mapping inside has string keys (config keys; a cell id sorts them)."""
    stack = [(where, value)]
    while stack:
        at, v = stack.pop()
        if isinstance(v, dict):
            for k, inner in v.items():
                if not isinstance(k, str):
                    raise ConfigError(f"{path}: {at}: config keys must be strings, got {short_repr(k)}")
                stack.append((f"{at}.{clip(k, 40)}", inner))
        elif isinstance(v, list):
            stack.extend((at, inner) for inner in v)


def _check_scales(path: Path, spec: dict[str, Any]) -> None:
    """``default_scale`` is a scale; ``scales`` maps scales to config overrides."""
    default = spec.get("default_scale", "small")
    if default not in SCALES:
        raise ConfigError(f"{path}: 'default_scale' must be one of {', '.join(SCALES)}, got {short_repr(default)}")
    for sc, over in (spec.get("scales") or {}).items():
        if sc not in SCALES:
            raise ConfigError(f"{path}: unknown scale {short_repr(sc)} under 'scales'{closest(str(sc), SCALES)}; "
                              f"valid: {', '.join(SCALES)}")
        if over is not None and not isinstance(over, dict):
            raise ConfigError(f"{path}: scales.{sc} must be a mapping of config overrides, got {short_repr(over)}")
        _check_overrides(path, f"scales.{sc}", over)


def _check_axes(path: Path, axes: Any) -> dict[str, dict[str, Any]]:
    """``axes:`` maps an axis name (an identifier) to labels, each a mapping of config overrides."""
    if not isinstance(axes, dict):
        raise ConfigError(f"{path}: 'axes' must map an axis name to {{label: config overrides}}")
    out: dict[str, dict[str, Any]] = {}
    for name, labels in axes.items():
        if isinstance(name, str) and "." in name:
            raise ConfigError(f"{path}: axis name '{clip(name)}' must not contain a dot (dotted keys are config keys)")
        _check_name(path, "an axis name", name)
        if not isinstance(labels, dict) or not labels:
            raise ConfigError(f"{path}: axes.{name} must map labels to config overrides")
        for label, entry in labels.items():
            if entry is not None and not isinstance(entry, dict):
                raise ConfigError(f"{path}: axes.{name}.{clip(str(label))} must be a mapping of config overrides")
            for sc in SCALES:
                if entry and entry.get(sc) is not None and not isinstance(entry[sc], dict):
                    raise ConfigError(f"{path}: axes.{name}.{clip(str(label))}.{sc} must be a mapping of "
                                      "config overrides")
            _check_overrides(path, f"axes.{name}.{clip(str(label))}", entry)
        out[name] = {str(label): entry for label, entry in labels.items()}
    return out


_TOP_KEYS = ("seed", "dataset", "partition", "missing", "split", "task", "model", "algorithm", "train", "output")


def _check_axis_values(path: Path, grid: dict[str, list[Any]], axes: dict[str, dict[str, Any]]) -> None:
    """Every value of an axis key must be a defined label; a dotless key must be an axis."""
    for key, values in grid.items():
        if key in axes:
            for v in values:
                if str(v) not in axes[key]:
                    raise ConfigError(f"{path}: grid value '{clip(str(v))}' of axis '{key}' is not defined under "
                                      f"axes.{key}{closest(str(v), list(axes[key]))}; "
                                      f"defined: {clip(', '.join(axes[key]), 300)}")
        elif "." not in key and key not in _TOP_KEYS:
            raise ConfigError(f"{path}: grid key '{clip(key)}' is neither a dotted config key nor an axis"
                              f"{closest(key, list(axes))}; axes: {', '.join(axes) or '(none)'}")


def _check_grids(path: Path, raw: Any, axes: dict[str, dict[str, Any]]) -> list[dict[str, list[Any]]]:
    """``grid``: a mapping of config keys (or axes) to non-empty lists, or a list of such mappings."""
    grids = raw if isinstance(raw, list) and raw else [raw]
    if len(grids) > MAX_GRID_VALUES:
        raise ConfigError(f"{path}: 'grid' has {len(grids)} sub-grids, more than {MAX_GRID_VALUES}")
    for g in grids:
        if not isinstance(g, dict) or not all(isinstance(v, list) and v for v in g.values()):
            raise ConfigError(f"{path}: 'grid' must map dotted config keys to non-empty lists "
                              "(or be a list of such mappings, whose products are unioned)")
        for key, values in g.items():
            if not isinstance(key, str):
                raise ConfigError(f"{path}: grid key {short_repr(key)} must be a string (a dotted config key)")
            if len(values) > MAX_GRID_VALUES:
                raise ConfigError(f"{path}: grid key '{clip(key)}' has {len(values)} values, "
                                  f"more than {MAX_GRID_VALUES}")
            _check_overrides(path, f"grid.{clip(key, 40)}", values)
        _check_axis_values(path, g, axes)
    return grids


def _check_seeds(path: Path, seeds: Any) -> list[int]:
    """A non-empty list of run seeds (each a valid ``seed``)."""
    if not isinstance(seeds, list) or not seeds or len(seeds) > MAX_GRID_VALUES or \
            not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= 2**32 - 1 for s in seeds):
        raise ConfigError(f"{path}: 'seeds' must be a list of 1 to {MAX_GRID_VALUES} integers in [0, 2^32 - 1], "
                          f"got {short_repr(seeds)}")
    return seeds


def _check_cell_count(path: Path, grids: list[dict[str, list[Any]]], seeds: list[int]) -> None:
    """The grid's products times the seeds stay below MAX_CELLS (counted, not expanded)."""
    count = sum(math.prod(len(v) for v in g.values()) for g in grids) * len(seeds)
    if count > MAX_CELLS:
        raise ConfigError(f"{path}: the grid expands to {count} cells, more than {MAX_CELLS}; "
                          "split it into sub-grids or suites")


def _check_reports(path: Path, spec: dict[str, Any]) -> None:
    """``table``/``tables`` entries and ``plots`` entries are mappings; the names that become file
    names (a table's ``stem``, a plot's ``name``) are identifiers."""
    if "table" in spec and "tables" in spec:
        raise ConfigError(f"{path}: give 'table' (one table) or 'tables' (a list), not both")
    tables = spec.get("tables") or ([spec["table"]] if "table" in spec else [])
    for i, t in enumerate(tables):
        if not isinstance(t, dict):
            raise ConfigError(f"{path}: tables[{i}] must be a mapping, got {short_repr(t)}")
        if "stem" in t:
            _check_name(path, f"tables[{i}].stem", t["stem"])
    for i, plot in enumerate(spec.get("plots") or []):
        if not isinstance(plot, dict):
            raise ConfigError(f"{path}: plots[{i}] must be a mapping, got {short_repr(plot)}")
        if "name" in plot:
            _check_name(path, f"plots[{i}].name", plot["name"])
        if not isinstance(plot.get("kind", ""), str):
            raise ConfigError(f"{path}: plots[{i}].kind must be a string, got {short_repr(plot['kind'])}")


def _check_control(path: Path, control: Any, grid: dict[str, list[Any]]) -> None:
    """A suite's ``control`` must name grid keys and values the grid runs, or it controls nothing."""
    if control is None:
        return
    where = control.get("where") if isinstance(control, dict) else None
    if not isinstance(where, dict) or not where or set(control) - {"where", "label"}:
        raise ConfigError(f"{path}: 'control' must be a mapping with 'where' (grid key -> value) and optional "
                          f"'label', got {short_repr(control)}")
    for key, value in where.items():
        if key not in grid:
            raise ConfigError(f"{path}: control key '{clip(str(key))}' is not a grid key"
                              f"{closest(str(key), list(grid))}")
        if value not in grid[key]:
            raise ConfigError(f"{path}: control value {key}={short_repr(value)} is in no sub-grid; "
                              "the sweep would never run it")


def load_suite(name_or_path: str) -> Suite:
    """A suite, checked whole before any cell exists: every key's type, the names that become
    paths (identifiers), scales, axes, grid, seeds, control, report specs and the cell count."""
    path = find_suite(name_or_path)
    spec = {k: v for k, v in load_yaml(path).items() if v is not None}  # `key:` with no value: absent
    _check_types(path, spec)
    name = spec.get("name", path.stem)
    _check_name(path, "'name'" if "name" in spec else "the file name (no 'name:' given)", name)
    _check_overrides(path, "base", spec.get("base"))
    _check_scales(path, spec)
    axes = _check_axes(path, spec.get("axes") or {})
    raw = spec.get("grid") or {}
    grids = _check_grids(path, raw, axes)
    seeds = _check_seeds(path, spec.get("seeds", [0]))
    _check_cell_count(path, grids, seeds)
    grid: dict[str, list[Any]] = {}
    for g in grids:
        for k, values in g.items():
            grid.setdefault(k, [])
            grid[k] += [v for v in values if v not in grid[k]]
    _check_control(path, spec.get("control"), grid)
    _check_reports(path, spec)
    listed = isinstance(raw, list) and raw
    references = _check_references(path, spec.get("references"))
    if references:
        grids = [*grids, *reference_grids(grids, references, axes)]
        _check_cell_count(path, grids, seeds)
        grid.setdefault("algorithm.name", [])
        grid["algorithm.name"] += [r for r in references if r not in grid["algorithm.name"]]
        listed = True
    return Suite(name=name, path=path, spec=spec, grid=grid, seeds=seeds,
                 grids=grids if listed else None, axes=axes)


def _check_references(path: Path, refs: Any) -> list[str]:
    """``references:``: algorithm names (identifiers) run beside the methods as reference rows."""
    if refs is None:
        return []
    for r in refs:
        if not isinstance(r, str) or not re.fullmatch(NAME_PATTERN, r):
            raise ConfigError(f"{path}: 'references' must list algorithm names ({NAME_HELP}), got {short_repr(r)}")
    return list(dict.fromkeys(refs))


def _sets_algorithm(overrides: Any) -> bool:
    """Whether an axis label's overrides (at any scale) set an ``algorithm.*`` option."""
    if not isinstance(overrides, dict):
        return False
    return any(str(k).startswith("algorithm.") or (k in SCALES and _sets_algorithm(v)) for k, v in overrides.items())


def reference_grids(grids: list[dict[str, list[Any]]], references: list[str],
                    axes: dict[str, dict[str, Any]] | None = None) -> list[dict[str, list[Any]]]:
    """The reference cells of a suite: every sub-grid's settings (dataset, task, missingness...)
    with its algorithm keys replaced by the references, so each column of a table gets its
    chance, linear and centralized rows under the same data and protocol. A reference whose
    algorithm does not declare the cell's task is skipped like any such cell. Method options
    go: ``algorithm.*`` keys and named axes whose labels set one (an ablation's variants)."""
    axes = axes or {}
    out: list[dict[str, list[Any]]] = []
    for g in grids:
        ref = {k: v for k, v in g.items() if not k.startswith("algorithm.")
               and not any(_sets_algorithm(o) for o in (axes.get(k) or {}).values())}
        ref["algorithm.name"] = list(references)
        if ref not in out:
            out.append(ref)
    return out




def _without_algorithm_options(over: dict[str, Any] | None) -> dict[str, Any]:
    """Config overrides less every ``algorithm`` option: the suite's methods' options are no
    options of another method (the method runs with its own defaults)."""
    return {k: v for k, v in (over or {}).items() if not str(k).startswith("algorithm")}


def method_cells(suite: Suite, scale: str | None, method: str, validate: bool = True) -> list[Cell]:
    """The cells of ``method`` as one more row of the suite's grid: every setting the suite's
    methods run (dataset, task, missingness, partition, seeds: the reference rows' settings,
    :func:`reference_grids`) with this method in place, its own options at their defaults.
    Their ids are those the cells would have if the suite's grid listed the method, so its
    records sit beside the stored baselines in every table and the leaderboard."""
    spec = copy.deepcopy(suite.spec)
    spec["base"] = _without_algorithm_options(spec.get("base"))
    spec["scales"] = {sc: _without_algorithm_options(over) for sc, over in (spec.get("scales") or {}).items()}
    grids = reference_grids(suite.grids or [suite.grid], [method], suite.axes)
    mine = Suite(name=suite.name, path=suite.path, spec=spec, grid=dict(grids[0]), seeds=list(suite.seeds),
                 grids=grids, axes=suite.axes)
    return mine.cells(scale, validate=validate)


def beside_cell_ids(suite: Suite, scale: str, records: list[Record]) -> set[str]:
    """The ids of the cells of every method the stored records ran beside the suite's own
    (``--with-method``, ``submit``): the registered or submitted methods named in ``records`` that
    the grid does not list."""
    from benchmark import registry as R

    R.load_plugins()
    own = set(suite.grid.get("algorithm.name") or [])
    # a registered method, or a submitted file's; never a name the suite or registry dropped (a
    # renamed method's old records stay superseded)
    names = {str(r.params["algorithm.name"]) for r in records if r.params and "algorithm.name" in r.params
             and (r.params["algorithm.name"] in R.ALGORITHMS or r.submission)}
    return {c.cell_id for name in sorted(names - own) for c in method_cells(suite, scale, name, validate=False)}


def with_method_cells(suite: Suite, scale: str | None, method: str) -> list[Cell]:
    """:func:`method_cells` for a registered method the suite does not run yet, or one line why not."""
    from benchmark import registry as R

    R.load_plugins()
    if method not in R.ALGORITHMS:
        raise ConfigError(f"--with-method {clip(method)}: no such algorithm{closest(method, R.ALGORITHMS.names())}; "
                          f"a method in a file of its own runs beside the baselines with "
                          f"`submit FILE --suite {suite.name}`")
    if method in (suite.grid.get("algorithm.name") or []):
        raise ConfigError(f"--with-method {clip(method)}: suite '{suite.name}' already runs it; "
                          f"choose its cells with --only algorithm.name={method}")
    cells = [c for c in method_cells(suite, scale, method) if applicable(c)]
    if not cells:
        raise ConfigError(f"--with-method {clip(method)}: it declares none of the tasks of suite "
                          f"'{suite.name}' (its tasks: {', '.join(R.ALGORITHMS.get(method).tasks)})")
    return cells


def thread_lock_for_bars() -> None:
    """Give tqdm a thread lock in this process instead of its default multiprocessing one.

    A cell's (disabled) progress bar would otherwise create a named semaphore registered with
    the pool's resource tracker; a worker killed by a stopped sweep cannot unregister it, and
    the tracker then warns about 'leaked semaphore objects' after the sweep's one-line message.
    """
    import threading

    from tqdm import tqdm as std_tqdm

    if not hasattr(std_tqdm, "_lock"):
        std_tqdm.set_lock(threading.RLock())


def run_claimed_cell(cell: Cell, results_path: str, threads: int, seen: int) -> dict[str, Any]:
    """Claim a cell, then run it unless a record appeared since planning (``seen`` records then).

    Returns the new record, the record another sweep wrote meanwhile, or ``{"status": HELD}``
    while a live process holds the claim.
    """
    thread_lock_for_bars()
    claim = try_claim(results_path, cell.cell_id)
    if claim is None:
        return {"status": HELD, "cell_id": cell.cell_id}
    try:
        mine = [r for r in ResultStore(results_path).read() if r.cell_id == cell.cell_id]
        if len(mine) > seen:
            return mine[-1].to_dict()
        start = time.perf_counter()
        record = run_cell(cell, results_path, threads)  # stored by now; the key below is not
        return {**record, CELL_SECONDS: time.perf_counter() - start}
    finally:
        claim.release()


def _check_output_folders(cells: list[Cell]) -> None:
    """Each distinct ``output`` section of the cells names usable folders (one line, before any
    cell runs, rather than a failed record per cell)."""
    seen: set[str] = set()
    for c in cells:
        key = json.dumps(c.config.get("output", {}), sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            check_output_paths(build_run_config(c.config))


def check_sweep_input(suite: Suite, scale: str | None, overrides: dict[str, Any] | None = None,
                      only: dict[str, Any] | None = None, with_method: str | None = None,
                      results_dir: str | Path | None = "results") -> list[Cell]:
    """The cells a sweep runs (``--only`` applied, the finished tuning studies' choices under
    ``results_dir`` merged (:func:`benchmark.tuned.apply_choices`; None runs the suite's own
    settings), then ``--set``; with ``with_method`` only that method's cells beside the
    suite's, :func:`method_cells`), or a one-line error for
    bad input (environment values, an ``--only`` that selects nothing, a ``--set`` on a grid
    key or an unknown one, an unusable output folder) before any cell runs or anything is written."""
    check_environment()
    scale = scale or suite.default_scale
    every = with_method_cells(suite, scale, with_method) if with_method else suite.cells(scale)
    cells = select_cells(every, only or {})
    if results_dir is not None:
        cells = apply_choices(suite, cells, results_dir)
    if overrides:
        refuse_grid_overrides(suite, overrides)  # a record must never name a setting that did not run
        for c in cells:
            c.config = deep_merge(c.config, expand_dotted(overrides))
            build_run_config(c.config)  # an unknown or bad --set key fails before any cell runs
    check_params_describe_config(suite, cells)
    _check_output_folders(cells)
    return cells


def run_suite(suite: Suite, scale: str | None = None, jobs: int = 1, results_dir: str | Path = "results",
              retry_failed: bool = False, progress: bool = True,
              overrides: dict[str, Any] | None = None,
              only: dict[str, Any] | None = None,
              isolate: bool | None = None, backend: str = "joblib",
              address: str | None = None, keep_stale: bool = False,
              cells: list[Cell] | None = None,
              with_method: str | None = None,
              tuned: bool | str | Path = True) -> tuple[list[dict[str, Any]], int]:
    """Run the cells not yet in the store; returns (all records of this suite+scale, cells run now).
    ``with_method`` runs only that registered method's cells beside the suite's methods
    (:func:`method_cells`). ``tuned`` (the default) runs each cell with its finished tuning
    study's choice from ``results_dir/tuning`` (:mod:`benchmark.tuned`; a path: from that
    results directory's ``tuning``); False runs the suite's own settings.

    ``cells`` is :func:`check_sweep_input`'s answer when the caller already checked the input
    (the ``sweep`` verb does, before it touches the disk), so it is not computed twice.

    ``backend`` names a sweep backend (``benchmark.backends.SWEEP_BACKENDS``): ``joblib``
    (local processes, the default) or ``ray`` (Ray tasks; ``address`` joins an existing
    cluster, else a local instance starts). Every backend skips the cells already stored.

    ``only`` restricts the run to cells whose grid values (or ``seed``) equal the given ones,
    e.g. ``{"partition.num_clients": 3}``: a first pass on a small machine; the other cells
    stay missing (the table says so) until a later sweep runs them.

    A stored cell whose latest record is stale (:func:`benchmark.results.stale_reasons`: made
    under another protocol or config) runs again, and its new record supersedes the old one
    in every report; ``keep_stale`` counts such records as done instead."""
    scale = scale or suite.default_scale
    tuning_dir = results_dir if tuned is True else (tuned or None)
    cells = cells if cells is not None else check_sweep_input(suite, scale, overrides, only, with_method,
                                                              tuning_dir)
    if isolate is None:
        isolate = bool(suite.spec.get("isolate", False))
    runner = sweep_backend(backend)
    resources = cell_resources(suite)
    store = ResultStore(suite.results_path(results_dir, scale))
    existing = store.read()
    done = done_cells(cells, existing, retry_failed, keep_stale)
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
    seen = {c.cell_id: sum(r.cell_id == c.cell_id for r in existing) for c in todo}
    try:
        with stop_on_signals():
            _run_until_recorded(runner, todo, str(store.path), threads, jobs, isolate, bar, seen,
                                {"address": address, "resources": resources})
    except KeyboardInterrupt as e:
        bar.close()  # the bar's line ends before the one-line message
        raise as_interrupted(e, _stop_message(store, todo, seen, f"{suite.name}[{scale}]")) from None
    finally:
        if pinned is None:
            os.environ.pop(GIT_STATE_ENV, None)
        bar.close()
    return latest_records(store.read(), {c.cell_id for c in cells}), len(todo)


def _stop_message(store: ResultStore, todo: list[Cell], seen: dict[str, int], what: str) -> str:
    """What a stopped sweep leaves: the cells it saved (every record is whole, the workers are
    gone), the cells still missing, and that a re-run resumes."""
    counts: dict[str, int] = {}
    for r in store.read():
        cid = r.cell_id
        if cid in seen:
            counts[cid] = counts.get(cid, 0) + 1
    saved = sum(counts.get(c.cell_id, 0) > seen[c.cell_id] for c in todo)
    return (f"sweep {what} stopped: {saved} of {len(todo)} cells saved to {store.path}, {len(todo) - saved} not run; "
            f"run the same command again to resume")


GIT_STATE_FORMAT = re.compile(r"[^:\s]+:[01]")


def check_environment() -> None:
    """The FEDMM_* variables a sweep's cells read, checked once before any cell runs: a bad
    value is one ConfigError line here instead of a failed record for every cell."""
    from benchmark.claims import expiry_s
    from benchmark.engine import DEVICE_ENV, resolve_device

    pinned = os.environ.get(GIT_STATE_ENV)
    if pinned is not None and not GIT_STATE_FORMAT.fullmatch(pinned):
        raise ConfigError(f"{GIT_STATE_ENV} must be '<commit sha>:0' or '<commit sha>:1' (the sweep sets it for "
                          f"its workers; unset it), got '{pinned}'")
    if os.environ.get(DEVICE_ENV, "").strip():
        resolve_device("auto")
    expiry_s()
    threads_per_job(1)


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




@SWEEP_BACKENDS.register("joblib")
def _run_cells(todo: list[Cell], store_path: str, threads: int, jobs: int, isolate: bool, bar: Any,
               seen: dict[str, int], walls: list[float], **_: Any) -> set[str]:
    """Run the cells (in this process, a pool of fresh processes, or one fresh process each).

    Ticks the bar per finished cell, with an ETA from finished cells' wall times; returns the
    ids of cells another sweep held. Pools never fork (joblib's loky and ``spawn`` start fresh
    interpreters), so several workers may share a GPU the parent process already initialised.
    """
    held: set[str] = set()

    def done(msg: dict[str, Any]) -> None:  # a worker's answer: a record's JSON, or that the cell is held
        if msg.get("status") == HELD:
            held.add(str(msg["cell_id"]))
            return
        tick(bar, walls, jobs, msg)

    if isolate:
        ctx = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, max_tasks_per_child=1)
        try:
            futures = [pool.submit(run_claimed_cell, c, store_path, threads, seen[c.cell_id]) for c in todo]
            for fut in as_completed(futures):
                done(fut.result())
        except BaseException:
            kill_pool(pool)  # shutdown() would wait for the running cells and start the queued ones
            raise
        pool.shutdown()
    elif jobs == 1:
        for c in todo:
            done(run_claimed_cell(c, store_path, threads, seen[c.cell_id]))
    else:
        gen = Parallel(n_jobs=jobs, backend="loky", return_as="generator_unordered")(
            delayed(run_claimed_cell)(c, store_path, threads, seen[c.cell_id]) for c in todo)
        with closing_parallel(gen):
            for rec in gen:
                done(rec)
    return held


def kill_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a process pool now: drop its queued cells and kill the workers running cells.

    A killed cell leaves no record (appends are whole lines) and its claim is taken over,
    as its process is gone, so a re-run runs it again.
    """
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public handle before 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(timeout=5)


@contextmanager
def closing_parallel(gen: Any) -> Iterator[None]:
    """Close a joblib generator when its consumer stops early (an interrupt, an error in the
    loop body): joblib then kills its loky workers instead of letting them run on, orphaned.
    Its warning about unused results says nothing the caller does not know."""
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gen.close()


def current_cells(cells: list[Cell], records: list[Record], retry_failed: bool = False,
                  keep_stale: bool = False) -> tuple[set[str], dict[str, int]]:
    """Ids of the cells whose latest record is ok (or failed, unless ``retry_failed``) and
    measures the cell's config as it is now (unless ``keep_stale``), and the count of stale
    cells per first reason. What a sweep skips, and what ``check`` reports as current."""
    latest = {r.cell_id: r for r in latest_records(records, {c.cell_id for c in cells})}
    done: set[str] = set()
    stale: dict[str, int] = {}
    for c in cells:
        rec = latest.get(c.cell_id)
        if rec is None or (retry_failed and not rec.ok):
            continue
        reasons = [] if keep_stale else stale_reasons(rec, build_run_config(c.config))
        if reasons:
            stale[reasons[0]] = stale.get(reasons[0], 0) + 1
            continue
        done.add(c.cell_id)
    return done, stale


def done_cells(cells: list[Cell], records: list[Record], retry_failed: bool = False,
               keep_stale: bool = False) -> set[str]:
    """Ids of the cells a sweep skips (:func:`current_cells`), saying how many it runs again."""
    done, stale = current_cells(cells, records, retry_failed, keep_stale)
    latest = {r.cell_id: r for r in latest_records(records, done)}
    if stale:
        log.warning("%d stored cells are stale and run again (%s); --keep-stale keeps them",
                    sum(stale.values()), "; ".join(f"{n} x {why}" for why, n in sorted(stale.items())))
    failed = sum(1 for cid in done if not latest[cid].ok)
    if failed:
        log.warning("%d stored cells failed and are not run again; --retry-failed runs them", failed)
    return done


_ABSENT = object()  # a grid key a sub-grid does not vary


def _cell_value(c: Cell, k: str) -> Any:
    return c.seed if k == "seed" else c.params.get(k, _ABSENT)


def select_cells(cells: list[Cell], only: dict[str, Any]) -> list[Cell]:
    """The cells matching every ``key=value`` of ``only`` (grid keys or ``seed``); a selection
    that matches no cell is an error (else the sweep would exit 0 having run nothing)."""
    known = {k for c in cells for k in c.params} | {"seed"}
    for k in only:
        if k not in known:
            raise ConfigError(f"--only {clip(k)}: not a grid key of this suite{closest(k, sorted(known))}; "
                              f"valid: {', '.join(sorted(known))}")
    chosen = [c for c in cells if all(_cell_value(c, k) == v for k, v in only.items())]
    if only and not chosen:
        raise ConfigError(_no_match(cells, only))
    return chosen


def _no_match(cells: list[Cell], only: dict[str, Any]) -> str:
    """Which ``--only`` value matches no cell, with the values its key takes (or: only together)."""
    for k, v in only.items():
        values: list[Any] = []
        for c in cells:
            x = _cell_value(c, k)
            if x is not _ABSENT and x not in values:
                values.append(x)
        if v not in values:
            return (f"--only {clip(k)}={clip(str(v), 40)} matches no cell; {clip(k)} takes "
                    f"{clip(', '.join(str(x) for x in values), 200)}")
    both = " ".join(f"{clip(k)}={clip(str(v), 40)}" for k, v in only.items())
    return f"--only {both}: each matches some cell, but no cell has all of them"


