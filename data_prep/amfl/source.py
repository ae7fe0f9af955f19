"""The in-memory form of an AMFL simulation's data: aligned samples, several modalities.

An ``AMFLSource`` is what an AMFL dataset loader returns. Unlike a ``GraphDataset`` it has
no graph and no clients: the ``amfl_population`` partitioner decides who holds which
samples and which architecture each client designs (``data_prep/amfl/build.py``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from benchmark.errors import DataError


@dataclass
class AMFLSource:
    """Samples with one row per modality each, a global label, and how to tokenize each modality."""

    name: str
    features: dict[str, Tensor]          # modality -> [N, d_m] float32
    y: Tensor                            # [N] long, global class ids
    num_classes: int
    token_dims: dict[str, int] = field(default_factory=dict)   # modality -> width of one attention token
    caption: str = ""                    # which data stands in for which (goes into stats and captions)
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = int(self.y.numel())
        for m, x in self.features.items():
            if x.dim() != 2 or x.shape[0] != n:
                raise DataError(f"{self.name}: modality '{m}' has shape {tuple(x.shape)}, want [{n}, d]")
            tok = self.token_dims.get(m, x.shape[1])
            if x.shape[1] % tok:
                raise DataError(f"{self.name}: modality '{m}' width {x.shape[1]} is not a multiple of its token {tok}")

    @property
    def modalities(self) -> list[str]:
        return list(self.features)

    @property
    def num_samples(self) -> int:
        return int(self.y.numel())

    @property
    def feature_dims(self) -> dict[str, int]:
        return {m: int(x.shape[1]) for m, x in self.features.items()}

    def fingerprint(self) -> str:
        h = hashlib.sha256(self.name.encode())
        for m in sorted(self.features):
            x = self.features[m].contiguous()
            h.update(m.encode() + str(tuple(x.shape)).encode() + x.numpy().tobytes())
        h.update(self.y.numpy().tobytes())
        return h.hexdigest()[:16]

    def build_federation(self, cfg: Any) -> Any:
        """The clients of this simulation (the data layer's builder hands AMFL runs here)."""
        from data_prep.amfl.build import build_amfl_federation

        return build_amfl_federation(cfg, self)
