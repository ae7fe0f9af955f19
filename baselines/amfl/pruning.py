"""Per-round structured magnitude pruning of a client's sub-network (the "w/ Prune" of
FedMBridge Appendix B.1.3's HyperPFL and APFL rows; Kumar & Toshniwal, 2022).

Structured = whole output units: in every prunable weight matrix (a 2-D ``.weight`` outside
the personal head; position tables are not weights of a unit) the rows of smallest L2 norm
are zeroed, together with their bias entries, so the pruned units are gone. How many: the
paper sets "the target compression ratio by the specific local network size"; it gives no
number, so a client with ``n_i`` parameters loses ``max_ratio * n_i / n_max`` of each
matrix's rows (``n_max``: the largest client's count): the largest network is pruned by
``max_ratio``, smaller ones in proportion (our reading). A pruned network trains through
:class:`MaskedNet`, whose forward multiplies each weight by its mask, so the pruned units
get no gradient and stay zero in what the client sends.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor, nn
from torch.func import functional_call

MASK_PREFIX = "m."


def prunable(name: str, t: Tensor) -> bool:
    """A weight matrix of an encoder, fusion or trunk unit (not the personal head)."""
    return t.dim() == 2 and name.endswith(".weight") and not name.startswith("head.")


def client_ratio(num_params: int, max_params: int, max_ratio: float) -> float:
    """Share of rows pruned in a client of ``num_params`` parameters (see the module docstring)."""
    return max_ratio * num_params / max(max_params, 1)


def row_masks(weights: dict[str, Tensor], ratio: float) -> dict[str, Tensor]:
    """0/1 masks (float, the weights' shapes) zeroing ``round(ratio * rows)`` smallest-norm
    rows of every prunable matrix and the bias entries of those rows; masks of the other
    tensors are all ones, and only prunable matrices and their biases are listed (none at
    ``ratio`` 0: nothing pruned, no supermask to send)."""
    out: dict[str, Tensor] = {}
    if ratio <= 0:
        return out
    for name, w in weights.items():
        if not prunable(name, w):
            continue
        k = int(round(ratio * w.shape[0]))
        keep = torch.ones(w.shape[0], device=w.device, dtype=w.dtype)
        if k > 0:
            keep[torch.topk(w.detach().norm(dim=1), k, largest=False).indices] = 0.0
        out[name] = keep[:, None].expand_as(w).clone()
        bias = re.sub(r"weight$", "bias", name)
        if bias in weights and weights[bias].shape == (w.shape[0],):
            out[bias] = keep.clone()
    return out


def masks_payload(masks: dict[str, Tensor]) -> dict[str, Tensor]:
    """The masks as sent (bool, one per masked tensor): the supermask's wire cost."""
    return {MASK_PREFIX + n: m.bool() for n, m in masks.items()}


def masks_from_payload(payload: dict[str, Tensor], dtype: torch.dtype = torch.float32) -> dict[str, Tensor]:
    return {k[len(MASK_PREFIX):]: t.to(dtype) for k, t in payload.items() if k.startswith(MASK_PREFIX)}


def apply_masks(weights: dict[str, Tensor], masks: dict[str, Tensor]) -> dict[str, Tensor]:
    """``weights`` with the masked tensors multiplied by their masks."""
    return {n: w * masks[n] if n in masks else w for n, w in weights.items()}


class MaskedNet(nn.Module):
    """``net`` run with its masked tensors multiplied by their masks (the parameters stay
    ``net``'s own, so the client's optimizer keeps its references)."""

    def __init__(self, net: nn.Module, masks: dict[str, Tensor]) -> None:
        super().__init__()
        self.net = net
        self.masks = masks

    def weights(self) -> dict[str, Tensor]:
        return apply_masks(dict(self.net.named_parameters()), self.masks)

    @property
    def uses_edges(self) -> bool:
        return bool(getattr(self.net, "uses_edges", False))

    def forward(self, features: dict[str, Tensor], edge_index: Tensor | None = None) -> Tensor:
        return functional_call(self.net, self.weights(), (features, edge_index))
