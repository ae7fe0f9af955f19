"""The split paradigm (one scorer per modality, averaged softmax probabilities), the MMCen
upper bound (pooled view, complete features, no uploads) and FedR (relations aggregated
instead of entities) on the tiny synthetic KG of test_kg_track."""

from __future__ import annotations

import math

import pytest
import torch

from baselines.kg.fedr import FedR, load_relation_rows, relation_rows
from baselines.kg.split import STRUCTURE, SplitKGEClient
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from benchmark.kge import split_kge_loss, views_scorer
from data_prep.build import build_federation
from test_kg_track import kg_cfg, random_mrr

torch.set_num_threads(1)

ROUNDS = 6


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("kg_split_mmcen_fedr")


@pytest.fixture(scope="module")
def fed(tmp):
    return build_federation(kg_cfg(tmp))


@pytest.fixture(scope="module")
def ref(fed) -> float:
    return random_mrr(fed)


@pytest.fixture(scope="module")
def runs(tmp, fed) -> dict[str, tuple[dict, Engine]]:
    """One engine run per (algorithm, fusion) the tests below read."""
    out = {}
    for label, alg, params in (("s_ind", "s_ind", {}), ("mmind_split", "mmind", {"fusion": "split"}),
                               ("mmfede_split", "mmfede", {"fusion": "split"}), ("mmcen", "mmcen", {}),
                               ("fedr", "fedr", {})):
        eng = Engine(kg_cfg(tmp, alg, rounds=ROUNDS, algo_params=params), fed=fed)
        out[label] = (eng.run(), eng)
    return out


def _ok(rec: dict, ref: float, label: str) -> float:
    assert rec["status"] == "ok", (label, rec["error"])
    assert not rec["comm"]["violations"], label
    mrr = rec["metrics"]["test/mrr"]
    assert mrr > 2.0 * ref, f"{label}: test MRR {mrr:.3f} is not clearly above random ({ref:.3f})"
    return mrr


# --------------------------------------------------------------------------- split


def _split_model(fed, tmp) -> tuple[SplitKGEClient, object, object]:
    eng = Engine(kg_cfg(tmp, "mmfede", rounds=1, algo_params={"fusion": "split"}), fed=fed)
    algo = eng.algo_cls(eng.algo_cfg, eng._context())
    client = eng.clients[0]
    model = algo.new_model(client)
    assert isinstance(model, SplitKGEClient) and model.fusion is None
    return model, client, eng.task


def test_split_probability_is_the_mean_of_per_modality_softmaxes(fed, tmp):
    model, client, task = _split_model(fed, tmp)
    views = model.entity_views(client)
    assert list(views) == [STRUCTURE, "text", "image"]
    decoders = [dec for dec, _ in views.values()]
    assert len({id(d) for d in decoders}) == 3  # its own relation table per modality
    assert not torch.equal(decoders[0].relation, decoders[1].relation)
    q = client.test_triples[:7]
    with torch.no_grad():
        # over the whole candidate set (evaluation): log of the averaged probability
        log_p = views_scorer(list(views.values()))(q[:, 0], q[:, 1])
        per = [torch.softmax(dec(ent[q[:, 0]], q[:, 1], ent), dim=1) for dec, ent in views.values()]
        mean = torch.stack(per).mean(0)
        ones = torch.ones(len(q), device=log_p.device)
        assert torch.allclose(log_p.exp().sum(1), ones, atol=1e-5)
        assert torch.allclose(log_p.exp(), mean, atol=1e-6)
        # over {t} + negatives (training): the same average, on the same candidates in every view
        cand = torch.cat([q[:, 2:3], torch.randint(0, client.num_entities, (len(q), 5), device=q.device)], dim=1)
        lp = task.candidate_log_probs(list(views.values()), q, cand)
        sub = [torch.softmax(dec.score_query(dec.query(ent[q[:, 0]], q[:, 1]), ent, cand), dim=1)
               for dec, ent in views.values()]
        assert torch.allclose(lp.exp(), torch.stack(sub).mean(0), atol=1e-6)
        assert torch.allclose(lp.exp().sum(1), ones, atol=1e-5)


def test_split_loss_is_the_nll_of_the_averaged_probability():
    g = torch.Generator().manual_seed(0)
    pos = [torch.randn(4, generator=g) for _ in range(3)]
    neg = [torch.randn(4, 6, generator=g) for _ in range(3)]
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[1, 2] = True  # a sampled negative equal to the positive is dropped
    p = []
    for a, b in zip(pos, neg):
        logits = torch.cat([a[:, None], b.masked_fill(mask, -math.inf)], 1)
        p.append(torch.softmax(logits, 1)[:, 0])
    expect = -torch.log(torch.stack(p).mean(0)).mean()
    got = split_kge_loss("softmax_ce", pos, neg, mask)
    assert got.item() == pytest.approx(expect.item(), rel=1e-6)
    leaves = [t.clone().requires_grad_() for t in pos + neg]
    split_kge_loss("softmax_ce", leaves[:3], leaves[3:], mask).backward()
    assert all(torch.isfinite(t.grad).all() for t in leaves)  # the dropped entry gives no 0/0
    assert leaves[3].grad[1, 2] == 0.0


