"""Knowledge-graph embedding: decoders (TransE, RotatE, ComplEx), losses with negative
sampling (and the split paradigm's averaged probability), fused candidate scoring and
filtered tie-aware ranking evaluation.

``DECODERS`` is the registry of KGE decoders (a config names one, independently of the
FL algorithm, imputer and fusion). Importing this package registers the built-in ones.
"""

from __future__ import annotations

from benchmark.kge.decoders import DECODERS, ComplEx, KGEDecoder, RotatE, TransE, build_decoder
from benchmark.kge.evaluation import FilterIndex, evaluate_filtered, rank_metrics, tie_aware_ranks, views_scorer
from benchmark.kge.losses import LOSSES, kge_loss, mean_softmax_log_probs, sample_negatives, split_kge_loss
from benchmark.kge.model import KGEModel, make_queries, train_epoch

__all__ = [
    "DECODERS", "KGEDecoder", "RotatE", "TransE", "ComplEx", "build_decoder",
    "FilterIndex", "evaluate_filtered", "rank_metrics", "tie_aware_ranks", "views_scorer",
    "LOSSES", "kge_loss", "mean_softmax_log_probs", "split_kge_loss", "sample_negatives",
    "KGEModel", "make_queries", "train_epoch",
]
