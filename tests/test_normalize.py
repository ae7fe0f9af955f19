"""Feature conditioning (``dataset.normalize``, data_prep/normalize.py): each client's own
training rows fit the statistics, and no held-out row or other client moves a training input."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from data_prep.build import artifact_path, assemble, build_federation, load_artifact
from data_prep.datasets.synthetic import SyntheticGraph
from data_prep.normalize import conditioned_features
from test_build import SMALL, run_config


def _toy(seed: int = 0) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor, np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    n = 60
    feats = {"a": torch.rand(n, 5, generator=g) * 4 + 2, "b": torch.randn(n, 3, generator=g) * 0.1 - 7}
    available = torch.ones(n, 2, dtype=torch.bool)
    available[::7, 0] = False
    train = torch.zeros(n, dtype=torch.bool)
    train[::2] = True
    owner = np.repeat(np.arange(3), n // 3)
    return feats, available, train, owner


def test_each_clients_training_rows_are_standardized_by_their_own_statistics():
    feats, available, train, owner = _toy()
    out = conditioned_features(feats, available, train, owner, "standard")
    for cid in range(3):
        rows = torch.from_numpy(owner == cid) & train & available[:, 0]
        x = out["a"][rows].double()
        assert torch.allclose(x.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-5)
        assert torch.allclose(x.std(0, unbiased=False), torch.ones(5, dtype=torch.float64), atol=1e-4)


def test_statistics_ignore_heldout_rows_and_other_clients():
    feats, available, train, owner = _toy()
    base = conditioned_features(feats, available, train, owner, "standard")
    changed = {m: x.clone() for m, x in feats.items()}
    held = ~train
    changed["a"][held] = changed["a"][held] * 10 + 100   # every validation/test row
    changed["b"][torch.from_numpy(owner == 2)] += 50      # every row of client 2
    other = conditioned_features(changed, available, train, owner, "standard")
    keep = train & torch.from_numpy(owner != 2)
    for m in feats:
        assert torch.equal(base[m][keep], other[m][keep]), m
    assert not torch.equal(base["a"][held], other["a"][held])  # the change reached the output


def test_unavailable_rows_are_not_fitted():
    feats, available, train, owner = _toy()
    base = conditioned_features(feats, available, train, owner, "standard")
    changed = {m: x.clone() for m, x in feats.items()}
    changed["a"][~available[:, 0]] = 1e6  # a masked row's true value must shape no statistic
    other = conditioned_features(changed, available, train, owner, "standard")
    assert torch.equal(base["a"][available[:, 0]], other["a"][available[:, 0]])


def test_l2_and_none():
    feats, available, train, owner = _toy()
    l2 = conditioned_features(feats, available, train, owner, "l2")
    assert torch.allclose(l2["a"].norm(dim=1), torch.ones(60), atol=1e-5)
    none = conditioned_features(feats, available, train, owner, "none")
    assert all(torch.equal(none[m], feats[m]) for m in feats)
    with pytest.raises(ValueError, match="normalize"):
        conditioned_features(feats, available, train, owner, "minmax")


def test_a_client_without_enough_training_rows_keeps_its_rows_unscaled():
    feats, available, train, owner = _toy()
    train = train & torch.from_numpy(owner != 1)
    train[np.flatnonzero(owner == 1)[0]] = True  # one training row: no statistic can be fitted
    out = conditioned_features(feats, available, train, owner, "standard")
    rows = torch.from_numpy(owner == 1)
    assert torch.equal(out["a"][rows], feats["a"][rows])


def _raw_synthetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator without its ``standardized`` mark, so ``standard`` conditions it like raw rows."""
    load = SyntheticGraph.load

    def unmarked(self, root=None):  # noqa: ANN001, ANN202
        ds = load(self, root)
        return dataclasses.replace(ds, meta={k: v for k, v in ds.meta.items() if k != "standardized"})

    monkeypatch.setattr(SyntheticGraph, "load", unmarked)


def test_rows_standardized_by_construction_are_left_as_they_are(tmp_path):
    fed_std = build_federation(run_config(tmp_path, normalize="standard"))
    fed_none = build_federation(run_config(tmp_path, normalize="none"))
    for a, b in zip(fed_std.clients, fed_none.clients):
        assert all(torch.equal(a.features[m], b.features[m]) for m in fed_std.modalities)


def test_the_builder_conditions_training_rows_from_training_rows_only(tmp_path, monkeypatch):
    """Built end to end with the default: changing every validation/test node's features in the
    dataset leaves every client's training rows bit-identical, and training rows are z-scored."""
    _raw_synthetic(monkeypatch)
    cfg = run_config(tmp_path, normalize="standard", fill="mean")
    fed = build_federation(cfg)
    for c in fed.clients:
        have = c.train_mask & c.available[:, 0]
        x = c.features["text"][have].double()
        assert torch.allclose(x.mean(0), torch.zeros_like(x.mean(0)), atol=1e-4)
    dataset = SyntheticGraph(SyntheticGraph.Config(**SMALL)).load()
    assert "standardized" not in dataset.meta
    art = load_artifact(artifact_path(cfg, fed.artifact_hash), dataset.num_nodes, len(dataset.modalities))
    held = art["val_mask"].bool() | art["test_mask"].bool()
    changed = dataclasses.replace(dataset, features={
        m: torch.where(held.unsqueeze(1), x * 5 + 3, x) for m, x in dataset.features.items()})
    other = assemble(changed, art, cfg, fed.artifact_hash, fed.stats["artifact_recipe"])
    for a, b in zip(fed.clients, other.clients):
        for m in fed.modalities:
            assert torch.equal(a.features[m][a.train_mask], b.features[m][b.train_mask]), (a.cid, m)
        assert not all(torch.equal(a.features[m], b.features[m]) for m in fed.modalities)


def test_normalize_is_in_the_artifact_recipe_not_the_protocol(tmp_path):
    from benchmark.results import protocol_hash

    std, none = run_config(tmp_path, normalize="standard"), run_config(tmp_path, normalize="none")
    assert build_federation(std).stats["artifact_recipe"] != build_federation(none).stats["artifact_recipe"]
    assert protocol_hash(std) == protocol_hash(none)  # the KG and AMFL tracks, which ignore it, keep their hashes
