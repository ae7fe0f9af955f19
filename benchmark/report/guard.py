"""The convergence part of the pathology guard: did a cell stop training before it converged?

Why: a table that ranks cells whose validation score is still rising ranks how fast methods
start, not where they end (issue 27 found 89% of the small KG cells so). The rule reads only
what every record already stores (``curves``, ``best_round``, ``rounds_run``), so it applies
to every track and to every committed store without re-running anything:

* the best round lies in the last ``TAIL_SHARE`` of the rounds run, or
* the validation curve over the last ``SLOPE_SHARE`` of the rounds (least squares over the
  evaluated rounds there, at least two) still rises by more than ``MAX_SLOPE`` per round,
  in the units of the primary metric (all of them lie in [0, 1]).

A run stopped by ``train.patience`` meets neither by construction. Failed cells are not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

TAIL_SHARE = 0.1    # best round in the last 10% of the rounds run: still improving
SLOPE_SHARE = 0.2   # the window the validation slope is fitted over
MAX_SLOPE = 1e-3    # per round, in metric units: above it the curve is still rising


@dataclass(frozen=True)
class Convergence:
    """The verdict on one record and the two numbers behind it."""

    converged: bool
    best_round: int
    rounds_run: int
    tail_slope: float | None  # None when the window holds fewer than two evaluations
    reason: str               # '' when converged


def _val_curve(record: dict[str, Any]) -> tuple[list[int], list[float]]:
    curves = record.get("curves") or {}
    keys = [k for k in curves if k.startswith("val/")]
    primary = next((k for k in keys if record.get("metrics", {}).get(k) is not None), keys[0] if keys else None)
    if primary is None:
        return [], []
    rounds, values = curves.get("round") or [], curves.get(primary) or []
    pairs = [(int(r), float(v)) for r, v in zip(rounds, values) if isinstance(v, (int, float)) and math.isfinite(v)]
    return [r for r, _ in pairs], [v for _, v in pairs]


def _slope(xs: list[int], ys: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return None if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def convergence(record: dict[str, Any]) -> Convergence | None:
    """The verdict on an ``ok`` record, None for a failed one or one without a curve."""
    if record.get("status") != "ok":
        return None
    rounds, values = _val_curve(record)
    if not rounds:
        return None
    run = int(record.get("rounds_run") or (max(rounds) + 1))
    best = int(record.get("best_round", rounds[values.index(max(values))]))
    tail_start = run - max(1, math.ceil(TAIL_SHARE * run))
    window_start = run - max(2, math.ceil(SLOPE_SHARE * run))
    window = [(r, v) for r, v in zip(rounds, values) if r >= window_start]
    slope = _slope([r for r, _ in window], [v for _, v in window])
    if best >= tail_start:
        reason = f"best round {best} is in the last {TAIL_SHARE:.0%} of {run} rounds"
    elif slope is not None and slope > MAX_SLOPE:
        reason = f"validation still rises by {slope:.4f} per round over the last {SLOPE_SHARE:.0%} of rounds"
    else:
        reason = ""
    return Convergence(converged=not reason, best_round=best, rounds_run=run, tail_slope=slope, reason=reason)


@dataclass(frozen=True)
class GuardCounts:
    """A store's cells by verdict (latest record per cell)."""

    cells: int
    failed: int
    judged: int
    converged: int
    unconverged: list[tuple[dict[str, Any], Convergence]]

    @property
    def converged_share(self) -> float:
        return self.converged / self.judged if self.judged else math.nan


def count(records: list[dict[str, Any]]) -> GuardCounts:
    """Verdicts over a store's latest records."""
    failed = sum(r.get("status") != "ok" for r in records)
    verdicts = [(r, v) for r in records if (v := convergence(r)) is not None]
    bad = [(r, v) for r, v in verdicts if not v.converged]
    return GuardCounts(cells=len(records), failed=failed, judged=len(verdicts), converged=len(verdicts) - len(bad),
                       unconverged=bad)


__all__ = ["Convergence", "GuardCounts", "MAX_SLOPE", "SLOPE_SHARE", "TAIL_SHARE", "convergence", "count"]
