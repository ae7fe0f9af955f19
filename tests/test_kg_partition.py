"""Relation-ID partition and Dirichlet item dealing (Table II on real FB15K-237: test_kg_table2.py)."""

from __future__ import annotations

import pytest
import torch

from benchmark.errors import ConfigError
from benchmark.registry import PARTITIONERS
from data_prep.kg.dataset import KGDataset
from data_prep.kg.synthetic import make_synthetic_kg
from data_prep.partition.dirichlet_items import (
    build_client_modalities, client_item_features, cross_client_cosine, cross_client_jaccard, deal_items,
    effective_rates,
    fill_unavailable, item_id_sets, text_token_sets,
)
from data_prep.partition.relation_id import relation_id_partition


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def kg() -> KGDataset:
    return make_synthetic_kg(num_entities=200, seed=1)


def test_relation_id_partition_invariants(kg):
    part = PARTITIONERS.get("relation_id")().split(kg, 3)
    rel_sets = [set(c.relations.tolist()) for c in part.clients]
    assert set().union(*rel_sets) == set(range(kg.num_relations))
    assert sum(len(s) for s in rel_sets) == kg.num_relations        # disjoint
    pooled = sorted(map(tuple, kg.all_triples().tolist()))
    got = sorted(t for c in part.clients for t in map(tuple, c.all_triples().tolist()))
    assert got == pooled                                             # nothing lost or duplicated
    for c, rels in zip(part.clients, rel_sets):
        assert set(c.all_triples()[:, 1].tolist()) <= rels
        n = c.num_triples
        assert len(c.valid) == round(0.1 * n) and len(c.test) == round(0.1 * n)
        assert torch.equal(c.entities, torch.unique(c.all_triples()[:, [0, 2]]))
    again = relation_id_partition(kg.all_triples(), kg.num_relations, 3, seed=0)
    assert all(torch.equal(a.train, b.train) for a, b in zip(part.clients, again.clients))
    other = relation_id_partition(kg.all_triples(), kg.num_relations, 3, seed=1)
    assert any(not torch.equal(a.relations, b.relations) for a, b in zip(part.clients, other.clients))
    with pytest.raises(ConfigError):
        relation_id_partition(kg.all_triples(), kg.num_relations, kg.num_relations + 1)


# Table II on the real FB15K-237 (canonical seed, 2% bounds): tests/test_kg_table2.py


# --------------------------------------------------------------------------- item dealing


def test_deal_items_goes_to_holders_only():
    owner = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])
    ents = [torch.tensor([0, 1]), torch.tensor([0, 2]), torch.tensor([0, 1, 2])]
    held = deal_items(owner, ents, alpha=0.1, seed=0, cover="dealt")
    flat = torch.cat(held).sort().values
    assert flat.tolist() == [0, 1, 2, 3, 4, 5]                     # entity 3 has no holder: dealt to nobody
    for c, h in enumerate(held):
        assert set(owner[h].tolist()) <= set(ents[c].tolist())
    full = deal_items(owner, ents, partitioned=False)
    assert [h.tolist() for h in full] == [[0, 1, 2, 3, 4], [0, 1, 2, 5], [0, 1, 2, 3, 4, 5]]
    assert [h.tolist() for h in deal_items(owner, ents, seed=5)] == [h.tolist() for h in deal_items(owner, ents, seed=5)]


def test_every_holder_gets_an_item_of_each_entity_it_holds():
    """cover: every_holder (issue 27): the Dirichlet dealing plus one copied item for each
    holder it left empty, so at r = 1 a client holds every modality its entities have; the
    dealt part is exactly what cover: dealt deals, and an item goes to holders only."""
    gen = torch.Generator().manual_seed(3)
    n_ent = 300
    owner = torch.randint(0, n_ent, (700,), generator=gen)          # 0-7 items per entity, some none
    ents = [torch.unique(torch.randint(0, n_ent, (200,), generator=gen)) for _ in range(5)]
    dealt = deal_items(owner, ents, alpha=0.1, seed=4, cover="dealt")
    every = deal_items(owner, ents, alpha=0.1, seed=4)
    has_items = torch.bincount(owner, minlength=n_ent) > 0
    gaps = 0
    for c, (d, e) in enumerate(zip(dealt, every)):
        assert set(d.tolist()) <= set(e.tolist())                   # the dealing is kept as it was
        assert set(owner[e].tolist()) <= set(ents[c].tolist())      # copies go to holders only
        held_ents = torch.zeros(n_ent, dtype=torch.bool)
        held_ents[owner[e]] = True
        assert bool(held_ents[ents[c]].eq(has_items[ents[c]]).all())  # every holder of an entity with items has one
        dealt_ents = torch.zeros(n_ent, dtype=torch.bool)
        dealt_ents[owner[d]] = True
        gaps += int((has_items[ents[c]] & ~dealt_ents[ents[c]]).sum())
        assert len(e) - len(d) == int((has_items[ents[c]] & ~dealt_ents[ents[c]]).sum())  # one copy per empty pair
    assert gaps > 50                                                # alpha 0.1 leaves many holders empty
    assert [h.tolist() for h in deal_items(owner, ents, seed=4)] == [h.tolist() for h in every]
    with pytest.raises(ConfigError, match="cover"):
        deal_items(owner, ents, cover="some")


