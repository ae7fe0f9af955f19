"""Suites -> cells -> records: expansion, resumable parallel execution, failure capture.

A suite YAML names a grid of run-config overrides, the seeds, per-scale overrides and the
report layout. Each (grid point, seed) is a *cell* with a stable id; a cell whose record
is already in the store is skipped, so a killed sweep re-run does only what is missing.
Workers append their own record the moment a cell finishes (atomic appends), so a kill
loses at most the cells in flight.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from joblib import Parallel, delayed
from tqdm.auto import tqdm

from benchmark.config import build_run_config, deep_merge, expand_dotted, load_yaml
from benchmark.errors import ConfigError, closest
from benchmark.results import ResultStore, now_iso

SUITES_DIR = Path(__file__).with_name("suites")
SCALES = ("tiny", "small", "paper")
SUITE_KEYS = ("name", "description", "base", "grid", "seeds", "scales", "default_scale", "table", "tables",
              "plots", "track", "paper_note", "regress")


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


@dataclass
class Suite:
    name: str
    path: Path
    spec: dict[str, Any]
    grid: dict[str, list[Any]] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [0])

    @property
    def default_scale(self) -> str:
        return self.spec.get("default_scale", "small")

    def results_path(self, results_dir: str | Path, scale: str) -> Path:
        return Path(results_dir) / self.name / f"{scale}.jsonl"

    def cells(self, scale: str | None = None) -> list[Cell]:
        """Every (grid point x seed) cell, each config validated before anything runs."""
        scale = scale or self.default_scale
        if scale not in SCALES:
            raise ConfigError(f"unknown scale '{scale}'{closest(scale, SCALES)}; valid: {', '.join(SCALES)}")
        scales = self.spec.get("scales") or {}
        base = deep_merge(expand_dotted(self.spec.get("base") or {}), expand_dotted(scales.get(scale) or {}))
        keys = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[k] for k in keys)):
            params = dict(zip(keys, values))
            for seed in self.seeds:
                cfg = deep_merge(base, expand_dotted(params))
                cfg["seed"] = seed
                out.append(Cell(self.name, scale, params, seed, cfg))
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


def load_suite(name_or_path: str) -> Suite:
    path = find_suite(name_or_path)
    spec = load_yaml(path)
    for k in spec:
        if k not in SUITE_KEYS:
            raise ConfigError(f"{path}: unknown suite key '{k}'{closest(k, SUITE_KEYS)}; valid: {', '.join(SUITE_KEYS)}")
    grid = spec.get("grid") or {}
    if not isinstance(grid, dict) or not all(isinstance(v, list) and v for v in grid.values()):
        raise ConfigError(f"{path}: 'grid' must map dotted config keys to non-empty lists")
    seeds = spec.get("seeds", [0])
    if not isinstance(seeds, list) or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"{path}: 'seeds' must be a list of integers")
    return Suite(name=spec.get("name", path.stem), path=path, spec=spec, grid=grid, seeds=seeds)


def _failed_record(cell: Cell, reason: str, rnd: int = -1) -> dict[str, Any]:
    return {"status": "failed", "error": {"round": rnd, "reason": reason}, "metrics": {}, "seed": cell.seed,
            "timestamp": now_iso()}


def run_cell(cell: Cell, results_path: str, threads: int = 1) -> dict[str, Any]:
    """Run one cell in this process and append its record (ok or failed) to the store."""
    torch.set_num_threads(max(1, threads))
    from benchmark.engine import Engine

    try:
        cfg = build_run_config(cell.config)
        record = Engine(cfg).run()
    except Exception as e:  # noqa: BLE001 - a failing cell is recorded, the sweep goes on
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
        record = _failed_record(cell, f"{type(e).__name__}: {e}{where}")
    record.update({"suite": cell.suite, "scale": cell.scale, "cell_id": cell.cell_id, "params": cell.params,
                   "seed": cell.seed})
    ResultStore(results_path).append(record)
    return record


def run_suite(suite: Suite, scale: str | None = None, jobs: int = 1, results_dir: str | Path = "results",
              retry_failed: bool = False, progress: bool = True,
              overrides: dict[str, Any] | None = None) -> tuple[list[dict[str, Any]], int]:
    """Run the cells not yet in the store; returns (all records of this suite+scale, cells run now)."""
    scale = scale or suite.default_scale
    cells = suite.cells(scale)
    if overrides:
        for c in cells:
            c.config = deep_merge(c.config, expand_dotted(overrides))
    store = ResultStore(suite.results_path(results_dir, scale))
    existing = store.read()
    done = {r["cell_id"] for r in existing if r.get("status") == "ok" or not retry_failed}
    todo = [c for c in cells if c.cell_id not in done]
    jobs = max(1, min(jobs, len(todo) or 1))
    # FEDMM_THREADS pins torch threads per cell: on a shared or small machine one thread per
    # cell is both faster and steadier than oversubscribed parallel ops.
    threads = int(os.environ.get("FEDMM_THREADS", "0")) or max(1, (os.cpu_count() or 1) // jobs)
    bar = tqdm(total=len(cells), initial=len(cells) - len(todo), desc=f"{suite.name}[{scale}]",
               disable=not progress, unit="cell")
    if jobs == 1:
        for c in todo:
            rec = run_cell(c, str(store.path), threads)
            bar.update(1)
            bar.set_postfix_str(f"{rec['status']}")
    else:
        gen = Parallel(n_jobs=jobs, return_as="generator_unordered")(
            delayed(run_cell)(c, str(store.path), threads) for c in todo)
        for rec in gen:
            bar.update(1)
            bar.set_postfix_str(f"{rec['status']}")
    bar.close()
    return latest_records(store.read(), {c.cell_id for c in cells}), len(todo)


def latest_records(records: list[dict[str, Any]], cell_ids: set[str] | None = None) -> list[dict[str, Any]]:
    """The newest record of each cell (a retried cell keeps only its last result)."""
    latest: dict[str, dict[str, Any]] = {}
    for r in records:
        cid = r.get("cell_id")
        if cid is None or (cell_ids is not None and cid not in cell_ids):
            continue
        latest[cid] = r
    return list(latest.values())
