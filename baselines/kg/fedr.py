"""FedR (Zhang et al., 2022, "Efficient Federated Learning on Knowledge Graphs via
Privacy-preserving Relation Embedding Aggregation"): relations are aggregated instead of
entities.

Each client keeps its entity table to itself (entity embeddings are what FedE leaks
through, and they are far more numerous than relations) and shares only its relation
embeddings. In the setup exchange a client names its relations by global id; the server
creates one seeded row per global relation, so clients that share a relation start from
the same embedding. Each round a client loads the global rows of its relations, trains
locally (entities, relations) and uploads its relation rows; the server sets each row to
the mean over the clients that uploaded it (FedR's average over the holders of a relation;
its private set union and secure aggregation hide *which* client holds what, and change
no number, so they are not simulated). Evaluation: the client's own entity table with the
received relation rows (so it is personalized).

A relation's row is its base embedding and, with the task's reciprocal relations, the
embedding of its inverse (``r + R_c``), concatenated: both describe the same relation type.

Note on this benchmark: the relation-ID partition (docs/protocols.md Track 1) gives every
relation type to exactly one client, so each global row has a single holder and the
server's mean returns that client's own row: FedR then trains like S-Ind (each client
alone). It is implemented faithfully all the same (the aggregation is tested on a hand
example where two clients share a relation), so that it behaves as FedR on partitions
where relation types overlap. Adam keeps its state across rounds (docs/algorithms.md: unless
the method says otherwise; FedR does not).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from baselines.kg.common import KGAlgorithm, both_views
from baselines.kg.kge_client import KGEClient
from benchmark.algorithm import Broadcast
from benchmark.comm import Payload
from benchmark.errors import BenchmarkError
from benchmark.kg_client import KGClientData
from benchmark.kge import build_decoder
from benchmark.registry import ALGORITHMS
from benchmark.seeding import fnv_seed


def relation_rows(relation: Tensor, num_relations: int) -> Tensor:
    """``[R, k * w]``: a decoder's relation table ``[k R, w]`` with each relation's rows
    (base, and inverse when the decoder stores one) side by side."""
    k = relation.shape[0] // num_relations
    w = relation.shape[1]
    return relation.detach().reshape(k, num_relations, w).transpose(0, 1).reshape(num_relations, k * w).clone()


@torch.no_grad()
def load_relation_rows(model: KGEClient, rows: Tensor) -> None:
    """Inverse of ``relation_rows``: copy received rows into the model's decoder in place."""
    rel = model.decoder.relation
    n = rows.shape[0]
    k = rel.shape[0] // n
    rel.copy_(rows.reshape(n, k, rel.shape[1]).transpose(0, 1).reshape_as(rel))


@ALGORITHMS.register("fedr")
class FedR(KGAlgorithm):
    """FedR: relation embeddings averaged over the clients holding each global relation id; entity tables stay local."""

    Config: ClassVar[type | None] = None
    has_setup = True
    personalized = True
    upload_keys: ClassVar[tuple[str, ...]] = ("relation_ids", "relation")

    def __init__(self, cfg: object, ctx: object) -> None:
        super().__init__(cfg, ctx)
        self.relation_ids_seen: dict[int, Tensor] = {}
        self.relation_table: Tensor | None = None

    def setup_upload(self, client: KGClientData, state: dict) -> Payload:
        """The client's relation types, by global id."""
        return {"relation_ids": client.relations.clone()}

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        """A seeded global row per relation id (same init scale as a client's decoder)."""
        for cid, up in uploads.items():
            self.relation_ids_seen[cid] = up["relation_ids"].long()
        n = int(max((int(ids.max()) + 1 for ids in self.relation_ids_seen.values() if ids.numel()), default=0))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(fnv_seed(self.ctx.seed, 7))
            dec = build_decoder(self.task_cfg.decoder, max(n, 1), self.task_cfg.dim, self.task_cfg.gamma)
        self.relation_table = relation_rows(dec.relation, max(n, 1)).to(self.ctx.device)
        return self._relation_replies()

    def setup_receive(self, client: KGClientData, state: dict, payload: Payload) -> None:
        load_relation_rows(self.client_model(client, state), payload["relation"])

    def _relation_replies(self) -> dict[int, Payload]:
        assert self.relation_table is not None
        return {cid: {"relation": self.relation_table[ids].clone()} for cid, ids in self.relation_ids_seen.items()}

    def client_update(self, client: KGClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model = self.client_model(client, state)
        if received:
            load_relation_rows(model, received["relation"])
        opt = self.optimizer(model, state)
        self.local_train(client, model, opt, rnd)
        return {"relation": relation_rows(model.decoder.relation, client.num_relations)}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Broadcast:
        """Each relation row = mean over the clients that uploaded it; rows no participant
        holds keep their value."""
        if not uploads:
            return {}
        if self.relation_table is None:
            raise BenchmarkError("fedr aggregates after the setup exchange; none happened")
        total = torch.zeros_like(self.relation_table)
        count = torch.zeros(self.relation_table.shape[0], device=total.device)
        for cid, up in uploads.items():
            ids = self.relation_ids_seen[cid].to(total.device)
            total.index_add_(0, ids, up["relation"].to(total.device))
            count.index_add_(0, ids, torch.ones(len(ids), device=total.device))
        held = count > 0
        self.relation_table[held] = total[held] / count[held].unsqueeze(1)
        return self._relation_replies()

    def evaluate(self, client: KGClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        """The client's own entities with the received (aggregated) relation rows."""
        model = self.client_model(client, state)
        if not received:
            return self.ctx.task.evaluate(model, client)
        return both_views(self.ctx.task, model, client, lambda: load_relation_rows(model, received["relation"]))
