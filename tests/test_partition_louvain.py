"""Louvain partitioner: few cut edges, complete, seeded, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.errors import ConfigError
from benchmark.federation import GraphDataset
from benchmark.registry import PARTITIONERS
from data_prep.datasets.synthetic import SyntheticGraph
from data_prep.partition import cut_edges
from data_prep.partition.louvain import LouvainPartitioner as Louvain


@pytest.fixture(scope="module")
def graph() -> GraphDataset:
    return SyntheticGraph(SyntheticGraph.Config(num_nodes=1500, text_dim=8, image_dim=8)).load()


def test_registered():
    assert PARTITIONERS.get("louvain") is Louvain


@pytest.mark.parametrize("k", [3, 5])
def test_cuts_far_fewer_edges_than_random(graph, k):
    res = Louvain(Louvain.Config(), seed=0).split(graph, k)
    sizes = [c.node_ids.numel() for c in res.clients]
    owner = np.repeat(np.arange(k), sizes)[np.random.default_rng(0).permutation(graph.num_nodes)]
    random_cut = cut_edges(graph.edge_index, owner)
    assert res.dropped_edges < 0.5 * random_cut, (res.dropped_edges, random_cut)


def test_complete_and_near_balanced(graph):
    k, delta = 6, 20
    res = Louvain(Louvain.Config(delta=delta), seed=0).split(graph, k)
    ids = torch.cat([c.node_ids for c in res.clients])
    assert torch.equal(torch.sort(ids).values, torch.arange(graph.num_nodes))
    assert all(torch.equal(c.node_ids, torch.sort(c.node_ids).values) for c in res.clients)
    sizes = np.array([c.node_ids.numel() for c in res.clients])
    assert sizes.min() > 0.5 * graph.num_nodes / k
    assert res.info["communities"] >= 1 and res.info["chunks"] >= k


def test_seeded(graph):
    def parts(seed: int) -> set[frozenset[int]]:
        res = Louvain(seed=seed).split(graph, 5)
        return {frozenset(c.node_ids.tolist()) for c in res.clients}

    assert parts(1) == parts(1)
    assert parts(1) != parts(2)


def test_errors(graph):
    with pytest.raises(ConfigError, match="num_clients"):
        Louvain(seed=0).split(graph, graph.num_nodes + 1)
    with pytest.raises(ConfigError, match="delta"):
        Louvain(Louvain.Config(delta=20), seed=0).split(graph, 100)  # 15 nodes per client < delta
    from benchmark.config import build_dataclass

    with pytest.raises(ConfigError, match="partition.resolution must be > 0"):
        build_dataclass(Louvain.Config, {"resolution": 0.0}, "partition")
    with pytest.raises(ConfigError, match="partition.delta must be >= 0"):
        build_dataclass(Louvain.Config, {"delta": -1}, "partition")
