"""What one AMFL client holds: its architecture spec and its own multimodal samples.

Why a ``ClientData`` subclass: the engine, the ledger audit and the records already speak
``ClientData``, so an AMFL client that *is* one runs through the same round loop and the
same upload audit (its feature rows and labels are fingerprinted like a graph client's).
The AMFL part: ``features`` holds only the client's own modality subset (rows are its
samples; ``edge_index`` is empty for the paper's simulations, and for a graph source holds
the edges among the client's own samples only, in local indices, which the audit
fingerprints like any client's edge list), ``y`` are *personal* labels 0..C_i-1 (the
paper's relative label ids: a client does not know which global class they are),
``num_classes`` is C_i and ``arch`` is the model it designed. ``token_dims`` say how an
attention adaptor cuts each modality's vector into tokens (data layout, not a choice).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from benchmark.amfl.spec import ArchSpec
from benchmark.errors import ConfigError
from benchmark.federation import ClientData


@dataclass
class AMFLClientData(ClientData):
    """An AMFL client (see the module docstring)."""

    arch: ArchSpec | None = None
    token_dims: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.arch is None:
            raise ConfigError(f"AMFL client {self.cid} has no architecture spec")
        have, want = sorted(self.features), sorted(self.arch.modalities)
        if have != want:
            raise ConfigError(f"AMFL client {self.cid}: its architecture takes {'+'.join(want)} but its data "
                              f"holds {'+'.join(have) or 'nothing'}")
        e = self.edge_index
        if e.numel() and (int(e.min()) < 0 or int(e.max()) >= self.num_nodes):
            raise ConfigError(f"AMFL client {self.cid}: its edges name nodes outside its own {self.num_nodes}")

    def split_index(self, split: str) -> Tensor:
        """Row indices of ``train`` / ``val`` / ``test``."""
        return torch.nonzero(getattr(self, f"{split}_mask")).flatten()

    def rows(self, idx: Tensor) -> dict[str, Tensor]:
        """The client's features at rows ``idx``."""
        return {m: x[idx] for m, x in self.features.items()}
