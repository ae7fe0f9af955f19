"""Dataset-statistics suites (the seed paper's Table II): records from federations, not runs.

A suite with ``stats: kg_partition`` has cells like any other (grid x seeds, validated
configs), but a cell *builds* its federated artifact (``data_prep.build.build_federation``)
and records the statistics the builder computes instead of training anything: mean
relations / entities / triples per client and the cross-client similarity of an entity's
dealt items. The records go to the same store in the same format (metrics named
``stats/<name>``), so ``table`` renders them with the ordinary table code, the paper's numbers
in parentheses included, and a re-run only builds what is missing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from benchmark.errors import ConfigError
from benchmark.record import Record, failed_record, latest_records
from benchmark.results import ResultStore, now_iso, provenance

STATS_KINDS = ("kg_partition",)
# the paper's visual slot, else its offline stand-in (data_prep/kg/build.py, VISUAL_SLOT)
VISUAL_SLOT = ("image", "numeric")


def is_stats_suite(suite: Any) -> bool:
    kind = suite.spec.get("stats")
    if kind is None:
        return False
    if kind not in STATS_KINDS:
        raise ConfigError(f"suite '{suite.name}': unknown stats kind '{kind}'; valid: {', '.join(STATS_KINDS)}")
    return True


def _number(value: Any) -> float | None:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def kg_partition_metrics(stats: Mapping[str, Any], modalities: list[str]) -> dict[str, float | None]:
    """Table II columns from a KG federation's ``stats``: ``clients``, ``mean_relations``,
    ``mean_entities``, ``mean_triples``; ``s_v`` (cosine of the visual slot's item means),
    ``s_d`` (token Jaccard of the held text items), ``s_d_cosine`` (cosine of text features);
    a value the federation cannot give (no such modality, no client pair, synthetic text
    without strings) is None, which the table prints as "no result"."""
    info = stats.get("partition_info") or {}
    sim = (stats.get("missing_info") or {}).get("similarity") or {}
    out: dict[str, float | None] = {
        "clients": _number(info.get("clients")),
        "mean_relations": _number(info.get("mean_relations")),
        "mean_entities": _number(info.get("mean_entities")),
        "mean_triples": _number(info.get("mean_triples")),
    }
    visual = next((m for m in VISUAL_SLOT if m in modalities), None)
    out["s_v"] = _number((sim.get(visual) or {}).get("cosine")) if visual else None
    out["s_d"] = _number((sim.get("text") or {}).get("jaccard"))
    out["s_d_cosine"] = _number((sim.get("text") or {}).get("cosine"))
    return {f"stats/{k}": v for k, v in out.items()}


def stats_record(cell: Any) -> dict[str, Any]:
    """Build one cell's federation and return its statistics record (status failed on error)."""
    from benchmark.config import build_run_config
    from benchmark.federation import build_federation

    start = time.perf_counter()
    try:
        cfg = build_run_config(cell.config)
        fed = build_federation(cfg)
        record = Record(
            status="ok", seed=cell.seed, metrics=kg_partition_metrics(fed.stats, list(fed.modalities)),
            config=cfg.to_dict(),
            provenance=provenance(cfg, fed.artifact_hash, fed.stats.get("artifact_recipe", ""), torch.device("cpu")),
            extra={"stats": {k: fed.stats.get(k) for k in ("partition_info", "missing_info", "dataset", "num_nodes",
                                                           "num_edges", "num_relations")}})
    except Exception as e:  # noqa: BLE001 - recorded like a failed training cell
        record = failed_record(cell.seed, f"{type(e).__name__}: {e}")
    return record.stamped(suite=cell.suite, scale=cell.scale, cell_id=cell.cell_id, params=cell.params,
                          seed=cell.seed, wall_time_s=time.perf_counter() - start, timestamp=now_iso()).to_dict()


def run_stats_suite(suite: Any, scale: str | None, results_dir: str | Path,
                    retry_failed: bool = False) -> tuple[list[Record], int]:
    """Compute the statistics records a stats suite lacks; returns (its records, cells built now)."""
    is_stats_suite(suite)
    scale = scale or suite.default_scale
    cells = suite.cells(scale)
    store = ResultStore(suite.results_path(results_dir, scale))
    done = {r.cell_id for r in store.read() if r.ok or not retry_failed}
    todo = [c for c in cells if c.cell_id not in done]
    for cell in todo:
        store.append(stats_record(cell))
    return latest_records(store.read(), {c.cell_id for c in cells}), len(todo)
