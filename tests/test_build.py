"""The federated-artifact builder: hashing, caching, masking, client views, stats, errors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_limits

from benchmark.config import DatasetConfig, MissingConfig, OutputConfig, PartitionConfig, RunConfig, SplitConfig
from benchmark.errors import ConfigError
from benchmark.federation import FederatedData, GraphDataset
from benchmark.registry import DATASETS
from data_prep.build import build_federation, prepare_stats_json, prepare_stats_table, read_cached
from data_prep.datasets.synthetic import SyntheticGraph

SMALL = {"num_nodes": 600, "text_dim": 24, "image_dim": 16}


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    with threadpool_limits(1):
        yield


def run_config(
    cache: Path,
    seed: int = 0,
    partition: str = "dirichlet_label",
    part_params: dict | None = None,
    clients: int = 4,
    missing: str = "node_level",
    miss_params: dict | None = None,
    fill: str = "zeros",
    dataset: str = "synthetic",
    data_params: dict | None = None,
    normalize: str = "none",  # these tests compare rows with the loader's; tests/test_normalize.py covers the rest
) -> RunConfig:
    return RunConfig(
        seed=seed,
        dataset=DatasetConfig(name=dataset, normalize=normalize,
                              params=dict(SMALL if data_params is None else data_params)),
        partition=PartitionConfig(name=partition, num_clients=clients, params=part_params or {}),
        missing=MissingConfig(name=missing, fill=fill, params={"rate": 0.4} if miss_params is None else miss_params),
        split=SplitConfig(train=0.6, val=0.2, test=0.2),
        output=OutputConfig(cache_dir=str(cache)),
    )


@pytest.fixture(scope="module")
def truth() -> GraphDataset:
    return SyntheticGraph(SyntheticGraph.Config(**SMALL)).load()


@pytest.fixture(scope="module")
def fed(tmp_path_factory) -> FederatedData:
    return build_federation(run_config(tmp_path_factory.mktemp("cache")))


def artifacts(cache: Path) -> list[Path]:
    return sorted((cache / "artifacts").glob("*.safetensors")) if (cache / "artifacts").exists() else []


def test_artifact_is_deterministic(tmp_path, fed):
    again = build_federation(run_config(tmp_path))
    assert again.artifact_hash == fed.artifact_hash
    assert again.stats["artifact_recipe"] == fed.stats["artifact_recipe"]
    for a, b in zip(fed.clients, again.clients):
        assert torch.equal(a.global_ids, b.global_ids)
        assert torch.equal(a.available, b.available)
        assert torch.equal(a.train_mask, b.train_mask) and torch.equal(a.test_mask, b.test_mask)
        assert all(torch.equal(a.features[m], b.features[m]) for m in a.features)
    (path,) = artifacts(tmp_path)
    assert path.name == f"{fed.artifact_hash}.safetensors"
    art = read_cached(path)
    assert art["available"].shape == (600, 2) and len(art["clients"]) == 4
    assert art["dropped_edges"] == fed.stats["dropped_edges"]


def test_cache_is_reused(tmp_path):
    cfg = run_config(tmp_path)
    first = build_federation(cfg)
    (path,) = artifacts(tmp_path)
    stamp = path.stat().st_mtime_ns
    second = build_federation(cfg)
    assert not first.stats["artifact_reused"] and second.stats["artifact_reused"]
    assert path.stat().st_mtime_ns == stamp
    assert [p.name for p in path.parent.iterdir()] == [path.name], "temporary files left behind"
    # a damaged artifact is rebuilt, not trusted
    path.write_bytes(b"not a torch file")
    third = build_federation(cfg)
    assert not third.stats["artifact_reused"] and third.artifact_hash == first.artifact_hash
    assert torch.equal(third.clients[0].available, first.clients[0].available)


@pytest.mark.parametrize("fill", ["zeros", "random", "mean"])
def test_unavailable_entries_never_hold_the_true_value(tmp_path, truth, fill):
    fed = build_federation(run_config(tmp_path, fill=fill))
    for c in fed.clients + [fed.pooled]:
        for j, m in enumerate(fed.modalities):
            true = truth.features[m][c.global_ids]
            miss = ~c.available[:, j]
            assert miss.any()
            assert (c.features[m][miss] != true[miss]).all()
            assert torch.equal(c.features[m][~miss], true[~miss])
    if fill == "mean":
        c = fed.clients[0]
        have = c.available[:, 0]
        fit = have & c.train_mask  # the client's training rows only: no held-out row shapes a fill
        expected = truth.features["text"][c.global_ids][fit].mean(0)
        assert torch.allclose(c.features["text"][~have][0], expected)


def test_clients_hold_induced_subgraphs(fed, truth):
    n = truth.num_nodes
    owner = torch.full((n,), -1)
    for c in fed.clients:
        owner[c.global_ids] = c.cid
    local_total = 0
    for c in fed.clients:
        ei = c.edge_index
        assert ei.numel() == 0 or (ei.min() >= 0 and ei.max() < c.num_nodes)
        g = c.global_ids[ei]
        assert (owner[g] == c.cid).all()
        local_total += ei.shape[1] // 2
        be = c.boundary_edges
        assert (owner[c.global_ids[be[0]]] == c.cid).all() and (owner[be[1]] != c.cid).all()
        assert c.y.equal(truth.y[c.global_ids])
        assert c.num_classes == truth.num_classes
    assert local_total + fed.stats["dropped_edges"] == truth.num_edges
    assert sum(c.boundary_edges.shape[1] for c in fed.clients) == 2 * fed.stats["dropped_edges"]


def test_splits_cover_each_client(fed):
    for c in fed.clients:
        masks = torch.stack([c.train_mask, c.val_mask, c.test_mask]).int()
        assert (masks.sum(0) == 1).all()
    total = sum(c.num_nodes for c in fed.clients)
    train = sum(c.num_train for c in fed.clients)
    assert abs(train / total - 0.6) < 0.05


def test_pooled_covers_everything(fed, truth):
    p = fed.pooled
    assert p.cid == -1 and torch.equal(p.global_ids, torch.arange(truth.num_nodes))
    assert torch.equal(p.edge_index, truth.edge_index)
    for name in ("train_mask", "val_mask", "test_mask", "available"):
        union = torch.zeros_like(getattr(p, name))
        for c in fed.clients:
            union[c.global_ids] = getattr(c, name)
        assert torch.equal(getattr(p, name), union), name
    for m in fed.modalities:
        for c in fed.clients:
            assert torch.equal(p.features[m][c.global_ids], c.features[m])


def test_seed_changes_partition_not_recipe(tmp_path, fed):
    other = build_federation(run_config(tmp_path, seed=1))
    assert other.artifact_hash != fed.artifact_hash
    assert other.stats["artifact_recipe"] == fed.stats["artifact_recipe"]
    assert any(not torch.equal(a.global_ids, b.global_ids) for a, b in zip(fed.clients, other.clients))


def test_options_change_the_hash(tmp_path, fed):
    alpha = build_federation(run_config(tmp_path, part_params={"alpha": 2.0}))
    rate = build_federation(run_config(tmp_path, miss_params={"rate": 0.2}))
    hashes = {fed.artifact_hash, alpha.artifact_hash, rate.artifact_hash}
    assert len(hashes) == 3
    same = build_federation(run_config(tmp_path, part_params={"alpha": 0.5}))  # the default, spelled out
    assert same.artifact_hash == fed.artifact_hash


def test_stats(fed):
    rows = fed.stats["clients"]
    assert [r["cid"] for r in rows] == [0, 1, 2, 3]
    assert sum(r["nodes"] for r in rows) == 600
    for r, c in zip(rows, fed.clients):
        assert sum(r["labels"]) == c.num_nodes and len(r["labels"]) == fed.num_classes
        assert r["train"] + r["val"] + r["test"] == c.num_nodes
        assert set(r["available"]) == {"text", "image"}
        assert abs(r["available"]["text"] - 0.6) < 0.02
    for key in ("dropped_edges", "dropped_nodes", "artifact_hash", "artifact_recipe"):
        assert key in fed.stats
    blob = json.loads(json.dumps(prepare_stats_json(fed)))
    assert blob["artifact_hash"] == fed.artifact_hash and len(blob["clients"]) == 4
    table = prepare_stats_table(fed)
    assert "avail text" in table and fed.artifact_hash in table and table.count("\n") > 8


def test_client_level_and_louvain(tmp_path):
    fed = build_federation(
        run_config(tmp_path, partition="louvain", clients=3, missing="client_level", miss_params={"rate": 0.34})
    )
    lost = [c for c in fed.clients if not c.available.all(0).all()]
    assert len(lost) == 1
    assert any(not lost[0].available[:, j].any() for j in range(2))
    assert fed.stats["partition_info"]["method"] == "louvain"


@dataclass
class _MaskedConfig:
    n: int = 90


class _WithGlobalSplit:
    """A tiny dataset that ships its own train/val/test split."""

    Config = _MaskedConfig

    def __init__(self, cfg: _MaskedConfig) -> None:
        self.cfg = cfg

    def load(self, root: Path | None) -> GraphDataset:
        n = self.cfg.n
        src = torch.arange(n)
        ring = torch.stack([src, (src + 1) % n])
        idx = torch.arange(n)
        return GraphDataset(
            name="with_split",
            features={"text": torch.randn(n, 3, generator=torch.Generator().manual_seed(0)) + 5},
            edge_index=torch.cat([ring, ring.flip(0)], 1),
            y=idx % 3,
            num_classes=3,
            train_mask=idx % 3 == 0,
            val_mask=idx % 3 == 1,
            test_mask=idx % 3 == 2,
        )


def test_dataset_split_is_kept(tmp_path):
    DATASETS.register("test_with_split")(_WithGlobalSplit)
    try:
        fed = build_federation(
            run_config(tmp_path, dataset="test_with_split", data_params={}, partition="iid", clients=3)
        )
    finally:
        DATASETS.unregister("test_with_split")
    for c in fed.clients:
        assert torch.equal(c.train_mask, c.global_ids % 3 == 0)
        assert torch.equal(c.test_mask, c.global_ids % 3 == 2)


@pytest.mark.parametrize(
    "overrides",
    [
        {"part_params": {"alpha": 0.0}},
        {"part_params": {"alpha": -2.0}},
        {"miss_params": {"rate": 1.5}},
        {"clients": 601},
        {"partition": "louvain", "clients": 100},
        {"part_params": {"alpah": 0.5}},
        {"fill": "median"},
        {"data_params": {"num_nodes": 600, "homophily": 2.0}},
    ],
)
def test_bad_input_fails_before_writing(tmp_path, overrides):
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError):
        build_federation(run_config(cache, **overrides))
    assert not cache.exists() or not any(cache.rglob("*"))


@pytest.mark.parametrize(("section", "name", "needle"), [
    ("partition", "relation_id", "knowledge-graph datasets"),
    ("partition", "amfl_population", "AMFL simulations"),
    ("missing", "kg_items", "knowledge-graph datasets"),
])
def test_a_component_of_another_dataset_kind_is_one_line_on_a_graph(section, name, needle, tmp_path):
    """A KG or AMFL partitioner or masker on a graph dataset: a ConfigError that names the
    component, what it applies to and what a graph takes, before anything is written."""
    from benchmark.config import build_run_config
    from benchmark.errors import ConfigError

    cfg = {"dataset": {"name": "synthetic", "num_nodes": 60}, "partition": {"name": "louvain", "num_clients": 2},
           "missing": {"name": "node_level"}, "output": {"cache_dir": str(tmp_path)}}
    cfg[section] = {"name": name, **({"num_clients": 2} if section == "partition" else {})}
    with pytest.raises(ConfigError, match=rf"^{section} '{name}' applies to {needle} .*dataset 'synthetic' is a graph$"):
        build_federation(build_run_config(cfg))
    assert not (tmp_path / "artifacts").exists()
