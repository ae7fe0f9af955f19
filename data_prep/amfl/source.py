"""The in-memory form of an AMFL simulation's data: aligned samples, several modalities.

An ``AMFLSource`` is what an AMFL dataset loader returns. Unlike a ``GraphDataset`` it has
no clients: the ``amfl_population`` partitioner decides who holds which samples and which
architecture each client designs (``data_prep/amfl/build.py``). The paper's simulations
have no graph (``edge_index`` empty); a graph source (``data_prep/amfl/graphs.py``, ours)
adds one, and then each client holds connected pieces of it with their induced edges
(``data_prep/amfl/dealers.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import Tensor

from benchmark.errors import DataError
from data_prep.amfl.dealers import Dealer, GraphDealer, PoolDealer


@dataclass
class AMFLSource:
    """Samples with one row per modality each, a global label, and how to tokenize each modality."""

    #: which federation builder takes it (``registry.FEDERATION_BUILDERS``)
    kind: ClassVar[str] = "amfl"

    name: str
    features: dict[str, Tensor]          # modality -> [N, d_m] float32
    y: Tensor                            # [N] long, global class ids
    num_classes: int
    token_dims: dict[str, int] = field(default_factory=dict)   # modality -> width of one attention token
    caption: str = ""                    # which data stands in for which (goes into stats and captions)
    meta: dict = field(default_factory=dict)
    edge_index: Tensor = field(default_factory=lambda: torch.empty(2, 0, dtype=torch.long))  # [2, E], both directions

    def __post_init__(self) -> None:
        n = int(self.y.numel())
        for m, x in self.features.items():
            if x.dim() != 2 or x.shape[0] != n:
                raise DataError(f"{self.name}: modality '{m}' has shape {tuple(x.shape)}, want [{n}, d]")
            tok = self.token_dims.get(m, x.shape[1])
            if x.shape[1] % tok:
                raise DataError(f"{self.name}: modality '{m}' width {x.shape[1]} is not a multiple of its token {tok}")
        e = self.edge_index
        if e.dim() != 2 or e.shape[0] != 2 or e.dtype != torch.long:
            raise DataError(f"{self.name}: edge_index must be a [2, E] long tensor, got {e.dtype} {tuple(e.shape)}")
        if e.numel() and (int(e.min()) < 0 or int(e.max()) >= n):
            raise DataError(f"{self.name}: edge_index names samples outside [0, {n})")

    @property
    def modalities(self) -> list[str]:
        return list(self.features)

    @property
    def num_samples(self) -> int:
        return int(self.y.numel())

    @property
    def feature_dims(self) -> dict[str, int]:
        return {m: int(x.shape[1]) for m, x in self.features.items()}

    @property
    def num_edges(self) -> int:
        """Undirected edges (0 for the paper's simulations)."""
        return int(self.edge_index.shape[1] // 2)

    def fingerprint(self) -> str:
        """Content hash; the edges count only when there are some (sources without a graph
        keep the hashes they had before graphs existed)."""
        h = hashlib.sha256(self.name.encode())
        for m in sorted(self.features):
            x = self.features[m].contiguous()
            h.update(m.encode() + str(tuple(x.shape)).encode() + x.numpy().tobytes())
        h.update(self.y.numpy().tobytes())
        if self.edge_index.numel():
            h.update(b"edges" + self.edge_index.contiguous().numpy().tobytes())
        return h.hexdigest()[:16]

    def dealer(self, seed: int) -> Dealer:
        """How the population deals samples: connected pieces of the graph when there is one,
        else seeded per-class pools."""
        y = self.y.numpy()
        if self.num_edges:
            return GraphDealer(y, self.num_classes, self.edge_index)
        return PoolDealer(y, self.num_classes, seed)

    def subgraph(self, ids: Tensor) -> tuple[Tensor, int]:
        """(edges among ``ids`` in local indices 0..len(ids)-1, both directions; number of
        undirected edges from ``ids`` to other samples): a client's own graph and its cut."""
        local = torch.full((self.num_samples,), -1, dtype=torch.long)
        local[ids] = torch.arange(ids.numel())
        src, dst = local[self.edge_index[0]], local[self.edge_index[1]]
        inside = (src >= 0) & (dst >= 0)
        cut = int(((src >= 0) ^ (dst >= 0)).sum()) // 2
        return torch.stack([src[inside], dst[inside]]), cut
