"""S-Ind: the structure-only lower bound of FedMKGC (each client trains alone).

No communication at all: the client's own entity table and relations, persistent Adam,
scored with its own model (personalized). Any federated method should beat it on shared
entities; if one does not, the aggregation hurts.
"""

from __future__ import annotations

from typing import ClassVar

from baselines.kg.common import KGAlgorithm
from benchmark.registry import ALGORITHMS


@ALGORITHMS.register("s_ind")
class SInd(KGAlgorithm):
    """S-Ind: structure-only KGE per client, no communication (personalized lower bound)."""

    Config: ClassVar[type | None] = None
    personalized = True
    upload_keys = ()
