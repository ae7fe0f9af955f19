"""Dirichlet label-skew partition (the FedLab / OpenFGL recipe used by FedMPO, alpha 0.5)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from benchmark.errors import ConfigError
from benchmark.federation import GraphDataset, PartitionResult
from benchmark.registry import PARTITIONERS
from data_prep.component_kinds import GraphPartitioner
from benchmark.seeding import seeded_rng
from data_prep.partition import check_num_clients, result_from_owner
from data_prep.partition.louvain import louvain_labels

LABEL_SOURCES = ("labels", "louvain", "kmeans")


@PARTITIONERS.register("dirichlet_label")
class DirichletLabelPartitioner(GraphPartitioner):
    """Per class, client shares ~ Dir(alpha); small alpha = strong label skew across clients.

    For every class (in order) the shares ``p ~ Dir(alpha * 1_K)`` are drawn, clients that
    already hold ``>= N / K`` nodes get share 0, and the shuffled class members are cut at
    the cumulative shares. The whole draw is repeated until every client holds at least
    ``min_size`` nodes. Graphs without labels use pseudo-labels: Louvain communities or
    k-means clusters of the node features (``label_source``; the choice is in ``info``).
    """

    @dataclass
    class Config:
        alpha: float = field(default=0.5, metadata={"help": "Dirichlet concentration (> 0; small = more skew)", "positive": True})
        min_size: int = field(default=10, metadata={"help": "redraw until every client has at least this many nodes", "min": 0, "max": 50_000_000})
        label_source: str = field(
            default="labels",
            metadata={"help": "what to skew: labels, or pseudo-labels from louvain communities / kmeans clusters", "choices": LABEL_SOURCES},
        )
        pseudo_classes: int = field(default=10, metadata={"help": "number of k-means clusters for label_source=kmeans", "min": 2, "max": 100_000})
        max_tries: int = field(default=500, metadata={"help": "redraws allowed before giving up with an error", "min": 1, "max": 1_000_000})

    def __init__(self, cfg: Config | None = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed

    def split(self, dataset: GraphDataset, num_clients: int) -> PartitionResult:
        c = self.cfg
        n = dataset.num_nodes
        check_num_clients("dirichlet_label", n, num_clients)
        if c.min_size * num_clients > n:
            raise ConfigError(
                f"partition 'dirichlet_label': min_size {c.min_size} x {num_clients} clients exceeds the "
                f"{n} nodes; lower partition.min_size or partition.num_clients"
            )
        labels = self._labels(dataset)
        rng = seeded_rng(self.seed, "partition/dirichlet_label")
        members = [rng.permutation(np.flatnonzero(labels == k)) for k in range(int(labels.max()) + 1)]
        members = [m for m in members if m.size]
        for tries in range(1, c.max_tries + 1):
            owner = dirichlet_owner(members, n, num_clients, c.alpha, rng)
            if np.bincount(owner, minlength=num_clients).min() >= c.min_size:
                break
        else:
            raise ConfigError(
                f"partition 'dirichlet_label': no draw in {c.max_tries} tries gave every client >= "
                f"{c.min_size} nodes (alpha={c.alpha}, {num_clients} clients, {n} nodes); "
                "raise alpha or lower min_size / num_clients"
            )
        info = {
            "method": "dirichlet_label",
            "alpha": c.alpha,
            "label_source": c.label_source,
            "label_groups": len(members),
            "tries": tries,
        }
        return result_from_owner(dataset, owner, num_clients, info)

    def _labels(self, dataset: GraphDataset) -> np.ndarray:
        """Labels to skew on: the real ones, or pseudo-labels for unlabeled graphs."""
        c = self.cfg
        if c.label_source == "labels":
            if dataset.y is None:
                raise ConfigError(
                    f"dataset '{dataset.name}' has no labels; set partition.label_source to louvain or kmeans"
                )
            return dataset.y.numpy().astype(np.int64)
        if c.label_source == "louvain":
            return louvain_labels(dataset, resolution=1.0, seed=self.seed)
        return kmeans_labels(dataset, c.pseudo_classes, self.seed)


def dirichlet_owner(
    members: list[np.ndarray], n: int, num_clients: int, alpha: float, rng: np.random.Generator
) -> np.ndarray:
    """One Dirichlet draw: the client of every node (classes taken in order)."""
    owner = np.empty(n, dtype=np.int64)
    sizes = np.zeros(num_clients, dtype=np.int64)
    cap = n / num_clients
    for idx in members:
        p = rng.dirichlet(np.full(num_clients, alpha))
        p = p * (sizes < cap)
        if not p.sum() > 0:  # every open client got ~0 mass (underflow at tiny alpha)
            p = (sizes < cap).astype(float)
            if not p.sum() > 0:
                p = np.ones(num_clients)
        p = p / p.sum()
        cuts = (np.cumsum(p) * idx.size).astype(np.int64)[:-1]
        for cid, part in enumerate(np.split(idx, cuts)):
            owner[part] = cid
            sizes[cid] += part.size
    return owner


def kmeans_labels(dataset: GraphDataset, k: int, seed: int) -> np.ndarray:
    """k-means clusters of the standardized, PCA-reduced features (available rows only count)."""
    from sklearn.cluster import KMeans

    parts = []
    for j, m in enumerate(dataset.modalities):
        x = dataset.features[m].float() * dataset.available[:, j : j + 1].float()
        parts.append((x - x.mean(0)) / x.std(0).clamp_min(1e-6))
    x = torch.cat(parts, dim=1)
    q = min(32, x.shape[1], x.shape[0])
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    u, s, _ = torch.pca_lowrank(x, q=q, center=True)
    torch.random.set_rng_state(gen_state)
    z = (u * s).numpy()
    k = min(k, dataset.num_nodes)
    return KMeans(n_clusters=k, n_init=1, random_state=seed).fit_predict(z).astype(np.int64)
