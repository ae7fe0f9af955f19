"""KGE training losses and uniform negative sampling.

The seed paper (MMFeD3-HidE, Eq. 1-2) trains with the softmax cross-entropy of the true
tail against N uniformly sampled negative tails (N = 256); RotatE's self-adversarial
negative-sampling loss is the common alternative and is offered as an option.

Negatives are either per query (``[B, N]`` ids: the paper's setting) or *shared* by the
whole batch (``[N]`` ids): then the ``[B, N]`` score matrix comes from one candidate
table, which the fused kernels handle without any gather of ``[B, N, d]`` vectors.
A sampled negative that equals the query's true tail is masked out of the loss (it is
not a negative); other true answers are not filtered (standard uniform sampling).
"""

from __future__ import annotations

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
    """Uniform candidate positions: ``[N]`` when shared, else ``[B, N]`` (with replacement)."""
    shape = (num_negatives,) if shared else (batch_size, num_negatives)
    return torch.randint(0, num_candidates, shape, generator=generator, device=device)


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
