"""A plain (structure-only) KGE model and its training epoch.

This is the S-Ind / centralized building block and the reference the benchmark compares
against PyKEEN: an entity table plus a registered decoder, trained on tail queries where
head prediction is tail prediction on inverse relations (each triple (h, r, t) also
yields the query (t, r + R, h)). Federated methods reuse the decoder, loss and
evaluation pieces with entity vectors of their own making.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from benchmark.kge.decoders import KGEDecoder, build_decoder
from benchmark.kge.evaluation import ScoreFn, decoder_scorer
from benchmark.kge.losses import kge_loss, sample_negatives


def make_queries(triples: Tensor, num_relations: int, inverse: bool = True) -> Tensor:
    """Training queries: the triples, plus (t, r + R, h) for each when ``inverse``."""
    t = triples.long()
    if not inverse:
        return t
    inv = torch.stack([t[:, 2], t[:, 1] + num_relations, t[:, 0]], dim=1)
    return torch.cat([t, inv], dim=0)


class KGEModel(nn.Module):
    """Entity table ``[E, d]`` + decoder (which holds the relations)."""

    def __init__(
        self,
        num_entities: int,
        num_relations: int,
        decoder: str = "rotate",
        dim: int = 256,
        gamma: float = 12.0,
        inverse: str = "separate",
        seed: int | None = None,
    ) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        if gen is not None:
            # decoder init uses the global RNG (nn.init); fork it so the seed decides it
            with torch.random.fork_rng():
                torch.manual_seed(seed)
                self.decoder: KGEDecoder = build_decoder(decoder, num_relations, dim, gamma, inverse)
        else:
            self.decoder = build_decoder(decoder, num_relations, dim, gamma, inverse)
        self.entity = nn.Parameter(self.decoder.init_entities(num_entities, gen))

    @property
    def num_entities(self) -> int:
        return int(self.entity.shape[0])

    def scorer(self, candidates: Tensor | None = None) -> ScoreFn:
        """A score function for ``benchmark.kge.evaluation`` over ``candidates``."""
        return decoder_scorer(self.decoder, self.entity, candidates)

    def training_loss(
        self,
        queries: Tensor,
        num_negatives: int = 256,
        loss: str = "softmax_ce",
        shared_negatives: bool = False,
        candidates: Tensor | None = None,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Loss of a batch of tail queries ``[B, 3]`` against uniform negative tails drawn
        from ``candidates`` (global ids; every entity when ``None``)."""
        ent = self.entity
        queries = queries.to(ent.device)
        h, r, t = queries[:, 0], queries[:, 1], queries[:, 2]
        q = self.decoder.query(ent[h], r)
        pos = self.decoder._score_pairs(q, ent[t])
        n_cand = self.num_entities if candidates is None else len(candidates)
        neg = sample_negatives(len(queries), num_negatives, n_cand, shared_negatives, generator, ent.device)
        if candidates is not None:
            neg = candidates.to(ent.device)[neg]
        neg_scores = self.decoder.score_query(q, ent, neg)
        mask = (neg.unsqueeze(0) if shared_negatives else neg) == t.unsqueeze(1)
        return kge_loss(loss, pos, neg_scores, mask, temperature)


def train_epoch(
    model: KGEModel,
    queries: Tensor,
    optimizer: torch.optim.Optimizer,
    batch_size: int = 1024,
    num_negatives: int = 256,
    loss: str = "softmax_ce",
    shared_negatives: bool = False,
    candidates: Tensor | None = None,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> float:
    """One pass over shuffled ``queries``; returns the mean batch loss."""
    model.train()
    perm = torch.randperm(len(queries), generator=generator,
                          device=generator.device if generator is not None else "cpu").to(queries.device)
    total, batches = 0.0, 0
    for s in range(0, len(queries), batch_size):
        batch = queries[perm[s:s + batch_size]]
        optimizer.zero_grad(set_to_none=True)
        value = model.training_loss(batch, num_negatives, loss, shared_negatives, candidates, temperature, generator)
        value.backward()
        optimizer.step()
        total += float(value.detach())
        batches += 1
    return total / max(1, batches)
