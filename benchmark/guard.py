"""The pathology guard: did a cell train a model at all, and did it stop before converging?

Why: a table that ranks a collapsed model (every score equal) or cells whose validation
score is still rising ranks training pathologies, not methods (issue 26 found the shared
model collapsed on TikTok retrieval; issue 27 found 89% of the small KG cells unconverged).
The engine writes ``verdict(record)`` into every record as ``guard``; the report layer reads
it (or recomputes it for a record made before it existed) to mark table cells, and adds the
third flag, ``below_reference``, which needs the store's reference rows
(``benchmark/report/flags.py``).

Collapsed: the record's ``test/spread`` (else ``val/spread``) is below ``SPREAD_EPSILON``.
Every built-in task reports ``spread``, the standard deviation of the scores its metrics
rank (cosines for retrieval and matching, edge scores for link prediction, each query's candidate
scores for KG completion, averaged over queries) or, for node and AMFL
classification, the share of nodes not given the most common prediction; 0 means every
score is equal. A KG record made before its task reported a spread is judged not collapsed
when its hits@1 shows that answers outscore every other candidate (``strictly_first``). Any
other record without a spread (an algorithm with its own scoring) is not judged (``None``),
nor is one whose algorithm ties every score by design (``Algorithm.constant_scores``: the
chance reference).

Converged reads only what every record stores (``curves``, ``best_round``, ``rounds_run``),
so it applies to every track and to every committed store without re-running anything:

* the best round lies in the last ``TAIL_SHARE`` of the rounds run, or
* the validation curve over the last ``SLOPE_SHARE`` of the rounds (least squares over the
  evaluated rounds there, at least two) still rises by more than ``MAX_SLOPE`` per round,
  in the units of the primary metric (all of them lie in [0, 1]), and at that slope it would
  reach its best value within another window: a curve that stays far below an earlier best
  is not rising towards anything (its upticks are noise; patience-stopped runs look so).

The slope rule judges runs that used their whole round budget. A run that ``train.patience``
stopped has converged by the rule that stopped it: ``patience`` evaluations in a row without
a new best validation score (the record shows it: fewer rounds run than configured, and at
least ``patience`` evaluations after its best round). Its last few evaluations can still fit
a rising line (noise below an earlier best), which the slope rule would misread as progress.
Failed cells are not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from benchmark.record import Record

SPREAD_EPSILON = 1e-4  # below it every score is, for a ranking, the same: a collapsed model
STRICT_FIRST_MIN = 0.01  # hits@1 at least this, in a record without a spread: scores differ
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


def _val_curve(record: Record) -> tuple[list[int], list[float]]:
    curves = record.curves or {}
    keys = [k for k in curves if k.startswith("val/")]
    primary = next((k for k in keys if record.metrics.get(k) is not None), keys[0] if keys else None)
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


def _within_reach(window: list[tuple[int, float]], slope: float, best_value: float, span: int) -> bool:
    """Whether the window's last value, rising at ``slope`` for ``span`` more rounds, reaches ``best_value``."""
    return bool(window) and window[-1][1] + slope * span >= best_value


def stopped_by_patience(record: Record, rounds: list[int] | None = None) -> bool:
    """Whether early stopping ended the run: fewer rounds run than the budget, and at least
    ``train.patience`` evaluations after the best round (the engine's stopping rule)."""
    train = (record.config or {}).get("train") or {}
    patience, budget = int(train.get("patience") or 0), int(train.get("rounds") or 0)
    run = int(record.rounds_run or 0)
    if patience <= 0 or not budget or run >= budget:
        return False
    if rounds is None:
        rounds = _val_curve(record)[0]
    best = int(record.best_round)
    return sum(r > best for r in rounds) >= patience


def convergence(record: Record) -> Convergence | None:
    """The verdict on an ``ok`` record, None for a failed one or one without a curve."""
    if not record.ok:
        return None
    rounds, values = _val_curve(record)
    if not rounds:
        return None
    run = int(record.rounds_run or (max(rounds) + 1))
    best = record.best_round if record.best_round >= 0 else rounds[values.index(max(values))]
    tail_start = run - max(1, math.ceil(TAIL_SHARE * run))
    window_start = run - max(2, math.ceil(SLOPE_SHARE * run))
    window = [(r, v) for r, v in zip(rounds, values) if r >= window_start]
    slope = _slope([r for r, _ in window], [v for _, v in window])
    if stopped_by_patience(record, rounds):
        reason = ""
    elif best >= tail_start:
        reason = f"best round {best} is in the last {TAIL_SHARE:.0%} of {run} rounds"
    elif slope is not None and slope > MAX_SLOPE and _within_reach(window, slope, max(values), run - window_start):
        reason = f"validation still rises by {slope:.4f} per round over the last {SLOPE_SHARE:.0%} of rounds"
    else:
        reason = ""
    return Convergence(converged=not reason, best_round=best, rounds_run=run, tail_slope=slope, reason=reason)


