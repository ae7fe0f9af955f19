"""The pathology guard in a table: which cells hold a collapsed, unconverged or unlearned run
(:mod:`benchmark.learned`, against the column's chance reference), and which shared-model cells
fall below the linear reference. A collapsed or unlearned cell is never ranked.

``collapsed`` and ``converged`` come from each record (:mod:`benchmark.guard`); a table cell
is marked when any of its seeds is flagged. ``below_reference`` is a property of a cell
against its column: the reference rows (``REFERENCE_ALGORITHMS``, run by every graph suite's
``references:``) give, per column and metric, the chance score and the linear model's. A
shared-model method (not personalized, not a reference) whose mean is below
``linear - REFERENCE_MARGIN * (linear - chance)`` captured less than half of what a linear
model on the same features gains over chance. It is a warning, not an error: a federated
method may trail a centralized one legitimately, but a cell far below it usually means the
model did not learn.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmark.guard import record_verdict
from benchmark.learned import learning, primary_curve
from benchmark.record import Record

#: reference algorithms (``baselines/reference``, and the pooled ``centralized``), with their table labels
REFERENCE_ALGORITHMS: dict[str, str] = {
    "chance": "Chance (reference)",
    "linear": "Linear (reference)",
    "centralized": "Centralized GNN (reference)",
}
REFERENCE_MARGIN = 0.5


@dataclass
class CellFlags:
    """The guard's counts over one table cell's seeds."""

    collapsed: int = 0
    unconverged: int = 0
    below_reference: bool = False
    reasons: list[str] = field(default_factory=list)
    unlearned: int = 0  # seeds that did not learn (benchmark/learned.py): the cell is never ranked

    @property
    def any(self) -> bool:
        return bool(self.collapsed or self.unconverged or self.below_reference or self.unlearned)

    @property
    def unrankable(self) -> bool:
        """A cell no ranking may count: a seed collapsed, or a seed did not learn."""
        return bool(self.collapsed or self.unlearned)


def chance_score(records: Sequence[Record]) -> float | None:
    """The mean primary validation score of a column's chance-reference records (None: none)."""
    values = []
    for rec in records:
        key, _ = primary_curve(rec)
        v = (rec.metrics or {}).get(key) if rec.ok else None
        if isinstance(v, (int, float)) and math.isfinite(v):
            values.append(float(v))
    return sum(values) / len(values) if values else None


def chance_of_setting(records: Sequence[Record]) -> Callable[[Record], float | None]:
    """For a store's records: the chance score of a record's setting, from the chance records
    whose grid values (all but the method) the record shares (a method option such as an
    ablation variant is no part of a chance record's setting)."""
    settings: dict[str, tuple[dict[str, Any], list[Record]]] = {}
    for rec in records:
        if (rec.params or {}).get("algorithm.name") == "chance":
            own = {k: v for k, v in rec.params.items() if k != "algorithm.name"}
            settings.setdefault(json.dumps(own, sort_keys=True, default=str), (own, []))[1].append(rec)

    def chance(rec: Record) -> float | None:
        params = rec.params or {}
        for own, recs in settings.values():
            if all(params.get(k) == v for k, v in own.items()):
                return chance_score(recs)
        return None

    return chance


@dataclass(frozen=True)
class LearningCounts:
    """A store's cells by the learned verdict (latest record per cell)."""

    judged: int                                  # cells with a verdict (True or False)
    learned: int
    unlearned: list[tuple[Record, str]]          # (record, reason)
    chance_judged: int                           # cells judged against a chance score too


def count_learning(records: Sequence[Record]) -> LearningCounts:
    """The learned verdict over a store's latest records, each against its setting's chance score."""
    chance = chance_of_setting(records)
    judged, learned, bad, with_chance = 0, 0, [], 0
    for rec in records:
        verdict = learning(rec, chance(rec))
        if verdict is None or verdict.learned is None:
            continue
        judged += 1
        with_chance += verdict.se is not None
        if verdict.learned:
            learned += 1
        else:
            bad.append((rec, verdict.reason))
    return LearningCounts(judged=judged, learned=learned, unlearned=bad, chance_judged=with_chance)


def mark_learning(flags: CellFlags, records: Sequence[Record], chance: float | None) -> None:
    """Count the cell's seeds that did not learn against its column's ``chance`` score."""
    for rec in records:
        verdict = learning(rec, chance)
        if verdict is not None and verdict.learned is False:
            flags.unlearned += 1
            flags.reasons.append(f"seed {rec.seed}: not learned: {verdict.reason}")


def seed_flags(records: Sequence[Record], judge_convergence: bool = True) -> CellFlags:
    """Counts of collapsed and unconverged ``ok`` records among one cell's seeds; a suite that
    fixes its rounds by design (``fixed_budget``) is not judged for convergence."""
    flags = CellFlags()
    for rec in records:
        if not rec.ok:
            continue
        v = record_verdict(rec)
        flags.collapsed += bool(v.get("collapsed"))
        flags.unconverged += judge_convergence and v.get("converged") is False
    return flags


def below_reference(mean: float, linear: float | None, chance: float | None, higher_is_better: bool = True,
                    noise: float = 0.0) -> bool:
    """Whether ``mean`` captured less than ``1 - REFERENCE_MARGIN`` of the linear model's gain over
    chance; never where that gain is within ``noise`` (tables pass two seed std of the linear cell):
    no signal to trail."""
    if linear is None or chance is None or not all(math.isfinite(x) for x in (mean, linear, chance)):
        return False
    gain = (linear - chance) if higher_is_better else (chance - linear)
    if gain <= 0 or gain <= (noise if math.isfinite(noise) else 0.0):
        return False
    floor = linear - REFERENCE_MARGIN * (linear - chance)
    return mean < floor if higher_is_better else mean > floor


def reference_of(row: tuple[Hashable, ...], row_keys: Sequence[str]) -> str | None:
    """The reference algorithm a table row shows, or None for a method's row. Where the rows
    are one method option (a sensitivity or ablation table) a reference row holds the
    reference's name in that key (:func:`benchmark.report.reference_rows.place_references`)."""
    if "algorithm.name" in row_keys:
        name = row[list(row_keys).index("algorithm.name")]
    elif len(row_keys) == 1 and len(row) == 1:
        name = row[0]
    else:
        return None
    return name if isinstance(name, str) and name in REFERENCE_ALGORITHMS else None


__all__ = ["CellFlags", "REFERENCE_ALGORITHMS", "REFERENCE_MARGIN", "below_reference", "chance_of_setting", "chance_score", "count_learning",
           "LearningCounts", "mark_learning",
           "reference_of", "seed_flags"]
