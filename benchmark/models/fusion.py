"""Fusions: combine per-modality hidden vectors [n, M, h] into one [n, h_out].

With ``mask_missing`` a fusion ignores the modalities a node lacks; without it a missing
modality enters as the encoding of its fill value (zeros), which is the FedAvg-Zero setting.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from benchmark.registry import FUSIONS


def _masked_weights(scores: Tensor, available: Tensor | None) -> Tensor:
    """Softmax over modalities, restricted to available ones (uniform if none is)."""
    if available is not None:
        scores = scores.masked_fill(~available, float("-inf"))
        none = ~available.any(dim=1, keepdim=True)
        scores = torch.where(none, torch.zeros_like(scores), scores)
    return torch.softmax(scores, dim=1)


@FUSIONS.register("concat")
class ConcatFusion(nn.Module):
    """Concatenate modality vectors, then project back to the hidden size."""

    def __init__(self, hidden: int, num_modalities: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden * num_modalities, hidden)

    def forward(self, h: Tensor, available: Tensor | None = None) -> Tensor:
        if available is not None:
            h = h * available.unsqueeze(-1).to(h.dtype)
        return self.proj(h.flatten(1))


@FUSIONS.register("mean")
class MeanFusion(nn.Module):
    """Average of the modality vectors (over the available ones when masking)."""

    def __init__(self, hidden: int, num_modalities: int) -> None:
        super().__init__()

    def forward(self, h: Tensor, available: Tensor | None = None) -> Tensor:
        w = _masked_weights(torch.zeros(h.shape[:2], device=h.device), available)
        return (w.unsqueeze(-1) * h).sum(1)


@FUSIONS.register("attention")
class AttentionFusion(nn.Module):
    """Learned attention over modalities (scores from a small tanh MLP)."""

    def __init__(self, hidden: int, num_modalities: int) -> None:
        super().__init__()
        self.score = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1, bias=False))

    def forward(self, h: Tensor, available: Tensor | None = None) -> Tensor:
        w = _masked_weights(self.score(h).squeeze(-1), available)
        return (w.unsqueeze(-1) * h).sum(1)
