"""FedE (Chen et al., 2021): federated KGE with the entity table as the only shared state.

Structure only. Each round a client loads the global rows of its entities, trains them
with its local relations (which never leave it) for ``train.local_epochs`` epochs with a
*fresh* Adam (the FedE code re-creates the optimizer every round), and uploads its rows;
the server sets each entity row to the mean over the clients that hold it (the existence
vector: each client names its entities once, by global id, in the setup exchange).
Evaluated with the global rows and the client's relations; both directions via inverse
relations (the seed's protocol, not FedE's tail-only Hits@5).
"""

from __future__ import annotations

from typing import ClassVar

from baselines.kg.common import KGAlgorithm
from benchmark.registry import ALGORITHMS


@ALGORITHMS.register("fede")
class FedE(KGAlgorithm):
    """FedE: structural entity table averaged over holders; local relations; Adam reset each round."""

    Config: ClassVar[type | None] = None
    federated = True
    has_setup = True
    reset_adam = True
    upload_keys = ("entity_ids", "entity", "num_train")
