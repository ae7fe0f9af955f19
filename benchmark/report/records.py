"""Result records: loading, flattening, and the rules that decide which records form a cell.

Tables, plots and the leaderboard must agree on which records are averaged together, so the
rule lives here, in :func:`comparable_groups`, and nowhere else:

* a cell (one combination of the table's row/column keys, of a plot's x/hue, or of a
  leaderboard row's grid params) is averaged over seeds only when its records share
  ``artifact_recipe`` and ``protocol``; when a cell mixes several, the (recipe, protocol) group
  with the most recent timestamp is current. :func:`select_records` keeps it and reports the
  others as :class:`Exclusion` so the caller can footnote them; the leaderboard shows them as
  superseded rows; :func:`aggregate` refuses a cell that still mixes two;
* a seed that appears twice in one group is a rerun: the most recent record wins;
* failed records are never averaged; :func:`aggregate` counts them separately;
* a parameter that takes several values inside one cell (say ``partition.alpha`` when the
  table only shows ``missing.rate``) is a spec error, not something to average over silently.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmark.errors import DataError
from benchmark.record import Record, as_records, read_record

# Sample standard deviation over seeds; tables and plots both use it and say so.
STD_DDOF = 1


TOP_LEVEL_FIELDS = (
    "suite", "scale", "cell_id", "seed", "status", "best_round",
    "peak_memory_mb", "memory_growth_mb", "wall_time_s", "timestamp",
)


PROVENANCE_FIELDS = (
    "artifact_hash", "artifact_recipe", "protocol", "git_sha", "git_dirty",
    "device", "config_hash", "versions",
)


ERROR_FIELDS = ("error_round", "error_reason")


# Fields besides params that must be constant inside a cell (records of two scales are not
# seeds of one experiment).
CELL_CONTEXT_FIELDS = ("suite", "scale")


# frame columns of the measured per-modality availability a record carries (``record.availability``)
AVAILABILITY_PREFIX = "availability/"


# ... and the same share among the nodes the data gives the modality at all (availability /
# ``record.coverage``), where the record states its coverage (the KG track)
COVERED_PREFIX = "covered_availability/"


def availability_columns(frame: pd.DataFrame, prefix: str = AVAILABILITY_PREFIX) -> list[str]:
    """The frame's measured-availability columns (``availability/<modality>``, or those of
    another prefix such as ``COVERED_PREFIX``)."""
    return [c for c in frame.columns if str(c).startswith(prefix)]


_NUMERIC = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def load_records(path: str | Path) -> list[Record]:
    """Read one JSON object per line; blank lines are skipped, anything else is an error.

    A corrupt line is reported with file and line number so a half-written record (a run
    killed mid-write) can be found and removed by hand.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"results file not found: {path}") from None
    except OSError as exc:
        raise DataError(f"cannot read results file {path}: {exc.strerror}") from None
    records: list[Record] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: corrupt result record ({exc.msg})") from None
        records.append(read_record(obj, f"{path}:{lineno}: result record"))
    return records


def metric_column(metric: str) -> str:
    """Frame column of a metric name: 'accuracy' -> 'test/accuracy'; 'val/accuracy' stays."""
    return metric if "/" in metric else f"test/{metric}"


def param_keys(records: Iterable[Record]) -> list[str]:
    """Union of the param keys of all records, in first-seen order."""
    keys: dict[str, None] = {}
    for rec in records:
        for key in rec.params or {}:
            keys.setdefault(key, None)
    return list(keys)


