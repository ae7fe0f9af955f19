"""The fusions Phi(S, V, D) of FedMKGC (docs/algorithms.md, KG track), registered by name.

Why a registry of their own (``KG_FUSIONS``, not ``benchmark.registry.FUSIONS``): these
act on entity vectors already in the KGE entity space (the structural row S and the
projected modality features W_m x_m), while the graph-track fusions combine encoder
outputs of a node classifier; the two have different signatures and must not be mixed.

A fusion is an ``nn.Module`` built as ``cls(width, modalities)`` and called as
``fusion(structure [n, d], projected {modality: [n, d]}) -> [n, d]``. Its parameters are
what the federated KG methods upload and average under ``fusion.<parameter name>`` (the
``weighted`` fusion's ``logits`` become ``fusion.logits``), so a parameter-free fusion
simply uploads nothing.

``split`` (one scorer per modality with its own relation table, averaging the softmax
probabilities) is a change of the decoder and of the task's loss and scorer, not a map to
one entity vector, so it is not among these.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor, nn

from benchmark.registry import Registry

KG_FUSIONS: Registry[Any] = Registry("kg fusion")


class KGFusion(nn.Module, ABC):
    """Base: ``width`` is the entity width d, ``modalities`` the ordered modality names."""

    def __init__(self, width: int, modalities: list[str]) -> None:
        super().__init__()
        self.width = width
        self.modalities = list(modalities)

    @abstractmethod
    def forward(self, structure: Tensor, projected: dict[str, Tensor]) -> Tensor:
        """``[n, d]`` fused entity vectors from ``S [n, d]`` and ``{modality: W_m x_m [n, d]}``."""


@KG_FUSIONS.register("average")
class AverageFusion(KGFusion):
    """Average: fixed weight 1/(M+1) on S and on every projected modality (no parameters)."""

    def forward(self, structure: Tensor, projected: dict[str, Tensor]) -> Tensor:
        out = structure
        for m in self.modalities:
            out = out + projected[m]
        return out / (len(self.modalities) + 1)


@KG_FUSIONS.register("weighted")
class WeightedFusion(KGFusion):
    """Weighted: ``a_0 S + sum_m a_m V_m`` with ``a = softmax(logits)`` learnable (normalized
    weights, so the fused vector stays on the scale of its parts); logits start at zero,
    i.e. at the average fusion."""

    def __init__(self, width: int, modalities: list[str]) -> None:
        super().__init__(width, modalities)
        self.logits = nn.Parameter(torch.zeros(len(self.modalities) + 1))

    def weights(self) -> Tensor:
        return torch.softmax(self.logits, dim=0)

    def forward(self, structure: Tensor, projected: dict[str, Tensor]) -> Tensor:
        a = self.weights()
        out = a[0] * structure
        for j, m in enumerate(self.modalities):
            out = out + a[j + 1] * projected[m]
        return out


@KG_FUSIONS.register("concat")
class ConcatFusion(KGFusion):
    """Concatenation: a two-layer MLP (ReLU, hidden width d) over ``[S || V_1 || ... || V_M]``.

    The MLP's output layer starts at a small scale plus a skip of the average, so training
    starts from the average fusion instead of from a random map that would scramble the
    structural rows the server has already aligned across clients."""

    def __init__(self, width: int, modalities: list[str]) -> None:
        super().__init__(width, modalities)
        self.hidden = nn.Linear(width * (len(self.modalities) + 1), width)
        self.out = nn.Linear(width, width)
        with torch.no_grad():
            self.out.weight.mul_(0.1)
            self.out.bias.zero_()

    def forward(self, structure: Tensor, projected: dict[str, Tensor]) -> Tensor:
        parts = [structure] + [projected[m] for m in self.modalities]
        avg = torch.stack(parts).mean(dim=0)
        return avg + self.out(torch.relu(self.hidden(torch.cat(parts, dim=1))))


@KG_FUSIONS.register("gated")
class GatedFusion(KGFusion):
    """Gated: ``V_m' = W0_m(sigmoid(W1_m S) * W2_m V_m)`` per modality, then the average of
    ``S`` and the ``V_m'``: the structure decides, per coordinate, how much of each
    modality passes. W0 and W2 start at the identity and W1 near zero (gates near 1/2), so the
    start is a damped average rather than a random mixing of coordinates."""

    def __init__(self, width: int, modalities: list[str]) -> None:
        super().__init__(width, modalities)
        self.w0 = nn.ModuleDict({m: nn.Linear(width, width) for m in self.modalities})
        self.w1 = nn.ModuleDict({m: nn.Linear(width, width) for m in self.modalities})
        self.w2 = nn.ModuleDict({m: nn.Linear(width, width, bias=False) for m in self.modalities})
        with torch.no_grad():
            for m in self.modalities:
                self.w0[m].weight.copy_(torch.eye(width))
                self.w0[m].bias.zero_()
                self.w1[m].weight.mul_(0.1)
                self.w1[m].bias.zero_()
                self.w2[m].weight.copy_(torch.eye(width))

    def forward(self, structure: Tensor, projected: dict[str, Tensor]) -> Tensor:
        out = structure
        for m in self.modalities:
            gate = torch.sigmoid(self.w1[m](structure))
            out = out + self.w0[m](gate * self.w2[m](projected[m]))
        return out / (len(self.modalities) + 1)


def build_fusion(name: str, width: int, modalities: list[str], seed: int) -> KGFusion:
    """A fusion whose random initialization depends on ``seed`` only (not on the global
    RNG), so a run is reproducible whatever was drawn before it."""
    cls = KG_FUSIONS.get(name)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return cls(width, modalities)


def fusion_payload(fusion: nn.Module) -> dict[str, Tensor]:
    """The fusion's parameters as upload entries ``fusion.<name>``."""
    return {f"fusion.{n}": p.detach().clone() for n, p in fusion.named_parameters()}
