"""KGE training losses and uniform negative sampling.

The seed paper (MMFeD3-HidE, Eq. 1-2) trains with the softmax cross-entropy of the true
tail against N uniformly sampled negative tails (N = 256); RotatE's self-adversarial
negative-sampling loss is the common alternative and is offered as an option.

Negatives are either per query (``[B, N]`` ids: the paper's setting) or *shared* by the
whole batch (``[N]`` ids): then the ``[B, N]`` score matrix comes from one candidate
table, which the fused kernels handle without any gather of ``[B, N, d]`` vectors.
A sampled negative that equals the query's true tail is masked out of the loss (it is
not a negative); other true answers are not filtered (standard uniform sampling).

The split paradigm (one scorer per modality, seed App. C.A) trains the NLL of the
*averaged* per-modality softmax probability: ``mean_softmax_log_probs`` and
``split_kge_loss``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from benchmark.errors import ConfigError

LOSSES = ("softmax_ce", "self_adversarial")


def sample_negatives(
    batch_size: int,
    num_negatives: int,
    num_candidates: int,
    shared: bool = False,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """Uniform candidate positions: ``[N]`` when shared, else ``[B, N]`` (with replacement),
    on ``device``. A ``generator`` draws on its own device (a seeded CUDA generator keeps the
    draw on the GPU; a CPU one gives the same numbers as ever, copied to ``device`` if needed);
    without one, the global RNG of ``device`` draws."""
    shape = (num_negatives,) if shared else (batch_size, num_negatives)
    where = generator.device if generator is not None else torch.device(device)
    return torch.randint(0, num_candidates, shape, generator=generator, device=where).to(device)


def softmax_ce_loss(pos: Tensor, neg: Tensor, neg_mask: Tensor | None = None) -> Tensor:
    """Mean over the batch of ``-log softmax([pos, neg])[0]``; masked negatives drop out."""
    if neg_mask is not None:
        neg = neg.masked_fill(neg_mask, float("-inf"))
    logits = torch.cat([pos.unsqueeze(1), neg], dim=1)
    return (torch.logsumexp(logits, dim=1) - pos).mean()


def self_adversarial_loss(pos: Tensor, neg: Tensor, temperature: float = 1.0, neg_mask: Tensor | None = None) -> Tensor:
    """RotatE's loss: ``-(log sigma(pos) + sum_j p_j log sigma(-neg_j)) / 2`` with
    ``p = softmax(temperature * neg)`` detached; masked negatives get weight 0."""
    logits = temperature * neg.detach()
    if neg_mask is not None:
        logits = logits.masked_fill(neg_mask, float("-inf"))
    weights = torch.softmax(logits, dim=1)
    if neg_mask is not None:
        weights = torch.nan_to_num(weights, nan=0.0)  # a row whose negatives are all masked
    neg_term = (weights * F.logsigmoid(-neg)).sum(dim=1)
    return -(F.logsigmoid(pos).mean() + neg_term.mean()) / 2


def kge_loss(name: str, pos: Tensor, neg: Tensor, neg_mask: Tensor | None = None, temperature: float = 1.0) -> Tensor:
    """Dispatch on the loss name (``softmax_ce`` or ``self_adversarial``)."""
    if name == "softmax_ce":
        return softmax_ce_loss(pos, neg, neg_mask)
    if name == "self_adversarial":
        return self_adversarial_loss(pos, neg, temperature, neg_mask)
    raise ConfigError(f"unknown kge loss '{name}'; valid: {', '.join(LOSSES)}")


def mean_softmax_log_probs(scores: list[Tensor], mask: Tensor | None = None) -> Tensor:
    """``log((1/M) sum_m softmax(scores_m))`` over the last dimension, for M score tensors
    of one shape: the log-probability of the *split* paradigm (MoSE; seed App. C.A), where
    each modality scores the candidates on its own and the probabilities are averaged.
    Computed in the log domain (logsumexp over modalities of the log-softmaxes), so a
    modality whose softmax underflows cannot produce ``log 0``. ``mask`` (True = drop)
    removes entries from every softmax (e.g. a sampled negative equal to the positive)."""
    if not scores:
        raise ConfigError("mean_softmax_log_probs needs at least one score tensor")
    logp = []
    for s in scores:
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        logp.append(torch.log_softmax(s, dim=-1))
    stacked = torch.stack(logp)
    if mask is None:
        return torch.logsumexp(stacked, dim=0) - math.log(len(scores))
    # a dropped entry is -inf in every modality, and logsumexp's gradient there is 0/0:
    # take it over zeros instead and put -inf back afterwards
    out = torch.logsumexp(stacked.masked_fill(mask, 0.0), dim=0) - math.log(len(scores))
    return out.masked_fill(mask, float("-inf"))


def split_kge_loss(name: str, pos: list[Tensor], neg: list[Tensor], neg_mask: Tensor | None = None,
                   temperature: float = 1.0) -> Tensor:
    """Loss of the split paradigm: per modality m a positive score ``pos[m]`` ``[B]`` and
    negative scores ``neg[m]`` ``[B, N]`` over the *same* candidates.

    ``softmax_ce``: the seed's Eq. 2 with the split probability, i.e. the NLL of the averaged
    probability ``-log((1/M) sum_m softmax_m([pos, neg])[0])`` (MoSE trains each modality
    on its own loss, but the seed writes the KGC loss on ``p^c`` and defines ``p^c`` as the
    average, so the average is what is trained). ``self_adversarial`` has no probability to
    average, so it is the mean of the per-modality losses."""
    if len(pos) != len(neg) or not pos:
        raise ConfigError("split_kge_loss needs one (pos, neg) pair per modality")
    if name == "softmax_ce":
        logits = [torch.cat([p.unsqueeze(1), n], dim=1) for p, n in zip(pos, neg)]
        full_mask = None
        if neg_mask is not None:
            full_mask = torch.cat([torch.zeros_like(neg_mask[:, :1]), neg_mask], dim=1)
        return -mean_softmax_log_probs(logits, full_mask)[:, 0].mean()
    if name == "self_adversarial":
        return torch.stack([self_adversarial_loss(p, n, temperature, neg_mask) for p, n in zip(pos, neg)]).mean()
    raise ConfigError(f"unknown kge loss '{name}'; valid: {', '.join(LOSSES)}")