def _cell_value(value: Any) -> Any:
    """Make a param value hashable for grouping (lists/dicts become their JSON text)."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value


def records_frame(records: Sequence[Record | Mapping[str, Any]]) -> pd.DataFrame:
    """One row per record: params (columns named like the keys), top-level fields, metrics
    (columns like 'test/accuracy'), error and provenance fields.

    The index is the record's position in ``records`` so callers can go back to the raw
    record (e.g. for its curves) after filtering. JSON objects are read as records (``as_records``).
    """
    records = as_records(records)
    pkeys = param_keys(records)
    fixed = set(TOP_LEVEL_FIELDS) | set(PROVENANCE_FIELDS) | set(ERROR_FIELDS)
    clash = sorted(fixed.intersection(pkeys))
    if clash:
        raise DataError(f"param keys clash with record fields: {', '.join(clash)}")
    reserved = fixed | set(pkeys)
    rows: list[dict[str, Any]] = []
    metric_keys: dict[str, None] = {}
    availability_keys: dict[str, None] = {}
    for rec in records:
        row: dict[str, Any] = {k: _cell_value(v) for k, v in (rec.params or {}).items()}
        for key in TOP_LEVEL_FIELDS:
            row[key] = getattr(rec, key)
        error = rec.error or {}
        row["error_round"] = error.get("round") if isinstance(error, Mapping) else None
        row["error_reason"] = error.get("reason") if isinstance(error, Mapping) else str(error)
        prov = rec.provenance or {}
        for key in PROVENANCE_FIELDS:
            value = prov.get(key)
            row[key] = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
        for key, value in (rec.metrics or {}).items():
            if key in reserved:
                continue  # a metric named like a record field or a param ('suite'): no column of its own
            metric_keys.setdefault(key, None)
            row[key] = np.nan if value is None else value
        coverage = rec.coverage or {}
        for modality, share in (rec.availability or {}).items():
            key = AVAILABILITY_PREFIX + modality
            availability_keys.setdefault(key, None)
            row[key] = share
            covered = coverage.get(modality)
            if _finite(share) and _finite(covered) and covered > 0:
                availability_keys.setdefault(COVERED_PREFIX + modality, None)
                row[COVERED_PREFIX + modality] = min(float(share) / float(covered), 1.0)
        rows.append(row)
    columns = (pkeys + list(TOP_LEVEL_FIELDS) + list(ERROR_FIELDS) + list(PROVENANCE_FIELDS) + list(metric_keys)
               + list(availability_keys))
    frame = pd.DataFrame(rows, columns=columns, index=pd.RangeIndex(len(rows)))
    for key in (*metric_keys, *availability_keys):
        # a non-number or an infinity measures nothing: never a table's best cell (NaN is "no value")
        values = pd.to_numeric(frame[key], errors="coerce")
        frame[key] = values.where(np.isfinite(values.astype(float)))
    frame.attrs["param_keys"] = pkeys
    frame.attrs["metric_keys"] = list(metric_keys)
    frame.attrs["availability_keys"] = list(availability_keys)
    return frame


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def value_key(value: Any) -> Hashable:
    """Normalised key for matching spec values against record values.

    YAML gives ``0.3`` or ``"0.3"`` or ``1`` where records hold ``0.3`` / ``1.0``; numbers
    (and numeric strings) compare as floats rounded to 12 digits, booleans as 'true'/'false',
    everything else as its string.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "null"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.integer, np.floating)):
        f = float(value)
        return f if math.isinf(f) else round(f, 12)
    if isinstance(value, str) and _NUMERIC.match(value.strip()):
        return round(float(value), 12)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, sort_keys=True)
    return str(value)


@dataclass(frozen=True)
class Exclusion:
    """Records of one cell left out because a newer (recipe, protocol) group exists."""

    cell: tuple[Any, ...]
    n_excluded: int
    reason: str


@dataclass(frozen=True)
class RunGroup:
    """The records of one cell under one (artifact recipe, protocol) pair: the only records that
    may be averaged together.

    ``index`` holds the frame labels of the records kept (a seed's latest record; earlier ones
    are reruns it replaces), ascending; ``n_records`` counts the group's records before that.
    ``current`` marks the group of its cell with the newest record; the cell's other groups are
    older runs, which a report leaves out (tables, plots) or shows apart (the leaderboard).
    ``cell_id`` numbers the cells in the order they first appear; a cell's groups share it.
    """

    cell: tuple[Any, ...]
    cell_id: int
    recipe: str
    protocol: str
    index: tuple[int, ...]
    n_records: int
    current: bool


def _timestamps(frame: pd.DataFrame) -> pd.Series:
    """Parsed timestamps (missing/unparseable ones sort first)."""
    parsed = pd.to_datetime(frame["timestamp"], utc=True, errors="coerce", format="ISO8601")
    # nanosecond resolution first: pandas infers [s]/[us], which cannot hold Timestamp.min
    return parsed.astype("datetime64[ns, UTC]").fillna(pd.Timestamp.min.tz_localize("UTC"))


def _short(text: Any) -> str:
    text = "none" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
    return text if len(text) <= 16 else text[:12] + "..."


def _run_id(value: Any) -> str:
    """A recipe or protocol hash as text ('' when the record has none)."""
    return "" if value is None or value != value else str(value)


def comparable_groups(frame: pd.DataFrame, keys: Sequence[str]) -> list[RunGroup]:
    """Split ``frame`` into cells of ``keys`` and each cell into (artifact recipe, protocol) groups.

    This is the one comparability rule of the report layer: tables and plots (through
    :func:`select_records`) and the leaderboard (a row per group) all take their groups from
    here. Per group a seed's latest record (by timestamp; the later store line on a tie) wins.
    Per cell the group holding the newest record is current (the later-seen group on a tie).
    Groups come in the order their first record appears in ``frame``.
    """
    missing = [k for k in ("artifact_recipe", "protocol", "timestamp", "seed") if k not in frame.columns]
    if missing:
        raise DataError(f"records lack the column(s) {', '.join(missing)}; build the frame with records_frame")
    if frame.empty:
        return []
    work = frame.assign(
        _ts=_timestamps(frame),
        _recipe=frame["artifact_recipe"].map(_run_id),
        _protocol=frame["protocol"].map(_run_id),
        _cell=frame.groupby(list(keys), dropna=False, sort=False).ngroup() if keys else 0,
    )
    found: list[tuple[RunGroup, pd.Timestamp]] = []
    for (cell_id, recipe, protocol), group in work.groupby(["_cell", "_recipe", "_protocol"], sort=False):
        ordered = group.sort_values("_ts", kind="stable")
        kept = ordered[~ordered["seed"].duplicated(keep="last") | ordered["seed"].isna()]
        found.append((RunGroup(
            cell=tuple(group[k].iloc[0] for k in keys), cell_id=int(cell_id), recipe=str(recipe),
            protocol=str(protocol), index=tuple(sorted(int(i) for i in kept.index)), n_records=len(group),
            current=False,
        ), group["_ts"].max()))
    newest: dict[int, int] = {}
    for pos, (g, ts) in enumerate(found):
        best = newest.get(g.cell_id)
        if best is None or ts >= found[best][1]:
            newest[g.cell_id] = pos
    current = set(newest.values())
    return [replace(g, current=pos in current) for pos, (g, _) in enumerate(found)]


