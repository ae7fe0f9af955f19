"""The pathology guard in a table: which cells hold a collapsed or unconverged run, and which
shared-model cells fall below the linear reference.

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

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from benchmark.guard import record_verdict
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

    @property
    def any(self) -> bool:
        return bool(self.collapsed or self.unconverged or self.below_reference)


def seed_flags(records: Sequence[Record]) -> CellFlags:
    """Counts of collapsed and unconverged ``ok`` records among one cell's seeds."""
    flags = CellFlags()
    for rec in records:
        if not rec.ok:
            continue
        v = record_verdict(rec)
        flags.collapsed += bool(v.get("collapsed"))
        flags.unconverged += v.get("converged") is False
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


__all__ = ["CellFlags", "REFERENCE_ALGORITHMS", "REFERENCE_MARGIN", "below_reference", "reference_of", "seed_flags"]
