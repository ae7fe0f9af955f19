"""The guard's third verdict: did a cell learn anything, measured against chance?

Why: a run can be neither collapsed nor unconverged and still have learned nothing. FedMPO's
link prediction peaked at round 1 with a validation AUC of 0.55 and then drifted; early
stopping ended it there and the convergence rule called it converged. Ranking such a cell
ranks noise.

A record has **learned** when both hold:

* its best validation score (the primary metric at the best round) beats the chance score of
  its column by at least ``LEARNED_SES`` standard errors of the chance score, the standard
  error coming from the size of the validation set:
  - AUC: the Mann-Whitney null, ``sqrt((n_pos + n_neg + 1) / (12 n_pos n_neg))``, with
    ``n_pos = n_neg = n`` (the link and matching tasks draw one negative per positive);
  - MRR: the reciprocal rank of a uniformly random rank among the ``g`` candidates whose
    random ranking gives the chance MRR;
  - any other score in [0, 1] whose chance mean is ``c`` (accuracy, macro-F1, R@k, Hits@k):
    ``sqrt(c (1 - c) / n)``, the binomial standard error, which bounds the standard error of
    the mean of any [0, 1] score with mean ``c`` (exact for accuracy and R@k);
* its validation curve rises above its first evaluation (the model after one round); a flat
  curve (a closed-form fit such as the linear reference) is not held to this.

The chance score comes from the column's chance reference (``baselines/reference``), which
every graph suite runs. Where a store has no chance row (the KG and AMFL tracks), only the rise
is judged and a run that rose is ``None`` (not judged) on the chance part, never called learned
on evidence it does not have.

``n`` is the record's validation size (``eval_sizes["val"]``, written by the engine since this
verdict exists). For an older record it is estimated from its test size (``client_sizes``)
times ``split.val / split.test`` where the config holds both, else taken as the test size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchmark.record import Record

LEARNED_SES = 3.0  # standard errors of the chance score a best validation score must clear


@dataclass(frozen=True)
class Learning:
    """The verdict on one record and the numbers behind it."""

    learned: bool | None   # None: the chance part could not be judged (and the curve rose)
    metric: str            # the validation curve judged ('val/auc', ...)
    best: float            # the best validation score
    first: float           # the first evaluation's score
    chance: float | None   # the column's chance score
    se: float | None       # the chance score's standard error at this validation size
    reason: str            # '' when learned (or not judged)


def primary_curve(record: Record) -> tuple[str, list[float]]:
    """The primary metric's validation curve (the key the best round was chosen by)."""
    curves = record.curves or {}
    keys = [k for k in curves if k.startswith("val/")]
    key = next((k for k in keys if record.metrics.get(k) is not None), keys[0] if keys else "")
    values = [float(v) for v in (curves.get(key) or []) if isinstance(v, (int, float)) and math.isfinite(v)]
    return key, values


def validation_size(record: Record) -> float | None:
    """The validation set's size: stored by the engine, else estimated from the test size."""
    sizes = getattr(record, "eval_sizes", None) or {}
    if isinstance(sizes.get("val"), (int, float)) and sizes["val"] > 0:
        return float(sizes["val"])
    test = sum(float(x) for x in (record.client_sizes or []) if isinstance(x, (int, float)))
    if test <= 0:
        return None
    split = (record.config or {}).get("split") or {}
    val, tst = split.get("val"), split.get("test")
    if isinstance(val, (int, float)) and isinstance(tst, (int, float)) and val > 0 and tst > 0:
        return test * float(val) / float(tst)
    return test


def _harmonic(g: float, power: int) -> float:
    """H_g (power 1) or H_g^(2) (power 2), by their asymptotic series (exact to ~1e-6 for g >= 1)."""
    if power == 1:
        return math.log(g) + 0.5772156649015329 + 1 / (2 * g) - 1 / (12 * g * g)
    return math.pi ** 2 / 6 - 1 / g + 1 / (2 * g * g)


def gallery_for_mrr(chance: float) -> float:
    """The candidate count ``g`` whose uniformly random ranking has mean reciprocal rank ``chance``
    (``H_g / g`` falls with ``g``: bisection on a log scale)."""
    lo, hi = 1.0, 1e9
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if _harmonic(mid, 1) / mid > chance:
            lo = mid
        else:
            hi = mid
    return lo


def chance_se(metric: str, chance: float, n: float) -> float:
    """The standard error of the chance score of ``metric`` over ``n`` validation items: the
    Mann-Whitney null for AUC; for MRR the reciprocal rank of a uniformly random rank among the
    ``g`` candidates that give the chance MRR (``Var = H2_g / g - (H_g / g)^2``); else binomial."""
    name = metric.split("/", 1)[-1]
    if name == "auc":
        return math.sqrt((2 * n + 1) / (12 * n * n))
    c = min(max(chance, 0.0), 1.0)
    if name == "mrr" and 0.0 < c < 1.0:
        g = gallery_for_mrr(c)
        var = _harmonic(g, 2) / g - (_harmonic(g, 1) / g) ** 2
        return math.sqrt(max(var, 0.0) / n)
    return math.sqrt(c * (1 - c) / n)


def learning(record: Record, chance: float | None) -> Learning | None:
    """The verdict on an ``ok`` record against its column's chance score (None: failed, no curve,
    or a reference row, which is not judged against itself)."""
    if not record.ok or (record.algorithm or {}).get("constant_scores"):
        return None
    key, values = primary_curve(record)
    if not values:
        return None
    best_value = record.metrics.get(key)
    best = float(best_value) if isinstance(best_value, (int, float)) else max(values)
    first = values[0]
    se = None
    n = validation_size(record)
    if chance is not None and math.isfinite(chance) and n:
        se = chance_se(key, chance, n)
    if best <= first and len(set(values)) > 1:  # a flat curve is a closed-form fit: nothing to rise
        reason = f"{key} never rose above its first evaluation ({first:.4f})"
        return Learning(False, key, best, first, chance, se, reason)
    if se is None:
        return Learning(None, key, best, first, chance, se, "")
    if best - chance < LEARNED_SES * se:
        reason = (f"best {key} {best:.4f} is within {LEARNED_SES:g} standard errors ({se:.4f}) "
                  f"of chance ({chance:.4f})")
        return Learning(False, key, best, first, chance, se, reason)
    return Learning(True, key, best, first, chance, se, "")


__all__ = ["LEARNED_SES", "Learning", "chance_se", "learning", "primary_curve", "validation_size"]