def test_full_availability_at_rate_one_is_the_data_coverage(kg):
    """r = 1 with every holder covered: a client holds a modality for exactly the entities the
    dataset gives one (Table VI's 'fully available' column); dealt-only falls short."""
    part = relation_id_partition(kg.all_triples(), kg.num_relations, 3, seed=0, num_entities=kg.num_entities)
    full = build_client_modalities(kg, part, alpha=0.1, rate=1.0, seed=0)
    dealt = build_client_modalities(kg, part, alpha=0.1, rate=1.0, seed=0, cover="dealt")
    short = 0
    for f, d in zip(full, dealt):
        for j, m in enumerate(f.modalities):
            has = torch.bincount(kg.item_entity[m].long(), minlength=kg.num_entities) > 0
            assert torch.equal(f.available[:, j], has[f.entities])
            short += int((has[d.entities] & ~d.available[:, j]).sum())
    assert short > 0


def test_dirichlet_alpha_controls_concentration():
    n_ent, items_per = 400, 20
    owner = torch.arange(n_ent).repeat_interleave(items_per)
    ents = [torch.arange(n_ent)] * 3

    def top_share(alpha: float) -> float:
        held = deal_items(owner, ents, alpha=alpha, seed=0)
        counts = torch.stack([torch.bincount(owner[h], minlength=n_ent) for h in held])
        return float((counts.max(0).values / items_per).mean())

    assert top_share(0.1) > 0.85
    assert top_share(100.0) < 0.5


def test_client_features_are_means_of_held_items():
    feats = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 5.0], [7.0, 7.0]])
    owner = torch.tensor([0, 0, 2, 1])
    x, has = client_item_features(feats, owner, torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]))
    assert x.tolist() == [[2.0, 0.0], [0.0, 0.0], [0.0, 5.0]] and has.tolist() == [True, False, True]


def test_build_client_modalities_masks_and_fill(kg):
    part = relation_id_partition(kg.all_triples(), kg.num_relations, 3, seed=0, num_entities=kg.num_entities)
    full = build_client_modalities(kg, part, rate=1.0, partitioned=False, seed=0)
    half = build_client_modalities(kg, part, rate=0.5, fill="random", seed=0)
    for f, h in zip(full, half):
        assert h.available.shape == (len(h.entities), 2)
        assert bool((h.available <= h.natural).all())
        if int(h.natural.sum()) > 50:
            rate = float(h.available.sum() / h.natural.sum())
            assert 0.3 < rate < 0.7
        for j, m in enumerate(h.modalities):
            miss = ~h.available[:, j] & f.natural[:, j]
            assert not torch.isclose(h.features[m][miss], f.features[m][miss]).all(dim=1).any()  # never the true value
    zeros = build_client_modalities(kg, part, rate=0.5, fill="zeros", seed=0)
    z = zeros[0]
    assert bool((z.features["text"][~z.available[:, 0]] == 0).all())
    same = build_client_modalities(kg, part, rate=0.5, fill="random", seed=0)
    assert all(torch.equal(a.features["text"], b.features["text"]) for a, b in zip(half, same))
    x = torch.randn(10, 3)
    with pytest.raises(ConfigError):
        fill_unavailable(x, torch.ones(10, dtype=torch.bool).logical_not(), "mean", torch.Generator())


def test_cross_client_similarities():
    ents = [torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1])]
    feats = [torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.0, 1.0], [1.0, 1.0]]), torch.tensor([[-1.0, -1.0]])]
    # entity 0: pair (0,1) cos 0; entity 1: pairs (0,1)=1, (0,2)=-1, (1,2)=-1 -> -1/3; mean over entities
    assert cross_client_cosine(ents, feats) == pytest.approx((0.0 + (-1 / 3)) / 2)
    valid = [torch.tensor([True, True]), torch.tensor([False, True]), torch.tensor([True])]
    assert cross_client_cosine(ents, feats, valid) == pytest.approx(-1 / 3)
    texts = ["Kobe Bryant", "basketball player", "Bryant"]
    owner = torch.tensor([0, 0, 0])
    held = [torch.tensor([0]), torch.tensor([1, 2]), torch.tensor([], dtype=torch.long)]
    sets = [text_token_sets(texts, owner, h) for h in held]
    e = [torch.tensor([0])] * 3
    assert cross_client_jaccard(e, sets) == pytest.approx(1 / 4)  # {kobe, bryant} vs {basketball, player, bryant}
    assert cross_client_jaccard(e, sets, skip_empty=False) == pytest.approx((1 / 4 + 0 + 0) / 3)
    assert cross_client_jaccard(e, [item_id_sets(owner, h) for h in held]) == 0.0


def test_effective_availability_makes_r_the_share_of_entities_holding_a_modality(kg):
    part = relation_id_partition(kg.all_triples(), kg.num_relations, 3, seed=0, num_entities=kg.num_entities)
    nominal = build_client_modalities(kg, part, alpha=0.1, rate=0.5, seed=0)
    effective = build_client_modalities(kg, part, alpha=0.1, rate=0.5, seed=0, availability="effective")
    gaps = []
    for n, e in zip(nominal, effective):
        assert torch.equal(n.natural, e.natural)            # same dealing: only the keep probability changes
        assert bool((e.available <= e.natural).all())        # never a modality the client was not dealt
        assert bool((n.available <= e.available).all())      # same uniforms, higher thresholds
        holding = e.natural.float().mean(0)
        share_nominal, share_effective = n.available.float().mean(0), e.available.float().mean(0)
        for j in range(holding.numel()):
            if holding[j] >= 0.5 and len(e.entities) > 60:  # enough held items to reach r = 0.5
                assert abs(float(share_effective[j]) - 0.5) < 0.12
                gaps.append(float(share_effective[j] - share_nominal[j]))
    assert gaps and max(gaps) > 0.05  # dealing thinned the nominal share; effective restores it
    rates = effective_rates(torch.tensor([[True, False], [False, False], [True, False], [True, False]]), 0.5)
    assert torch.allclose(rates, torch.tensor([2 / 3, 0.0]))
