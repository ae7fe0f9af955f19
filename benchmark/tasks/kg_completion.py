"""KG completion (FedMKGC, docs/protocols.md Track 1): train a KGE decoder on a client's triples,
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
of triples of the split (the federation score is weighted by it); ``spread`` the mean over
queries of the standard deviation of each query's candidate scores (0: every candidate
scored alike, which the pathology guard flags as collapsed).

Views: a model may instead expose ``entity_views(client) -> {name: (decoder, [n_ent, d])}``
(the *split* paradigm: one scorer per modality, each with its own relation table). Then
the probability of a candidate is the average of the per-view softmax probabilities over
the same candidates: training minimizes the NLL of that average and evaluation ranks by it
(see ``benchmark.kge.losses.split_kge_loss``). ``views`` turns either kind of model into
a list of ``(decoder, entity table)`` pairs, so the rest of the task has one code path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from benchmark.federation import ClientData
from benchmark.kge import (
    LOSSES, DECODERS, FilterIndex, evaluate_filtered, kge_loss, make_queries, mean_softmax_log_probs, sample_negatives,
    split_kge_loss, views_scorer,
)
from benchmark.kge.evaluation import ScoreFn
from benchmark.registry import TASKS
from benchmark.tasks.base import SPREAD, Task


class KGEClientModel(Protocol):
    """What the task needs from a model."""

    decoder: nn.Module

    def entity_vectors(self, client: Any) -> Tensor: ...


View = tuple[nn.Module, Tensor]  # (decoder holding relations, entity table [n_ent, d])


@TASKS.register("kg_completion")
class KGCompletion(Task):
    """KG completion: KGE loss with uniform negatives; filtered tie-aware MRR and Hits@1/3/10 over the client's entities."""

    primary_metric = "mrr"
    tuned_options = ("train.lr", "train.local_epochs")  # the GNN's model.* options do not reach a KGE model
    metrics = ("mrr", "hits@1", "hits@3", "hits@10")
    # 2: every federated method is scored (and its best round chosen) on its client view;
    # version 1 scored MMFedE, MMFedEC, MMFedProx, FedE and FedR on the server view
    protocol_version = 2

    @dataclass
    class Config:
        decoder: str = field(default="rotate", metadata={"help": "KGE decoder: rotate, transe or complex", "choices": DECODERS.names})
        dim: int = field(default=256, metadata={"help": "KGE hidden size k (RotatE/ComplEx entities are 2k wide)", "min": 1, "max": 65_536})
        gamma: float = field(default=12.0, metadata={"help": "margin gamma of RotatE/TransE scores", "unbounded": True})
        num_negatives: int = field(default=256, metadata={"help": "uniform negative tails per training query", "min": 1, "max": 100_000})
        loss: str = field(default="softmax_ce", metadata={"help": "softmax_ce (the seed paper) or self_adversarial", "choices": LOSSES})
        temperature: float = field(default=1.0, metadata={"help": "self-adversarial sampling temperature", "positive": True})
        batch_size: int = field(default=1024, metadata={"help": "training queries per batch", "min": 1, "max": 1_000_000})
        eval_batch: int = field(default=256, metadata={"help": "queries scored per evaluation batch", "min": 1, "max": 1_000_000})

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

    @staticmethod
    def views(model: Any, client: Any) -> list[View]:
        """The model's scorers as ``(decoder, entity table)`` pairs: one for a fused model,
        one per modality for a split model (``entity_views``)."""
        if hasattr(model, "entity_views"):
            return list(model.entity_views(client).values())
        return [(model.decoder, model.entity_vectors(client))]

    def batch_loss(self, model: KGEClientModel, client: Any, queries: Tensor,
                   generator: torch.Generator | None = None,
                   entities: Tensor | Sequence[View] | None = None) -> Tensor:
        """KGE loss of tail queries ``[B, 3]`` against uniform negatives over the client's
        entities. ``entities`` (the model's entity table, or its list of views) may be
        passed to reuse it. With several views every view scores the same negatives.

        Negatives are drawn by ``generator`` on its own device: a CUDA generator next to a
        CUDA model means no host-to-device copy per batch; a CPU generator draws exactly the
        numbers it always drew (copied to the model's device). Without a generator, the
        global RNG of the model's device draws."""
        if entities is None:
            views = self.views(model, client)
        elif isinstance(entities, Tensor):
            views = [(model.decoder, entities)]
        else:
            views = list(entities)
        n_ent = views[0][1].shape[0]
        device = views[0][1].device
        queries = queries.to(device)
        h, r, t = queries[:, 0], queries[:, 1], queries[:, 2]
        neg = sample_negatives(len(queries), self.cfg.num_negatives, n_ent, False, generator, device)
        mask = neg == t.unsqueeze(1)
        pos_all, neg_all = [], []
        for dec, ent in views:
            q = dec.query(ent[h], r)
            pos_all.append(dec._score_pairs(q, ent[t]))
            neg_all.append(dec.score_query(q, ent, neg))
        if len(views) == 1:
            return kge_loss(self.cfg.loss, pos_all[0], neg_all[0], mask, self.cfg.temperature)
        return split_kge_loss(self.cfg.loss, pos_all, neg_all, mask, self.cfg.temperature)

    @staticmethod
    def candidate_log_probs(views: Sequence[View], queries: Tensor, candidates: Tensor) -> Tensor:
        """``[B, N]`` log-probabilities of the model over per-query candidate ids
        ``candidates`` ``[B, N]`` (log-softmax of one view's scores, or the log of the
        averaged per-view softmax): what a distillation term (KL between two models'
        candidate distributions) compares, for fused and split models alike."""
        h, r = queries[:, 0], queries[:, 1]
        scores = [dec.score_query(dec.query(ent[h], r), ent, candidates) for dec, ent in views]
        return mean_softmax_log_probs(scores)

    def loss(self, model: nn.Module, client: ClientData) -> Tensor:
        """Full-batch loss over all training queries (algorithms use ``batch_loss``)."""
        return self.batch_loss(model, client, self.train_queries(client))  # type: ignore[arg-type]

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        """{val, test: {mrr, hits@1, hits@3, hits@10, n = triples}}, filtered, both directions."""
        was_training = model.training
        model.eval()
        views = self.views(model, client)
        model.train(was_training)
        return self.scores_from_scorer(views_scorer(views), client)

    @torch.no_grad()
    def scores_from_entities(self, decoder: nn.Module, ent: Tensor, client: Any) -> dict[str, dict[str, float]]:
        """The evaluation given an entity table ``[n_ent, d]`` and the client's decoder."""
        return self.scores_from_scorer(views_scorer([(decoder, ent)]), client)

    @torch.no_grad()
    def scores_from_scorer(self, score: ScoreFn, client: Any) -> dict[str, dict[str, float]]:
        """The evaluation given a ``score(h, r) -> [B, n_ent]`` over the client's entities
        (local ids): filtered by all of the client's known triples, both directions."""
        index = FilterIndex(client.known_triples(), client.num_entities, client.num_relations)
        out: dict[str, dict[str, float]] = {}
        for split in ("val", "test"):
            triples = client.split_triples(split)
            res = evaluate_filtered(score, triples, index, None, self.cfg.eval_batch)
            out[split] = {m: (res[m] if triples.numel() else 0.0) for m in self.metrics}
            out[split][SPREAD] = res["spread"] if triples.numel() else float("nan")
            out[split]["n"] = float(triples.shape[0])
        return out