def _exclusion(chosen: RunGroup, others: Sequence[RunGroup]) -> Exclusion:
    """Say which older runs of a cell were left out, and why."""
    what = " and ".join(w for w, d in (
        ("artifact recipe", any(o.recipe != chosen.recipe for o in others)),
        ("protocol", any(o.protocol != chosen.protocol for o in others)),
    ) if d)
    return Exclusion(
        cell=chosen.cell,
        n_excluded=sum(o.n_records for o in others),
        reason=f"older {what} than the latest run (kept recipe {_short(chosen.recipe)}, "
               f"protocol {_short(chosen.protocol)})",
    )


def select_records(frame: pd.DataFrame, keys: Sequence[str]) -> tuple[pd.DataFrame, list[Exclusion]]:
    """Per cell, keep the current (artifact_recipe, protocol) group of :func:`comparable_groups`
    (a seed's latest record each); return the kept records (failed ones included) and what was
    excluded."""
    if frame.empty:
        return frame, []
    groups = comparable_groups(frame, keys)
    by_cell: dict[int, list[RunGroup]] = {}
    for g in groups:
        by_cell.setdefault(g.cell_id, []).append(g)
    exclusions = []
    for members in by_cell.values():
        if len(members) > 1:
            chosen = next(g for g in members if g.current)
            exclusions.append(_exclusion(chosen, [g for g in members if g is not chosen]))
    kept = sorted(i for g in groups if g.current for i in g.index)
    out = frame.loc[kept]
    out.attrs = dict(frame.attrs)
    return out, exclusions


def _check_comparable(cell: tuple[Any, ...], group: pd.DataFrame) -> None:
    """DataError when one cell holds records of two (recipe, protocol) groups: they measure
    different data or protocols, and averaging them would hide that."""
    runs = {(_run_id(r), _run_id(p)) for r, p in zip(group["artifact_recipe"], group["protocol"])}
    if len(runs) > 1:
        raise DataError(f"cell {cell} mixes {len(runs)} (artifact recipe, protocol) runs; "
                        "select_records decides which records may be averaged, call it first")


def aggregate(frame: pd.DataFrame, keys: Sequence[str], metric_cols: Sequence[str],
              ddof: int = STD_DDOF) -> pd.DataFrame:
    """Mean/std over the ok records of each cell, per metric, in the records' own units.

    Columns: ``keys``, metric, mean, std, n (ok records with a value), n_ok, n_failed,
    failure (distinct 'reason (round r)' texts of failed seeds). std is NaN for n < 2. A cell
    whose records come from two (recipe, protocol) groups is a DataError: pass the frame
    through :func:`select_records` first.
    """
    rows: list[dict[str, Any]] = []
    groups = frame.groupby(list(keys), dropna=False, sort=False) if keys else [((), frame)]
    for cell, group in groups:
        cell = cell if isinstance(cell, tuple) else (cell,)
        _check_comparable(cell, group)
        ok = group[group["status"] == "ok"]
        failed = group[group["status"] != "ok"]
        reasons = sorted({
            f"{r}" + (f" (round {int(rd)})" if rd is not None and rd == rd else "")
            for r, rd in zip(failed["error_reason"].fillna("unknown error"), failed["error_round"])
        })
        for col in metric_cols:
            values = ok[col].dropna().astype(float) if col in ok.columns else pd.Series(dtype=float)
            n = int(values.size)
            rows.append({
                **dict(zip(keys, cell)),
                "metric": col,
                "mean": float(values.mean()) if n else np.nan,
                "std": float(values.std(ddof=ddof)) if n > ddof else np.nan,
                "n": n,
                "n_ok": int(len(ok)),
                "n_failed": int(len(failed)),
                "failure": "; ".join(reasons),
            })
    return pd.DataFrame(rows, columns=[*keys, "metric", "mean", "std", "n", "n_ok", "n_failed", "failure"])


def algorithm_display_names(records: Sequence[Record]) -> dict[Hashable, str]:
    """The display name each method's records carry (the engine writes its class's into
    ``record.algorithm``), for a row the suite's ``row_labels`` do not name."""
    out: dict[Hashable, str] = {}
    for rec in records:
        algo = rec.algorithm or {}
        name, shown = algo.get("name"), algo.get("display_name")
        if isinstance(name, str) and isinstance(shown, str) and shown:
            out.setdefault(value_key(name), shown)
    return out
