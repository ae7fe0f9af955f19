"""AMFL graph sources (suite ``amfl_graph``; ours, the FedMBridge paper has no graph data).

Each returns an ``AMFLSource`` with an ``edge_index``: the ``amfl_population`` partitioner
then gives every client connected pieces of the graph with their induced edges (never an
edge to another client's node), its own modality subset and its personal label space, and
may draw GNN encoders (``gcn``, ``sage``, ``gat``) for it.

* ``amfl_graph_digits`` (generated, runs in seconds): the ``av_digits`` samples (8x8 digit
  image + MNIST-1D signal of the same label) linked by a seeded stochastic block model
  over their labels: each sample draws ``degree_in`` partners of its own class and
  ``degree_out`` of other classes (union, undirected). It stands in for a homophilous
  multimodal graph whose edges carry label information beyond the features.
* ``amfl_tiktok``: the graph track's TikTok item graph (co-interaction top-k, 128-d visual
  and acoustic features, ``data_prep/datasets/tiktok.py``). TikTok has no item labels and
  the graph track has no TikTok node classification (it uses Louvain communities only as
  pseudo-labels to skew partitions), so the labels are Louvain communities of the item
  graph itself (networkx, ``louvain_resolution``, ``louvain_seed``): the ``num_classes``
  largest are kept as classes and the graph restricted to their items. Labels made from
  the graph make the edges label-informative by construction; features are z-scored per
  column.
* ``amfl_fb15k_typing``: the graph track's FB15K-237 entity-typing graph
  (``data_prep/datasets/fb15k237_typing.py``: entity graph from the triples, text = SVD of
  names + descriptions, numeric = mmkb attributes, labels = coarse Freebase type domains).
  Text columns are z-scored; numeric columns are already z-scored where present and 0
  where absent, and stay so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from benchmark.registry import DATASETS
from data_prep.amfl.digits import AVDigits
from data_prep.amfl.source import AMFLSource
from data_prep.datasets.sources import undirected_edge_index
from benchmark.seeding import seeded_rng

DIGITS_CAPTION = ("generated multimodal graph: scikit-learn 8x8 digits (image) and MNIST-1D signals (signal) of "
                  "the same label, linked by a seeded label block model (homophilous edges)")
TIKTOK_CAPTION = ("TikTok micro-video item graph (co-interaction top-k edges, real visual + acoustic features); "
                  "labels are Louvain communities of that graph (TikTok has no item labels), so edges carry label "
                  "information by construction")
FB15K_CAPTION = ("FB15K-237 entity graph (triples as undirected edges), text (SVD of names + descriptions) + "
                 "numeric (mmkb attributes, absent = 0) features, coarse Freebase type domains as labels")


def zscore(x: Tensor) -> Tensor:
    """Column-wise z-score (a constant column becomes 0)."""
    std = x.std(0, keepdim=True)
    return torch.where(std > 1e-8, (x - x.mean(0, keepdim=True)) / std.clamp_min(1e-8), torch.zeros_like(x))


def induced(edge_index: Tensor, keep: np.ndarray, n: int) -> Tensor:
    """Edges among the samples ``keep``, renumbered 0..len(keep)-1 in ``keep``'s order."""
    local = torch.full((n,), -1, dtype=torch.long)
    local[torch.from_numpy(keep)] = torch.arange(keep.size)
    src, dst = local[edge_index[0]], local[edge_index[1]]
    inside = (src >= 0) & (dst >= 0)
    return torch.stack([src[inside], dst[inside]])


def block_model_edges(y: np.ndarray, degree_in: float, degree_out: float, seed: int) -> Tensor:
    """Each sample draws ``degree_in`` same-class and ``degree_out`` other-class partners
    (uniform, seeded); the union of the pairs, undirected."""
    rng = seeded_rng(seed, "amfl/graph_digits/edges")
    src, dst = [], []
    for k in np.unique(y):
        own, other = np.flatnonzero(y == k), np.flatnonzero(y != k)
        for pool, deg in ((own, degree_in), (other, degree_out)):
            m = int(round(deg * own.size / 2))   # each pair counts for both ends
            if m and pool.size:
                src.append(rng.choice(own, m))
                dst.append(rng.choice(pool, m))
    if not src:
        return torch.empty(2, 0, dtype=torch.long)
    return undirected_edge_index(np.concatenate(src), np.concatenate(dst), y.size)


