"""MMInd: the multimodal isolated bound of FedMKGC (each client alone with its own items).

Same model as MMFedE (structural table fused with projected text/image features through
the configured fusion) but nothing is exchanged: it measures what a client's own
multimodal items give without federation.
"""

from __future__ import annotations

from baselines.kg.common import KGAlgorithm
from benchmark.registry import ALGORITHMS


@ALGORITHMS.register("mmind")
class MMInd(KGAlgorithm):
    """MMInd: multimodal KGE per client (fused entity vectors), no communication (personalized)."""

    personalized = True
    multimodal = True
    revision = 2  # 2: projected modality rows bounded to the structural scale (proj_norm: rms), HidE's cheaper forward (issue 27)
    upload_keys = ()
