"""KG completion (FedMKGC, PROTOCOLS.md Track 1): train a KGE decoder on a client's triples,
score by filtered, tie-aware ranking over the client's own entities.

The task works with any model that exposes ``decoder`` (a ``benchmark.kge`` decoder
holding the client's local relations) and ``entity_vectors(client) -> [n_ent, d]`` (the
entity table the algorithm builds: a structural table, or one fused with modality
features). Keeping the KGE settings (decoder, width, gamma, negatives, loss) in the task
rather than in each algorithm means every algorithm of a suite cell trains and is scored
under the same protocol, so their numbers are comparable.

Training queries: each train triple (h, r, t) and its inverse (t, r + R_c, h), so head
prediction is tail prediction on the inverse relation. Negatives: ``num_negatives``
uniform tails over the client's entities per query (softmax cross-entropy, Eq. 1-2 of the
seed paper, or RotatE's self-adversarial loss). Evaluation: both directions, filtered by
all of the client's known triples, candidates = the client's entities; ``n`` is the number
of triples of the split (the federation score is weighted by it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from benchmark.errors import ConfigError
from benchmark.federation import ClientData
from benchmark.kge import LOSSES, DECODERS, FilterIndex, evaluate_filtered, kge_loss, make_queries, sample_negatives
from benchmark.kge.evaluation import decoder_scorer
from benchmark.registry import TASKS
from benchmark.tasks.base import Task


class KGEClientModel(Protocol):
    """What the task needs from a model."""

    decoder: nn.Module

    def entity_vectors(self, client: Any) -> Tensor: ...


@TASKS.register("kg_completion")
class KGCompletion(Task):
    """KG completion: KGE loss with uniform negatives; filtered tie-aware MRR and Hits@1/3/10 over the client's entities."""

    primary_metric = "mrr"
    metrics = ("mrr", "hits@1", "hits@3", "hits@10")

    @dataclass
    class Config:
        decoder: str = field(default="rotate", metadata={"help": "KGE decoder: rotate, transe or complex"})
        dim: int = field(default=256, metadata={"help": "KGE hidden size k (RotatE/ComplEx entities are 2k wide)"})
        gamma: float = field(default=12.0, metadata={"help": "margin gamma of RotatE/TransE scores"})
        num_negatives: int = field(default=256, metadata={"help": "uniform negative tails per training query"})
        loss: str = field(default="softmax_ce", metadata={"help": "softmax_ce (the seed paper) or self_adversarial"})
        temperature: float = field(default=1.0, metadata={"help": "self-adversarial sampling temperature"})
        batch_size: int = field(default=1024, metadata={"help": "training queries per batch"})
        eval_batch: int = field(default=256, metadata={"help": "queries scored per evaluation batch"})

        def __post_init__(self) -> None:
            if self.loss not in LOSSES:
                raise ConfigError(f"task.loss must be one of {', '.join(LOSSES)}, got '{self.loss}'")
            if self.decoder not in DECODERS:
                raise ConfigError(f"task.decoder must be one of {', '.join(DECODERS.names())}, got '{self.decoder}'")
            if self.dim < 1 or self.num_negatives < 1 or self.batch_size < 1 or self.eval_batch < 1:
                raise ConfigError("task.dim, num_negatives, batch_size and eval_batch must be >= 1")

    def __init__(self, cfg: "KGCompletion.Config | None" = None) -> None:
        super().__init__(cfg if cfg is not None else self.Config())
        self.cfg: KGCompletion.Config

    def out_dim(self, num_classes: int) -> int:
        """Width of an entity vector of the configured decoder."""
        return int(DECODERS.get(self.cfg.decoder).entity_width(self.cfg.dim))

    # ------------------------------------------------------------------ training
    def train_queries(self, client: Any) -> Tensor:
        """The client's training queries: every train triple and its inverse."""
        return make_queries(client.train_triples, client.num_relations, inverse=True)

    def batch_loss(self, model: KGEClientModel, client: Any, queries: Tensor,
                   generator: torch.Generator | None = None, entities: Tensor | None = None) -> Tensor:
        """KGE loss of tail queries ``[B, 3]`` against uniform negatives over the client's
        entities. ``entities`` (the model's entity table) may be passed to reuse it."""
        ent = model.entity_vectors(client) if entities is None else entities
        h, r, t = queries[:, 0], queries[:, 1], queries[:, 2]
        dec = model.decoder
        q = dec.query(ent[h], r)
        pos = dec._score_pairs(q, ent[t])
        neg = sample_negatives(len(queries), self.cfg.num_negatives, ent.shape[0], False, generator, "cpu").to(ent.device)
        neg_scores = dec.score_query(q, ent, neg)
        return kge_loss(self.cfg.loss, pos, neg_scores, neg == t.unsqueeze(1), self.cfg.temperature)

    def loss(self, model: nn.Module, client: ClientData) -> Tensor:
        """Full-batch loss over all training queries (algorithms use ``batch_loss``)."""
        return self.batch_loss(model, client, self.train_queries(client))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        """{val, test: {mrr, hits@1, hits@3, hits@10, n = triples}}, filtered, both directions."""
        was_training = model.training
        model.eval()
        ent = model.entity_vectors(client)  # type: ignore[operator]
        model.train(was_training)
        return self.scores_from_entities(model.decoder, ent, client)  # type: ignore[arg-type]

    @torch.no_grad()
    def scores_from_entities(self, decoder: nn.Module, ent: Tensor, client: Any) -> dict[str, dict[str, float]]:
        """The evaluation given an entity table ``[n_ent, d]`` and the client's decoder."""
        index = FilterIndex(client.known_triples(), client.num_entities, client.num_relations)
        score = decoder_scorer(decoder, ent)
        out: dict[str, dict[str, float]] = {}
        for split in ("val", "test"):
            triples = client.split_triples(split)
            res = evaluate_filtered(score, triples, index, None, self.cfg.eval_batch)
            out[split] = {m: (res[m] if triples.numel() else 0.0) for m in self.metrics}
            out[split]["n"] = float(triples.shape[0])
        return out
