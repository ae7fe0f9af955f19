"""Dirichlet label partitioner: alpha controls label skew; sizes, seeds and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from threadpoolctl import threadpool_limits

from benchmark.errors import ConfigError
from benchmark.federation import GraphDataset, PartitionResult
from benchmark.registry import PARTITIONERS
from data_prep.datasets.synthetic import SyntheticGraph
from data_prep.partition.dirichlet_label import DirichletLabelPartitioner as Dirichlet


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    """k-means and PCA thrash with several BLAS/OpenMP threads on a shared 2-core machine."""
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def graph() -> GraphDataset:
    return SyntheticGraph(SyntheticGraph.Config(num_nodes=2000, text_dim=16, image_dim=8)).load()


def mean_tv(ds: GraphDataset, res: PartitionResult) -> float:
    """Mean total-variation distance between each client's label distribution and the global one."""
    y = ds.y.numpy()
    k = ds.num_classes
    glob = np.bincount(y, minlength=k) / y.size
    tvs = []
    for c in res.clients:
        h = np.bincount(y[c.node_ids.numpy()], minlength=k)
        tvs.append(0.5 * np.abs(h / h.sum() - glob).sum())
    return float(np.mean(tvs))


def split(ds: GraphDataset, k: int = 10, seed: int = 0, **cfg) -> PartitionResult:
    return Dirichlet(Dirichlet.Config(**cfg), seed=seed).split(ds, k)


def test_registered():
    assert PARTITIONERS.get("dirichlet_label") is Dirichlet


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alpha_controls_label_skew(graph, seed):
    skewed = mean_tv(graph, split(graph, alpha=0.1, seed=seed))
    uniform = mean_tv(graph, split(graph, alpha=100.0, seed=seed))
    assert skewed > 0.45, skewed
    assert uniform < 0.1, uniform


def test_every_node_once_and_min_size(graph):
    res = split(graph, alpha=0.1, min_size=20)
    ids = torch.cat([c.node_ids for c in res.clients])
    assert torch.equal(torch.sort(ids).values, torch.arange(graph.num_nodes))
    assert min(c.node_ids.numel() for c in res.clients) >= 20
    assert all(torch.equal(c.node_ids, torch.sort(c.node_ids).values) for c in res.clients)
    assert res.info["label_source"] == "labels" and res.info["tries"] >= 1


def test_seeded(graph):
    a, b, c = split(graph, seed=5), split(graph, seed=5), split(graph, seed=6)
    assert all(torch.equal(x.node_ids, y.node_ids) for x, y in zip(a.clients, b.clients))
    assert a.dropped_edges == b.dropped_edges
    assert any(not torch.equal(x.node_ids, y.node_ids) for x, y in zip(a.clients, c.clients))


@pytest.mark.parametrize("source", ["louvain", "kmeans"])
def test_unlabeled_graph_uses_pseudo_labels(graph, source):
    unlabeled = GraphDataset(name="nolabels", features=graph.features, edge_index=graph.edge_index)
    with pytest.raises(ConfigError, match="no labels"):
        split(unlabeled, k=5)
    res = split(unlabeled, k=5, label_source=source, pseudo_classes=6)
    assert res.info["label_source"] == source
    assert sum(c.node_ids.numel() for c in res.clients) == graph.num_nodes


@pytest.mark.parametrize(
    "bad", [{"alpha": 0.0}, {"alpha": -1.0}, {"min_size": -1}, {"label_source": "words"}, {"max_tries": 0}]
)
def test_bad_config(bad):
    from benchmark.config import build_dataclass

    with pytest.raises(ConfigError, match=f"partition.{next(iter(bad))}"):
        build_dataclass(Dirichlet.Config, bad, "partition")


def test_too_many_clients_or_impossible_min_size(graph):
    with pytest.raises(ConfigError, match="num_clients"):
        split(graph, k=graph.num_nodes + 1, min_size=0)
    with pytest.raises(ConfigError, match="min_size"):
        split(graph, k=100, min_size=30)
    with pytest.raises(ConfigError, match="tries"):
        split(graph, k=50, alpha=0.01, min_size=35, max_tries=3)
