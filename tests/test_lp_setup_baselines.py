"""FedGCN and FedLAP on link prediction: they learn, pass the ledger audit, and their one-time
setup exchange reads the client's training edges (plus boundary edges), never a held-out one.

Runs on the tiny Louvain federation of ``test_multimodal_fl.py``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmark.federation import ClientData
from test_multimodal_fl import _algo, _pair_cfg, assert_beats_trivial_reference, pair_fed  # noqa: F401  (pair_fed is a fixture)

ROUNDS = 8


def _held_out(task, client: ClientData) -> set[tuple[int, int]]:
    """The client's val/test positives as undirected global-id pairs (min, max)."""
    sp = task.split(client, with_negatives=False)
    gid = client.global_ids
    out = set()
    for s in ("val", "test"):
        for u, v in gid[sp.positives[s]].t().tolist():
            out.add((min(u, v), max(u, v)))
    return out


def _pairs(edges: torch.Tensor) -> set[tuple[int, int]]:
    return {(u, v) for u, v in edges.t().tolist()}


@pytest.mark.parametrize("algo", ["fedgcn", "fedlap"])
def test_link_pred_beats_chance_and_passes_audit(algo, pair_fed):  # noqa: F811
    assert_beats_trivial_reference(algo, "link_pred", pair_fed, ROUNDS)


def test_fedlap_setup_edges_are_training_plus_boundary(pair_fed):  # noqa: F811
    cache, fed = pair_fed
    _, lp = _algo(_pair_cfg("fedlap", "link_pred", cache), fed)
    _, nc = _algo(_pair_cfg("fedlap", "node_cls", cache), fed)
    task = lp.ctx.task
    leaked_before = 0
    for c in fed.clients:
        held = _held_out(task, c)
        assert held, "no held-out edge: the test could not fail"
        up = lp.setup_upload(c, {})
        assert not (_pairs(up["setup.edges"]) & held)
        train_only = dataclasses.replace(c, edge_index=task.split(c, with_negatives=False).eval_message)
        assert torch.equal(up["setup.edges"], nc.setup_upload(train_only, {})["setup.edges"])
        leaked_before += len(_pairs(nc.setup_upload(c, {})["setup.edges"]) & held)
    assert leaked_before > 0  # the full graph's upload does hold them: what the link_pred path must avoid


def test_fedgcn_setup_sums_use_training_edges_only(pair_fed):  # noqa: F811
    cache, fed = pair_fed
    _, lp = _algo(_pair_cfg("fedgcn", "link_pred", cache), fed)
    _, nc = _algo(_pair_cfg("fedgcn", "node_cls", cache), fed)
    task = lp.ctx.task
    n = lp.ctx.num_global_nodes
    for c in fed.clients:
        full = dataclasses.replace(c, available=torch.ones_like(c.available))
        sp = task.split(full, with_negatives=False)
        up = lp.setup_upload(full, {})
        assert torch.equal(up["setup.request"], c.global_ids)  # own rows only, although hops=2
        # counts: training degree + 1 on own nodes, boundary contributions on remote ones
        expect = torch.zeros(n, dtype=torch.float64)
        for dst in (c.global_ids[sp.eval_message[1]], c.global_ids, c.boundary_edges[1]):
            expect.index_add_(0, dst, torch.ones(dst.numel(), dtype=torch.float64))
        full_counts = nc.setup_upload(full, {})
        for m in c.modalities:
            assert torch.equal(up[f"setup.count.{m}"], expect)
            assert not torch.equal(full_counts[f"setup.count.{m}"], expect)  # held-out edges would change it
        # sums and counts equal those of the same client holding only its training edges
        ref = nc.setup_upload(dataclasses.replace(c, edge_index=sp.eval_message), {})
        mine = lp.setup_upload(c, {})
        for k in ref:
            if k.startswith("setup.sum.") or k.startswith("setup.count."):
                assert torch.equal(mine[k], ref[k]), k


def test_fedgcn_link_pred_view_keeps_the_clients_graph_and_split(pair_fed):  # noqa: F811
    cache, fed = pair_fed
    _, lp = _algo(_pair_cfg("fedgcn", "link_pred", cache), fed)
    task = lp.ctx.task
    ups = {c.cid: lp.setup_upload(c, {}) for c in fed.clients}
    replies = lp.setup_aggregate(ups)
    for c in fed.clients:
        state: dict = {}
        lp.setup_receive(c, state, replies[c.cid])
        view = state["view"]
        assert view.num_nodes == c.num_nodes and torch.equal(view.edge_index, c.edge_index)
        a, b = task.split(view), task.split(c)
        for s in ("val", "test"):
            assert torch.equal(a.positives[s], b.positives[s]) and torch.equal(a.negatives[s], b.negatives[s])