def test_split_runs_for_federated_and_isolated_methods(runs, ref):
    for label in ("mmfede_split", "mmind_split"):
        _ok(runs[label][0], ref, label)
    names = set(runs["mmfede_split"][0]["comm"]["upload_names"])
    assert {"entity", "proj.text.weight", "proj.image.bias"} <= names
    assert not any(n.startswith("fusion.") or "relation" in n or "decoder" in n for n in names)
    assert runs["mmind_split"][0]["comm"]["bytes_up"] == 0
    algo = runs["mmfede_split"][1].sim.algo
    assert not any(k.startswith("fusion.") for k in algo.shared)


def test_split_needs_features_and_unknown_fusions_still_fail(tmp, fed):
    model, client, task = _split_model(fed, tmp)
    with pytest.raises(ConfigError, match="split"):
        SplitKGEClient(10, 2, task.cfg, 0, None)
    with pytest.raises(ConfigError, match="average.*split"):
        kg_cfg(tmp, "mmfede", algo_params={"fusion": "spilt"})


# --------------------------------------------------------------------------- MMCen


def test_pooled_view_is_the_union_with_complete_features(fed):
    pooled = fed.pooled
    assert pooled is not None and pooled.cid == -1
    def glob(c, t):
        return {tuple(x) for x in torch.stack([c.global_ids[t[:, 0]], c.relations[t[:, 1]], c.global_ids[t[:, 2]]], 1).tolist()}

    for split in ("train", "test"):
        want = set().union(*(glob(c, c.split_triples(split)) for c in fed.clients))
        mine = pooled.split_triples(split)
        assert glob(pooled, mine) == want and len(mine) == sum(len(c.split_triples(split)) for c in fed.clients)
    from data_prep.kg.synthetic import make_synthetic_kg

    ds = make_synthetic_kg(num_entities=200, seed=0)  # the config's dataset (synthetic_kg defaults)
    for j, m in enumerate(fed.modalities):
        full, has = ds.entity_features(m)
        rows = pooled.available[:, j]
        assert torch.equal(rows, has[pooled.global_ids])
        assert torch.allclose(pooled.features[m][rows], full[pooled.global_ids][rows])
    # a client sees at most its dealt, masked share; the pooled view sees every item
    assert float(pooled.available.float().mean()) > max(float(c.available.float().mean()) for c in fed.clients)


def test_mmcen_beats_s_ind_and_uploads_nothing(runs, ref, fed):
    s_ind = _ok(runs["s_ind"][0], ref, "s_ind")
    rec, eng = runs["mmcen"]
    mmcen = _ok(rec, ref, "mmcen")
    assert mmcen > s_ind, f"MMCen {mmcen:.3f} must beat S-Ind {s_ind:.3f}"
    assert rec["comm"]["bytes_up"] == 0 and rec["comm"]["upload_names"] == []
    assert eng.train_clients[0].cid == -1 and list(eng.sim.states) == [-1]
    # scored per client on its own test triples, weighted like every other method
    assert rec["client_sizes"] == [float(c.test_triples.shape[0]) for c in fed.clients]


# --------------------------------------------------------------------------- FedR


def test_fedr_trains_and_shares_only_relations(runs, ref):
    rec, eng = runs["fedr"]
    _ok(rec, ref, "fedr")
    assert set(rec["comm"]["upload_names"]) == {"relation_ids", "relation"}
    for e in eng.sim.ledger.entries:
        if e.direction == "up" and e.name == "relation":
            client = next(c for c in eng.clients if c.cid == e.cid)
            assert e.shape[0] == client.num_relations  # one row per own relation, never entities


def test_fedr_averages_each_relation_over_its_holders(runs):
    eng = runs["fedr"][1]
    algo = FedR(None, eng._context())
    # hand example: clients 0 and 1 share global relation 5; 7 and 3 have one holder; 9 none
    algo.setup_aggregate({0: {"relation_ids": torch.tensor([3, 5])}, 1: {"relation_ids": torch.tensor([5, 7])},
                          2: {"relation_ids": torch.tensor([9])}})
    before = algo.relation_table.clone()
    w = before.shape[1]
    ups = {0: {"relation": torch.stack([torch.full((w,), 1.0), torch.full((w,), 2.0)])},
           1: {"relation": torch.stack([torch.full((w,), 4.0), torch.full((w,), 8.0)])}}
    out = algo.aggregate(ups, 0)
    dev = algo.relation_table.device  # the test device: the uploads above arrive on the CPU
    assert torch.equal(algo.relation_table[5], torch.full((w,), 3.0, device=dev))   # (2 + 4) / 2
    assert torch.equal(algo.relation_table[3], torch.full((w,), 1.0, device=dev))
    assert torch.equal(algo.relation_table[7], torch.full((w,), 8.0, device=dev))
    assert torch.equal(algo.relation_table[9], before[9])               # no holder this round
    assert torch.equal(out[1]["relation"], algo.relation_table[torch.tensor([5, 7])])


def test_relation_rows_round_trip(runs):
    eng = runs["fedr"][1]
    client = eng.clients[1]
    model = eng.sim.states[client.cid]["model"]
    rows = relation_rows(model.decoder.relation, client.num_relations)
    R = client.num_relations
    assert rows.shape == (R, 2 * model.decoder.relation.shape[1])       # base and inverse side by side
    assert torch.equal(rows[0, :model.decoder.relation.shape[1]], model.decoder.relation[0])
    assert torch.equal(rows[0, model.decoder.relation.shape[1]:], model.decoder.relation[R])
    saved = model.decoder.relation.detach().clone()
    load_relation_rows(model, torch.zeros_like(rows))
    assert float(model.decoder.relation.detach().abs().sum()) == 0.0
    load_relation_rows(model, rows)
    assert torch.equal(model.decoder.relation, saved)