@DATASETS.register("amfl_graph_digits")
class AMFLGraphDigits:
    """AMFL graph: av_digits samples (image + signal) linked by a seeded label block model (generated, offline)."""

    @dataclass
    class Config:
        signal_seed: int = field(default=42, metadata={"help": "seed of the MNIST-1D generator (a fixed dataset)",
                                                       "min": 0, "max": 2**32 - 1})
        graph_seed: int = field(default=0, metadata={"help": "seed of the block model's edges", "min": 0, "max": 2**32 - 1})
        degree_in: float = field(default=4.0, metadata={"help": "mean same-class neighbours per sample", "min": 0.0})
        degree_out: float = field(default=1.0, metadata={"help": "mean other-class neighbours per sample",
                                                         "min": 0.0})

    def __init__(self, cfg: "AMFLGraphDigits.Config | None" = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> AMFLSource:
        c = self.cfg
        base = AVDigits(AVDigits.Config(signal_seed=c.signal_seed)).load(root)
        edges = block_model_edges(base.y.numpy(), c.degree_in, c.degree_out, c.graph_seed)
        return AMFLSource(name="amfl_graph_digits", features=base.features, y=base.y, num_classes=base.num_classes,
                          token_dims=base.token_dims, caption=DIGITS_CAPTION,
                          meta={**base.meta, "graph_seed": c.graph_seed, "degree_in": c.degree_in,
                                "degree_out": c.degree_out}, edge_index=edges)


@lru_cache(maxsize=4)
def _louvain_labels(root: str | None, top_k: int, resolution: float, seed: int) -> tuple[Tensor, dict, Tensor, dict]:
    """TikTok's features, edges and every item's Louvain community (largest first)."""
    from data_prep.datasets.tiktok import TikTok
    from data_prep.partition.louvain import louvain_communities

    graph = TikTok(TikTok.Config(top_k=top_k, include_interactions=False)).load(None if root is None else Path(root))
    labels = torch.empty(graph.num_nodes, dtype=torch.long)
    sizes = []
    for i, comm in enumerate(louvain_communities(graph, resolution, seed)):
        labels[torch.from_numpy(comm)] = i
        sizes.append(int(comm.size))
    return labels, dict(graph.features), graph.edge_index, {"community_sizes": sizes}


@DATASETS.register("amfl_tiktok")
class AMFLTikTok:
    """AMFL graph: TikTok items (visual + acoustic) labelled by the Louvain community of the item graph."""

    @dataclass
    class Config:
        num_classes: int = field(default=10, metadata={"help": "largest Louvain communities kept as classes "
                                                               "(their items only)", "min": 2, "max": 100_000})
        louvain_resolution: float = field(default=2.0, metadata={
            "help": "Louvain resolution (2.0 gives ten communities of 118-376 items)", "positive": True})
        louvain_seed: int = field(default=0, metadata={"help": "seed of Louvain (a fixed labelling)", "min": 0, "max": 2**32 - 1})
        top_k: int = field(default=5, metadata={"help": "TikTok loader's neighbours kept per item (mean degree ~8)",
                                                "min": 1, "max": 10_000})

    def __init__(self, cfg: "AMFLTikTok.Config | None" = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> AMFLSource:
        c = self.cfg
        labels, feats, edges, info = _louvain_labels(None if root is None else str(root), c.top_k,
                                                     c.louvain_resolution, c.louvain_seed)
        keep = np.flatnonzero(labels.numpy() < c.num_classes)
        idx = torch.from_numpy(keep)
        return AMFLSource(name="amfl_tiktok", features={m: zscore(x[idx].float()) for m, x in feats.items()},
                          y=labels[idx].clone(), num_classes=c.num_classes,
                          token_dims={m: 16 for m in feats}, caption=TIKTOK_CAPTION,
                          meta={"community_sizes": info["community_sizes"][:c.num_classes],
                                "items": int(keep.size)},
                          edge_index=induced(edges, keep, labels.numel()))


@DATASETS.register("amfl_fb15k_typing")
class AMFLFB15kTyping:
    """AMFL graph: FB15K-237 entities (text + numeric) with coarse type domains as labels."""

    @dataclass
    class Config:
        num_classes: int = field(default=10, metadata={"help": "most frequent type domains kept as classes",
                                                       "min": 2, "max": 100_000})

    def __init__(self, cfg: "AMFLFB15kTyping.Config | None" = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> AMFLSource:
        from data_prep.datasets.fb15k237_typing import FB15k237Typing

        graph = FB15k237Typing(FB15k237Typing.Config(num_classes=self.cfg.num_classes)).load(root)
        assert graph.y is not None
        numeric = graph.features["numeric"]
        return AMFLSource(name="amfl_fb15k_typing",
                          features={"text": zscore(graph.features["text"]), "numeric": numeric.clone()},
                          y=graph.y.clone(), num_classes=graph.num_classes,
                          token_dims={"text": 16, "numeric": _token(numeric.shape[1])},
                          caption=FB15K_CAPTION, meta={"classes": graph.meta.get("classes")},
                          edge_index=graph.edge_index)


def _token(width: int) -> int:
    """The largest token width up to 16 that divides ``width`` (an attention adaptor's tokens)."""
    return max(t for t in range(1, min(16, width) + 1) if width % t == 0)
