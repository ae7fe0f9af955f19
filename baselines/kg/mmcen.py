"""MMCen: the centralized upper bound of FedMKGC (seed Sec. V-A, Tables III and VI).

One multimodal model trained on the union of all clients' triples, where "multimodal
information is not partitioned or missing": every entity's feature is the mean of *all*
its items (no Dirichlet dealing, no Bernoulli availability). The engine hands a
``centralized`` algorithm the federation's pooled view (``FederatedData.pooled``, built by
``data_prep.kg.build.pooled_kg_client``): global entity and relation ids, each triple in
the split it has on its client. Training is the ordinary local loop on that one "client"
(uniform negatives over all entities); nothing is ever uploaded.

Evaluation follows the federated protocol so the numbers are comparable row by row: for
each client, its own test (and validation) triples, ranked over *its own* entities
(candidate set = the client's entities, filtered by the client's known triples), with the
central model's entity vectors for those entities and its relations for the client's
relation ids; the engine weights clients by their test triples. ``algorithm.fusion``
applies as for MMFedE (``weighted`` by default; ``split`` scores per modality).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from baselines.kg.common import KGAlgorithm
from baselines.kg.kge_client import KGEClient
from benchmark.comm import Payload
from benchmark.errors import BenchmarkError
from benchmark.kg_client import KGClientData
from benchmark.kge import views_scorer
from benchmark.registry import ALGORITHMS


def relation_map(client: KGClientData, pooled_relations: Tensor) -> Tensor:
    """``[2 R_c]``: the pooled model's relation id of each of the client's relation ids
    (base ids ``0..R_c-1``, then inverse ids ``R_c..2R_c-1`` -> ``+ R_pooled``)."""
    pos = torch.searchsorted(pooled_relations, client.relations)
    if not torch.equal(pooled_relations[pos.clamp_max(len(pooled_relations) - 1)], client.relations):
        raise BenchmarkError(f"client {client.cid} holds a relation the pooled view lacks")
    return torch.cat([pos, pos + len(pooled_relations)])


def entity_rows(client: KGClientData, pooled_entities: Tensor) -> Tensor:
    """Rows of the pooled entity table that hold the client's entities (local id order)."""
    pos = torch.searchsorted(pooled_entities, client.global_ids)
    if not torch.equal(pooled_entities[pos.clamp_max(len(pooled_entities) - 1)], client.global_ids):
        raise BenchmarkError(f"client {client.cid} holds an entity the pooled view lacks")
    return pos


@ALGORITHMS.register("mmcen")
class MMCen(KGAlgorithm):
    """MMCen: one multimodal KGE model on all clients' triples with complete, unpartitioned features; scored per client on its own entities."""

    centralized = True
    multimodal = True
    revision = 2  # 2: projected modality rows bounded to the structural scale (proj_norm: rms), HidE's cheaper forward (issue 27)
    upload_keys: ClassVar[tuple[str, ...]] = ()

    def client_update(self, client: KGClientData, state: dict, received: Payload, rnd: int) -> Payload:
        """Train on the pooled view; remember it (evaluation needs its features) and bump a
        version so that cached entity views are recomputed after training."""
        state["pooled"] = client
        state["version"] = state.get("version", 0) + 1
        super().client_update(client, state, received, rnd)
        return {}

    @torch.no_grad()
    def _pooled_views(self, state: dict) -> list[tuple[torch.nn.Module, Tensor]]:
        """The central model's views over every pooled entity, once per trained version."""
        if "pooled" not in state:
            raise BenchmarkError("mmcen evaluates after training on the pooled view; no round has run")
        if state.get("_views_version") != state["version"]:
            model: KGEClient = state["model"]
            was = model.training
            model.eval()
            state["_views"] = [(dec, ent.detach()) for dec, ent in self.ctx.task.views(model, state["pooled"])]
            model.train(was)
            state["_views_version"] = state["version"]
        return state["_views"]

    @torch.no_grad()
    def evaluate(self, client: KGClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        pooled: KGClientData = state.get("pooled")  # type: ignore[assignment]
        views = self._pooled_views(state)
        rows = entity_rows(client, pooled.global_ids)
        local = [(dec, ent[rows]) for dec, ent in views]
        score = views_scorer(local, relation_map(client, pooled.relations))
        return self.ctx.task.scores_from_scorer(score, client)
