"""Missing-modality maskers: rates, whole-client losses, stacking on natural missingness, seeds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmark.errors import ConfigError
from benchmark.federation import GraphDataset, PartitionResult
from benchmark.registry import MASKERS
from data_prep.missing import ClientAndNodeLevelMissing, ClientLevelMissing, NodeLevelMissing, NoMissing
from data_prep.partition.iid import IIDPartitioner

N = 10_000


def dataset(natural: torch.Tensor | None = None, n: int = N) -> GraphDataset:
    feats = {"text": torch.zeros(n, 3), "image": torch.zeros(n, 2)}
    return GraphDataset(
        name="flat", features=feats, edge_index=torch.empty(2, 0, dtype=torch.long), available=natural
    )


@pytest.fixture(scope="module")
def flat() -> GraphDataset:
    return dataset()


@pytest.fixture(scope="module")
def parts(flat) -> PartitionResult:
    return IIDPartitioner(seed=0).split(flat, 10)


def node_level(seed: int = 0, **cfg) -> NodeLevelMissing:
    return NodeLevelMissing(NodeLevelMissing.Config(**cfg), seed=seed)


def test_registered():
    assert MASKERS.get("none") is NoMissing
    assert MASKERS.get("node_level") is NodeLevelMissing
    assert MASKERS.get("client_level") is ClientLevelMissing
    assert MASKERS.get("client_and_node_level") is ClientAndNodeLevelMissing


def test_none_keeps_natural_availability(flat, parts):
    avail = NoMissing(seed=0).apply(flat, parts)
    assert avail.dtype == torch.bool and avail.shape == (N, 2) and avail.all()


@pytest.mark.parametrize("rate", [0.0, 0.3, 0.7, 1.0])
def test_node_level_rate_is_hit(flat, parts, rate):
    avail = node_level(rate=rate).apply(flat, parts)
    missing = 1 - avail.float().mean(0)
    assert torch.all((missing - rate).abs() <= 0.02), missing
    for c in parts.clients:  # every client is missing the same share
        local = 1 - avail[c.node_ids].float().mean(0)
        assert torch.all((local - rate).abs() <= 0.01)


def test_node_level_modalities_are_independent(flat, parts):
    avail = node_level(rate=0.5).apply(flat, parts)
    both_missing = float((~avail).all(1).float().mean())
    assert abs(both_missing - 0.25) < 0.02


def test_node_level_per_modality_rates(flat, parts):
    avail = node_level(rate=0.1, rates={"image": 0.6}).apply(flat, parts)
    missing = 1 - avail.float().mean(0)
    assert abs(float(missing[0]) - 0.1) <= 0.02 and abs(float(missing[1]) - 0.6) <= 0.02


def test_node_level_keep_one(flat, parts):
    masker = node_level(rate=0.6, keep_one=True)
    avail = masker.apply(flat, parts)
    assert avail.any(1).all()
    assert masker.info["restored"] > 0.3 * N  # about 0.36 N nodes would have lost both


def test_client_level_hits_whole_clients(flat, parts):
    masker = ClientLevelMissing(ClientLevelMissing.Config(rate=0.3), seed=0)
    avail = masker.apply(flat, parts)
    hit = 0
    for cid, c in enumerate(parts.clients):
        local = avail[c.node_ids]
        lost = [j for j in range(2) if not local[:, j].any()]
        assert all(local[:, j].all() for j in range(2) if j not in lost), "partial loss in a client"
        assert len(lost) <= 1
        if lost:
            hit += 1
            assert masker.info["lost"][cid] == flat.modalities[lost[0]]
    assert hit == round(0.3 * len(parts.clients))


def test_client_level_forced_modality(flat, parts):
    avail = ClientLevelMissing(ClientLevelMissing.Config(rate=0.5, modality="image"), seed=1).apply(flat, parts)
    assert avail[:, 0].all()
    assert int((~avail[:, 1]).sum()) == sum(
        c.node_ids.numel() for c in parts.clients if not avail[c.node_ids, 1].any()
    )
    hit = sum(1 for c in parts.clients if not avail[c.node_ids, 1].any())
    assert hit == 5


@pytest.mark.parametrize("client_rate", [None, 0.5])
def test_client_and_node_level_is_both_artifacts_at_once(flat, parts, client_rate):
    """FedMPO's protocol: the client-level clients lose their modality whole, every other
    (client, modality) keeps the node-level rate, and the result is exactly the AND of the two
    single maskers at the same seed (so it shares their artifacts)."""
    both = ClientAndNodeLevelMissing(ClientAndNodeLevelMissing.Config(rate=0.3, client_rate=client_rate), seed=4)
    avail = both.apply(flat, parts)
    whole = ClientLevelMissing(ClientLevelMissing.Config(rate=0.3 if client_rate is None else client_rate), seed=4)
    nodes = node_level(seed=4, rate=0.3)
    assert torch.equal(avail, whole.apply(flat, parts) & nodes.apply(flat, parts))
    lost = both.info["client_level"]["lost"]
    assert len(lost) == round((0.3 if client_rate is None else client_rate) * len(parts.clients) + 1e-9)
    for cid, c in enumerate(parts.clients):
        for j, m in enumerate(flat.modalities):
            share = float(avail[c.node_ids, j].float().mean())
            assert share == 0.0 if lost.get(cid) == m else share == pytest.approx(0.7, abs=1e-3)


def test_stacks_with_natural_missingness(parts):
    g = torch.Generator().manual_seed(0)
    natural = torch.rand(N, 2, generator=g) > 0.2
    ds = dataset(natural)
    avail = node_level(rate=0.3).apply(ds, parts)
    assert not (avail & ~natural).any(), "a naturally missing entry became available"
    kept = avail[natural].float().mean()
    assert abs(float(kept) - 0.7) < 0.02  # the simulated rate acts on the naturally present ones
    client = ClientLevelMissing(ClientLevelMissing.Config(rate=1.0), seed=0).apply(ds, parts)
    assert not (client & ~natural).any()
    assert NoMissing(seed=0).apply(ds, parts).equal(natural)


def test_keep_one_restores_only_natural_modalities(parts):
    natural = torch.ones(N, 2, dtype=torch.bool)
    natural[:100, 1] = False
    natural[100:150] = False  # nothing to restore for these
    avail = node_level(rate=0.9, keep_one=True).apply(dataset(natural), parts)
    assert not (avail & ~natural).any()
    assert not avail[100:150].any()
    assert avail[150:].any(1).all() and avail[:100, 0].all()


def test_seeded(flat, parts):
    for make in (
        lambda s: node_level(seed=s, rate=0.4),
        lambda s: ClientLevelMissing(ClientLevelMissing.Config(rate=0.5), seed=s),
    ):
        assert make(7).apply(flat, parts).equal(make(7).apply(flat, parts))
        assert not make(7).apply(flat, parts).equal(make(8).apply(flat, parts))


@pytest.mark.parametrize(
    "cls,bad",
    [
        (NodeLevelMissing, {"rate": 1.5}),
        (NodeLevelMissing, {"rate": -0.1}),
        (NodeLevelMissing, {"rates": {"image": 2.0}}),
        (NodeLevelMissing, {"rates": {"image": "lots"}}),
        (ClientLevelMissing, {"rate": 1.01}),
    ],
)
def test_bad_rates(cls, bad):
    from benchmark.config import build_dataclass

    with pytest.raises(ConfigError, match=r"\[0, 1\]|number"):
        build_dataclass(cls.Config, bad, "missing")


def test_unknown_modality(flat, parts):
    with pytest.raises(ConfigError, match="imgae.*did you mean 'image'"):
        node_level(rates={"imgae": 0.3}).apply(flat, parts)
    with pytest.raises(ConfigError, match="audio"):
        ClientLevelMissing(ClientLevelMissing.Config(rate=0.5, modality="audio"), seed=0).apply(flat, parts)


def test_rate_rounding_over_clients():
    ds = dataset(n=95)
    part = IIDPartitioner(seed=0).split(ds, 7)
    avail = ClientLevelMissing(ClientLevelMissing.Config(rate=0.5), seed=0).apply(ds, part)
    hit = sum(1 for c in part.clients if not avail[c.node_ids].all(1).all())
    assert hit == round(0.5 * 7)
    assert np.isclose(1 - NodeLevelMissing(NodeLevelMissing.Config(rate=0.0), seed=0).apply(ds, part).float().mean(), 0)


def test_client_level_rounds_halves_up_so_each_rho_is_its_own_setting(flat):
    """rho 0.3 / 0.5 / 0.7 of 5 clients must be 2 / 3 / 4 clients (round-half-even gave 2 / 2 / 4)."""
    five = IIDPartitioner(seed=0).split(flat, 5)
    counts = []
    for rate in (0.3, 0.5, 0.7):
        masker = ClientLevelMissing(ClientLevelMissing.Config(rate=rate), seed=0)
        masker.apply(flat, five)
        counts.append(len(masker.info["lost"]))
    assert counts == [2, 3, 4]