def spread(record: Record) -> float | None:
    """The record's score spread (test, else validation), None when it has none."""
    metrics = record.metrics or {}
    for key in ("test/spread", "val/spread"):
        v = metrics.get(key)
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
    return None


def strictly_first(record: Record) -> float | None:
    """The record's test ``hits@1`` when it has no spread to judge by, else None.

    A ranking that counts ties (KG completion's mean-of-ties ranks) puts an answer at rank 1
    only when it scores strictly above every candidate left after filtering; a model scoring
    every candidate alike gives rank 1 + (n - 1) / 2 instead, so its hits@1 counts only
    queries with a single candidate left (none in practice). KG records made before the KG
    task reported a spread are judged by it."""
    if spread(record) is not None:
        return None
    v = (record.metrics or {}).get("test/hits@1")
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def collapsed(record: Record) -> bool | None:
    """True when every score of the best round is (nearly) equal; None for a failed record or
    one without a spread. A record without a spread but with hits@1 of at least
    ``STRICT_FIRST_MIN`` is not collapsed (:func:`strictly_first`); below it, it is not judged
    (a weak model and a collapsed one both score low)."""
    if not record.ok or (record.algorithm or {}).get("constant_scores"):
        return None  # a failed run, or a reference that ties every score by design (chance)
    s = spread(record)
    if s is not None:
        return s < SPREAD_EPSILON
    first = strictly_first(record)
    return False if first is not None and first >= STRICT_FIRST_MIN else None


def verdict(record: Record) -> dict[str, Any]:
    """What the engine stores as a record's ``guard``: ``collapsed`` and ``converged`` (None
    where not judged), the spread, and why a flag is raised."""
    conv = convergence(record)
    col = collapsed(record)
    reasons = []
    if col:
        reasons.append(f"collapsed: score spread {spread(record):.2g} < {SPREAD_EPSILON:g}")
    if conv is not None and not conv.converged:
        reasons.append(f"not converged: {conv.reason}")
    return {"collapsed": col, "converged": None if conv is None else conv.converged,
            "spread": spread(record), "reasons": reasons}


def record_verdict(record: Record) -> dict[str, Any]:
    """The verdict under today's rules. The ``guard`` a record stores is what the engine judged
    when it wrote it; the verdict reads only the record (curves, rounds, config, spread), so
    reports judge again and a rule that is corrected applies to every committed store alike."""
    return verdict(record)


@dataclass(frozen=True)
class GuardCounts:
    """A store's cells by verdict (latest record per cell)."""

    cells: int
    failed: int
    judged: int
    converged: int
    unconverged: list[tuple[Record, Convergence]]
    collapsed: list[Record] = field(default_factory=list)
    spread_judged: int = 0   # cells whose collapse can be judged (a spread, or hits@1 proving distinct scores)

    @property
    def converged_share(self) -> float:
        return self.converged / self.judged if self.judged else math.nan


def count(records: list[Record]) -> GuardCounts:
    """Verdicts over a store's latest records."""
    failed = sum(not r.ok for r in records)
    verdicts = [(r, v) for r in records if (v := convergence(r)) is not None]
    bad = [(r, v) for r, v in verdicts if not v.converged]
    flat = [r for r in records if collapsed(r)]
    return GuardCounts(cells=len(records), failed=failed, judged=len(verdicts), converged=len(verdicts) - len(bad),
                       unconverged=bad, collapsed=flat,
                       spread_judged=sum(collapsed(r) is not None for r in records))


__all__ = ["Convergence", "GuardCounts", "MAX_SLOPE", "SLOPE_SHARE", "SPREAD_EPSILON", "STRICT_FIRST_MIN",
           "TAIL_SHARE", "collapsed", "convergence", "count", "record_verdict", "spread", "stopped_by_patience",
           "strictly_first", "verdict"]
