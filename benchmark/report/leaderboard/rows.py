"""The leaderboard's row model: one row per comparable group of a suite's records.

Which records share a row is not decided here: :func:`benchmark.report.records.comparable_groups`
decides it for every report (a row is one cell under one artifact recipe and protocol, a seed's
latest record each, the newest group current), so a leaderboard row and a table cell can never
average different sets of records. This module turns each group into a :class:`Row` with the
per-seed scalars a page shows (:func:`record_scalars`) and the robustness AUC.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmark.report.records import comparable_groups, records_frame
from benchmark.record import Record, as_records

ROBUSTNESS_X = "missing.rate"


def primary_metric_for(task_name: str | None) -> str | None:
    """The registered task's primary metric (None when the task is unknown here)."""
    from benchmark import registry as R

    R.load_plugins()
    if task_name and task_name in R.TASKS:
        return getattr(R.TASKS.get(task_name), "primary_metric", None)
    return None


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (missing, text, NaN, infinite)."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def record_scalars(record: Record) -> dict[str, float]:
    """Every number a row can show for one record.

    ``test/<m>`` (test score at the best validation round), ``worst_client/<m>`` (the lowest
    per-client test score), ``spread/<m>`` (population std of the per-client test scores, so a
    federation of one client has spread 0), ``bytes_per_round`` and ``seconds_per_round``.
    Missing or non-finite values are left out rather than turned into zeros.
    """
    out: dict[str, float] = {}
    for key, value in (record.metrics or {}).items():
        v = finite(value)
        if v is not None and str(key).startswith("test/"):
            out[str(key)] = v
    for key, values in (record.per_client or {}).items():
        vals = [v for v in (finite(x) for x in values or []) if v is not None]
        if not vals or not str(key).startswith("test/"):
            continue
        name = str(key)[len("test/"):]
        out[f"worst_client/{name}"] = min(vals)
        out[f"spread/{name}"] = statistics.pstdev(vals) if len(vals) > 1 else 0.0
    for key in ("bytes_per_round", "seconds_per_round"):
        v = finite(getattr(record, key))
        if v is not None:
            out[key] = v
    return out


@dataclass
class Stat:
    """Mean and sample std (ddof=1; NaN below two values) of one scalar over a row's seeds."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        n = len(values)
        mean = statistics.fmean(values) if n else math.nan
        std = statistics.stdev(values) if n > 1 else math.nan
        return cls(mean, std, n)


@dataclass
class Row:
    """One leaderboard row: a suite cell under one (artifact recipe, protocol) pair."""

    suite: str
    scale: str
    params: dict[str, Any]
    recipe: str
    protocol: str
    records: list[Record]
    current: bool = True
    stats: dict[str, Stat] = field(default_factory=dict)
    auc: float = math.nan

    @property
    def cell_key(self) -> str:
        return json.dumps(self.params, sort_keys=True, default=str)

    def _config(self, section: str) -> dict[str, Any]:
        for rec in self.records:
            cfg = (rec.config or {}).get(section)
            if isinstance(cfg, dict):
                return cfg
        return {}

    def value(self, key: str) -> Any:
        """A dotted config value, from the params first, else from the records' config."""
        if key in self.params:
            return self.params[key]
        section, _, name = key.partition(".")
        return self._config(section).get(name)

    @property
    def method(self) -> str:
        return str(self.value("algorithm.name") or "?")

    @property
    def task(self) -> str:
        return str(self.value("task.name") or "?")

    @property
    def dataset(self) -> str:
        return str(self.value("dataset.name") or "?")

    @property
    def missing(self) -> str:
        return str(self.value("missing.name") or "?")

    @property
    def rate(self) -> float | None:
        return finite(self.value(ROBUSTNESS_X))

    @property
    def ok(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.ok]

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [r for r in self.records if not r.ok]

    @property
    def latest(self) -> str:
        return max((r.timestamp or "" for r in self.records), default="")

    def prov_values(self, key: str) -> list[str]:
        """Distinct values of one provenance field over the row's records, in seed order."""
        seen: dict[str, None] = {}
        for rec in sorted(self.records, key=lambda r: str(r.seed)):
            value = (rec.provenance or {}).get(key)
            if value is not None and value != "":
                seen.setdefault(json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value))
        return list(seen)

    @property
    def code_versions(self) -> list[str]:
        """Short git sha of each record ('+dirty' when uncommitted changes were present),
        plus the submission file's hash for submitted methods."""
        out: dict[str, None] = {}
        for rec in self.records:
            prov = rec.provenance or {}
            sha = str(prov.get("git_sha") or "unknown")
            text = (sha[:10] if sha != "unknown" else sha) + ("+dirty" if prov.get("git_dirty") else "")
            sub = rec.submission or {}
            if sub.get("sha256"):
                text += f" / {sub.get('file', 'submission')}@{str(sub['sha256'])[:10]}"
            out.setdefault(text)
        return list(out) or ["unknown"]


def group_rows(suite: str, scale: str, records: Iterable[Record | Mapping[str, Any]]) -> list[Row]:
    """One row per comparable group of one store's records (cells are the records' grid params).

    Records that are not finished runs (no 'ok' or 'failed' status) are skipped. Rows come in
    the order their first record was appended; each carries the seed statistics of its records.
    """
    kept = as_records(item for item in records if isinstance(item, Record)
                      or (isinstance(item, Mapping) and item.get("status") in ("ok", "failed")))
    if not kept:
        return []
    frame = records_frame(kept)
    rows = []
    for group in comparable_groups(frame, frame.attrs["param_keys"]):
        members = [kept[i] for i in group.index]
        params = json.loads(json.dumps(members[0].params or {}, sort_keys=True, default=str))
        row = Row(suite=suite, scale=scale, params=params, recipe=group.recipe, protocol=group.protocol,
                  records=members, current=group.current)
        scalars = [record_scalars(r) for r in row.ok]
        keys = sorted({k for s in scalars for k in s})
        row.stats = {k: Stat.of([s[k] for s in scalars if k in s]) for k in keys}
        rows.append(row)
    return rows


def attach_auc(rows: list[Row], primary: str) -> None:
    """Robustness AUC of the primary metric over missing rate for each current setting.

    The curve joins the seed-mean test score of the current rows that share everything but the
    missing rate (and the protocol: a different training setup is a different curve). It needs
    two rates or more, and a setting with a rate where every seed failed gets no AUC, since an
    area over a shorter range would flatter it.
    """
    from benchmark.report.curve_metrics import curve_auc

    col = f"test/{primary}"
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if not row.current:
            continue
        rest = {k: v for k, v in row.params.items() if k != ROBUSTNESS_X}
        groups.setdefault((json.dumps(rest, sort_keys=True, default=str), row.protocol), []).append(row)
    for members in groups.values():
        points = [(m.rate, m.stats.get(col)) for m in members]
        if len({p[0] for p in points}) < 2 or any(x is None or s is None or s.n == 0 for x, s in points):
            continue
        auc = float(curve_auc([x for x, _ in points], [s.mean for _, s in points]))  # type: ignore[union-attr]
        for m in members:
            m.auc = auc
