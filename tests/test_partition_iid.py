"""IID partitioner: balanced, complete, seeded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.errors import ConfigError
from benchmark.federation import GraphDataset
from benchmark.registry import PARTITIONERS
from data_prep.partition import owner_array
from data_prep.partition.iid import IIDPartitioner


def ring_graph(n: int, labels: int = 4) -> GraphDataset:
    """A cycle with a few chords: small, deterministic, every node has edges."""
    src = torch.arange(n)
    pairs = torch.cat([torch.stack([src, (src + 1) % n]), torch.stack([src, (src + 7) % n])], dim=1)
    ei = torch.cat([pairs, pairs.flip(0)], dim=1)
    return GraphDataset(
        name="ring", features={"text": torch.zeros(n, 2)}, edge_index=ei, y=src % labels, num_classes=labels
    )


def brute_force_cut(ds: GraphDataset, owner: np.ndarray) -> int:
    src, dst = ds.edge_index.numpy()
    return sum(1 for a, b in zip(src, dst) if a < b and owner[a] != owner[b])


def test_registered():
    assert PARTITIONERS.get("iid") is IIDPartitioner


def test_balanced_complete_and_cut_counted():
    ds = ring_graph(1003)
    res = IIDPartitioner(IIDPartitioner.Config(), seed=0).split(ds, 10)
    sizes = [c.node_ids.numel() for c in res.clients]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003
    all_ids = torch.cat([c.node_ids for c in res.clients])
    assert torch.equal(torch.sort(all_ids).values, torch.arange(1003))
    for c in res.clients:
        assert torch.equal(c.node_ids, torch.sort(c.node_ids).values)
    assert res.dropped_nodes == 0
    assert res.dropped_edges == brute_force_cut(ds, owner_array(res.clients, 1003))


def test_seeded():
    ds = ring_graph(500)
    a = IIDPartitioner(seed=3).split(ds, 5)
    b = IIDPartitioner(seed=3).split(ds, 5)
    c = IIDPartitioner(seed=4).split(ds, 5)
    assert all(torch.equal(x.node_ids, y.node_ids) for x, y in zip(a.clients, b.clients))
    assert any(not torch.equal(x.node_ids, y.node_ids) for x, y in zip(a.clients, c.clients))


def test_one_client_holds_everything():
    ds = ring_graph(50)
    res = IIDPartitioner(seed=0).split(ds, 1)
    assert res.clients[0].node_ids.numel() == 50 and res.dropped_edges == 0


@pytest.mark.parametrize("k", [0, 51])
def test_bad_client_count(k):
    with pytest.raises(ConfigError, match="num_clients"):
        IIDPartitioner(seed=0).split(ring_graph(50), k)
