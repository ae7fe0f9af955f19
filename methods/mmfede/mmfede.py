"""MMFedE (docs/algorithms.md, KG track; Alg. 1 of MMFeD3-HidE without imputation/diffusion).

The server holds a global structural entity table S^s over the union of entities; client c
receives the rows of its entities (the permutation P^c is the index map given by the
entity ids it named in the setup exchange), trains S^c, its relations R^c (never
uploaded), the projections W_m (modality features -> entity space) and the fusion, and
uploads S^c, W_m and the fusion's parameters. Server: each entity row = mean over the clients
that hold it; W = sum_c alpha_c W^c with alpha_c = |T^c| / sum |T| (the fusion
parameters are averaged the same way). Entity vectors: ``algorithm.fusion`` picks Phi from
``baselines.kg.fusions.KG_FUSIONS`` (average, weighted, concat, gated); ``weighted`` by
default, ``a_0 S + a_v W_v x_v + a_d W_d x_d`` with ``a = softmax(logits)`` learnable.

Choices the paper leaves open: Adam keeps its state across rounds (docs/algorithms.md;
the paper does not say it resets); missing features enter as their random fill, since
MMFedE is the backbone *without* an imputer; feature rows are scaled to unit RMS before
projection (see ``baselines/kg/common.py``).
"""

from __future__ import annotations

from baselines.kg.common import KGAlgorithm
from benchmark.registry import ALGORITHMS


@ALGORITHMS.register("mmfede")
class MMFedE(KGAlgorithm):
    """MMFedE: entity rows averaged over holders, projections/fusion weighted by |T^c|; relations stay local."""

    federated = True
    has_setup = True
    multimodal = True
    revision = 2  # 2: projected modality rows bounded to the structural scale (proj_norm: rms), HidE's cheaper forward (issue 27)
    upload_keys = ("entity_ids", "entity", "num_train", r"proj\..+\.(weight|bias)", r"fusion\..+")
