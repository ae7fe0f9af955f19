"""The structure-only control (``missing.content: shuffle``): each modality's rows permuted
across nodes independently, availability, partition and splits untouched; on a paired task a
plain GNN matches pairs above chance from the graph alone when both views pass messages over
it (``gallery_view: graph``), and scores at chance under the default content protocol."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from data_prep.build import build_federation, shuffled_content
from data_prep.datasets.synthetic import SyntheticGraph
from test_multimodal_fl import _pair_cfg, random_mrr


def _with_content(cfg, content: str):  # noqa: ANN001, ANN202
    return dataclasses.replace(cfg, missing=dataclasses.replace(cfg.missing, content=content))


def test_shuffled_content_permutes_each_modality_independently():
    ds = SyntheticGraph(SyntheticGraph.Config(num_nodes=300)).load()
    shuffled = shuffled_content(ds, seed=0)
    for m in ds.modalities:
        a, b = ds.features[m], shuffled[m]
        assert torch.equal(a.sort(0).values, b.sort(0).values)   # the same real rows of that modality...
        assert (a != b).any(1).float().mean() > 0.9             # ...on other nodes
    # independently per modality: almost no node keeps a pair that belonged together
    m0, m1 = ds.modalities[:2]
    together = {(tuple(x), tuple(y)) for x, y in zip(ds.features[m0].tolist(), ds.features[m1].tolist())}
    kept = sum((tuple(x), tuple(y)) in together for x, y in zip(shuffled[m0].tolist(), shuffled[m1].tolist()))
    assert kept < 0.05 * ds.num_nodes
    assert torch.equal(shuffled_content(ds, seed=0)[m0], shuffled[m0])  # seeded


def test_shuffle_keeps_artifact_availability_and_fill(tmp_path):
    keep_cfg = _pair_cfg("fedavg", "retrieval", tmp_path)
    keep, shuf = build_federation(keep_cfg), build_federation(_with_content(keep_cfg, "shuffle"))
    assert keep.artifact_hash == shuf.artifact_hash  # same partition, masks and splits
    for a, b in zip(keep.clients, shuf.clients):
        assert torch.equal(a.available, b.available) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.train_mask, b.train_mask) and torch.equal(a.test_mask, b.test_mask)
        for j, m in enumerate(keep.modalities):
            assert not torch.equal(a.features[m], b.features[m])
            assert bool((b.features[m][~b.available[:, j]] == 0).all())  # absent rows hold the fill value


def test_bad_content_value_and_kg_datasets_are_rejected(tmp_path):
    with pytest.raises(ConfigError, match="missing.content must be one of keep, shuffle"):
        build_run_config({"missing": {"content": "drop"}})
    kg = build_run_config({
        "dataset": {"name": "synthetic_kg", "num_entities": 60}, "partition": {"name": "relation_id", "num_clients": 2},
        "missing": {"name": "kg_items", "content": "shuffle"}, "task": {"name": "kg_completion"},
        "output": {"cache_dir": str(tmp_path)},
    })
    with pytest.raises(ConfigError, match="graph tasks"):
        build_federation(kg)


def _with_gallery_view(cfg, view: str):  # noqa: ANN001, ANN202
    return dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, params={**cfg.task.params, "gallery_view": view}))


def test_graph_view_lets_fedavg_match_shuffled_pairs_by_position(tmp_path):
    """Under ``gallery_view: graph`` (both views over the same graph), with the content of every
    pair broken, FedAvg still ranks a node's true partner far above a random ranking: both
    views of a node share its neighbourhood. This is why the default is ``content``.

    The bar is 1.3x, above the content view's band (within 25% of random, the test below):
    at this toy size the effect is 1.60x on the CPU and 1.47x on an H200, so the 1.5x bar it
    had was a coin toss on a GPU."""
    cfg = _with_gallery_view(_with_content(_pair_cfg("fedavg", "retrieval", tmp_path, rounds=12), "shuffle"), "graph")
    fed = build_federation(cfg)
    rec = Engine(cfg, fed=fed).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["metrics"]["test/mrr"] > 1.3 * random_mrr(fed), (rec["metrics"], random_mrr(fed))


@pytest.mark.parametrize("algo", ["fedavg", "fedgcn"])
def test_content_view_is_at_chance_with_shuffled_pairs(tmp_path, algo):
    """Under the default ``gallery_view: content``, shuffled content leaves nothing to match:
    test MRR stays within 25% of a random ranking's, while the same training with real content
    beats 1.5 x random (``test_multimodal_fl``)."""
    cfg = _with_content(_pair_cfg(algo, "retrieval", tmp_path, rounds=20), "shuffle")
    assert "gallery_view" not in cfg.task.params   # the default
    fed = build_federation(cfg)
    rec = Engine(cfg, fed=fed).run()
    assert rec["status"] == "ok", rec["error"]
    ref = random_mrr(fed)
    assert abs(rec["metrics"]["test/mrr"] - ref) < 0.25 * ref, (rec["metrics"], ref)
