"""FedMGS: learns the paper's four tasks under missing modalities, uploads only declared
statistics, each Table 4 switch changes the computation, the server bank follows Eqs. 3 and 6
on hand-made numbers, no held-out label reaches an upload, and runs are deterministic.
"""

from __future__ import annotations

import pytest
import torch

from benchmark.algorithm import model_payload
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from data_prep.build import build_federation
from methods.fedmgs.prototypes import Bank, client_estimates, init_bank_from_local_clusters, refresh_bank, spread
from test_baselines import majority_reference
from test_tasks_lp_retrieval_matching import _random_mrr

PAIR_SYNTH = {"name": "synthetic", "num_nodes": 600, "text_dim": 32, "image_dim": 32, "avg_degree": 8}


def _nc_cfg(cache, **algo):  # noqa: ANN202 - the small federation of test_baselines, client-level missing
    return build_run_config({
        "dataset": {"name": "synthetic", "num_nodes": 800},
        "partition": {"name": "dirichlet_label", "num_clients": 4, "alpha": 1.0},
        "missing": {"name": "client_level", "rate": 0.5},
        "algorithm": {"name": "fedmgs", **algo},
        "model": {"hidden": 32},
        "train": {"rounds": 12, "lr": 0.01},
        "output": {"cache_dir": str(cache), "checkpoint_dir": str(cache) + "/ckpt"},
    })


def _task_cfg(cache, task: str, rounds: int, **algo):  # noqa: ANN202 - the tiny cell of the LP/retrieval/matching tests
    return build_run_config({
        "dataset": PAIR_SYNTH, "partition": {"name": "louvain", "num_clients": 3}, "task": {"name": task},
        "missing": {"name": "node_level", "rate": 0.3}, "algorithm": {"name": "fedmgs", **algo},
        "model": {"hidden": 32}, "train": {"rounds": rounds, "lr": 0.01, "local_epochs": 2},
        "output": {"cache_dir": str(cache), "checkpoint_dir": str(cache) + "/ckpt"}})


@pytest.fixture(scope="module")
def nc_fed(tmp_path_factory):
    cache = tmp_path_factory.mktemp("fedmgs_nc")
    return cache, build_federation(_nc_cfg(cache))


@pytest.fixture(scope="module")
def pair_fed(tmp_path_factory):
    cache = tmp_path_factory.mktemp("fedmgs_pair")
    return cache, build_federation(_task_cfg(cache, "link_pred", 1))


def _algo(cfg, fed):  # noqa: ANN202
    engine = Engine(cfg, fed=fed)
    return engine, engine.algo_cls(engine.algo_cfg, engine._context())


# --------------------------------------------------------------------------- learning through the engine


def test_node_cls_client_level_beats_majority_and_passes_audit(nc_fed):
    cache, fed = nc_fed
    assert any(not bool(c.available[:, j].any()) for c in fed.clients for j in range(2))  # a client lacks a modality
    rec = Engine(_nc_cfg(cache), fed=fed).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["comm"]["violations"] == []
    assert {"proto.text", "proto.image", "proto_count.text", "proto_count.image", "num_examples"} \
        <= set(rec["comm"]["upload_names"])
    reference = majority_reference(fed)
    assert rec["metrics"]["test/accuracy"] > reference + 0.15, (rec["metrics"], reference)


@pytest.mark.parametrize("task, rounds", [("link_pred", 10), ("retrieval", 10), ("matching", 10)])
def test_learns_link_and_paired_tasks(pair_fed, task, rounds):
    cache, fed = pair_fed
    engine = Engine(_task_cfg(cache, task, rounds), fed=fed)
    rec = engine.run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["comm"]["violations"] == []
    m = rec["metrics"]
    if task == "retrieval":
        ref = _random_mrr(engine)
        assert m["test/mrr"] > 1.3 * ref, (m, ref)
    else:
        assert m["test/auc"] > 0.6, m


def test_same_seed_same_numbers(pair_fed):
    """The unlabeled path (local k-means, server alignment, Lloyd steps) is seeded too."""
    cache, fed = pair_fed
    a = Engine(_task_cfg(cache, "link_pred", 2), fed=fed).run()
    b = Engine(_task_cfg(cache, "link_pred", 2), fed=fed).run()
    assert a["status"] == "ok" and a["metrics"] == b["metrics"]
    assert a["curves"] == {**b["curves"], "seconds": a["curves"]["seconds"]}


# --------------------------------------------------------------------------- ablation switches


def _bank_for(algo, model, client) -> Bank:  # noqa: ANN001
    """A non-trivial bank built from one client's own estimates (as after a first round)."""
    model.bank = None
    up = algo.client_prototypes(model, client, 0)
    mods = algo.ctx.modalities
    protos = torch.stack([up[f"proto.{m}"] for m in mods])
    counts = torch.stack([up[f"proto_count.{m}"] for m in mods])
    return Bank(protos, counts, spread(protos, counts > 0))


def test_each_ablation_switch_changes_the_computation(tiny_fed, tmp_path):
    cfg = _nc_cfg(tmp_path)
    cfg.model.dropout = 0.0
    engine, algo = _algo(cfg, tiny_fed)
    client = next(c for c in engine.clients if (~c.available).any() and c.available.all(1).any())
    torch.manual_seed(0)
    full = algo.build_model()
    bank = _bank_for(algo, full, client)
    assert bool(bank.spread.gt(0).all())
    full.bank = bank
    ref = full.run(client)
    missing = ~client.available
    observed = client.available
    assert torch.equal(ref.f[observed], ref.z[observed])                 # Eq. 8 keeps observed latents
    assert not torch.allclose(ref.f[missing], ref.z_hat[missing])        # missing ones are calibrated

    def variant(**switch):  # noqa: ANN202
        vcfg = _nc_cfg(tmp_path, **switch)
        vcfg.model.dropout = 0.0
        _, valgo = _algo(vcfg, tiny_fed)
        model = valgo.build_model()
        model.load_state_dict(full.state_dict())
        model.bank = bank
        return model.run(client)

    no_avail = variant(use_avail_enc=False)
    part = missing.any(1)
    assert not torch.allclose(no_avail.s[part], ref.s[part])             # placeholders enter propagation
    assert torch.allclose(no_avail.s[~part], ref.s[~part], atol=1e-6)    # complete nodes are unchanged
    assert not torch.allclose(no_avail.out, ref.out)

    no_proto = variant(use_proto_synth=False)
    assert torch.allclose(no_proto.h, ref.h) and not torch.allclose(no_proto.z_hat, ref.z_hat)
    assert not torch.allclose(no_proto.out, ref.out)

    no_rel = variant(use_rel_fusion=False)
    assert torch.allclose(no_rel.z_hat, ref.z_hat)
    assert torch.equal(no_rel.f[missing], no_rel.z_hat[missing])         # direct replacement, no eta
    assert not torch.allclose(no_rel.out, ref.out)


# --------------------------------------------------------------------------- server and client steps


def test_client_estimates_use_observed_training_entries_only():
    enc = torch.tensor([[[1.0, 0.0], [0.0, 2.0]],
                        [[3.0, 0.0], [9.0, 9.0]],
                        [[7.0, 7.0], [0.0, 4.0]],
                        [[5.0, 5.0], [5.0, 5.0]]])
    available = torch.tensor([[True, True], [True, False], [False, True], [True, True]])
    y = torch.tensor([0, 0, 1, 1])
    train = torch.tensor([True, True, True, False])                    # node 3 is a test node
    protos, counts = client_estimates(enc, available, y, train, 3)
    assert counts.tolist() == [[2.0, 0.0, 0.0], [1.0, 1.0, 0.0]]
    assert protos[0, 0].tolist() == [2.0, 0.0] and protos[0, 1].tolist() == [0.0, 0.0]
    assert protos[1, 0].tolist() == [0.0, 2.0] and protos[1, 1].tolist() == [0.0, 4.0]


def test_bank_refresh_follows_eq3_and_eq6_by_hand():
    # client A, then client B: [M=2, A=3, d=2] estimates and counts
    pa = torch.tensor([[[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]], [[0.0, 2.0], [0.0, 4.0], [0.0, 0.0]]])
    na = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    pb = torch.tensor([[[5.0, 0.0], [1.0, 1.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    nb = torch.tensor([[1.0, 3.0, 0.0], [0.0, 2.0, 0.0]])
    protos, counts = torch.stack([pa, pb]), torch.stack([na, nb])
    bank = refresh_bank(Bank.empty(2, 3, 2), protos, counts, eps=1e-12)
    assert torch.allclose(bank.protos[0, 0], torch.tensor([3.0, 0.0]))   # (2*[2,0] + 1*[5,0]) / 3
    assert torch.allclose(bank.protos[0, 1], torch.tensor([1.0, 1.0]))
    assert torch.allclose(bank.protos[1, 0], torch.tensor([0.0, 2.0]))   # B's empty entry does not attenuate it
    assert torch.allclose(bank.protos[1, 1], torch.tensor([0.0, 2.0]))   # (1*[0,4] + 2*[0,1]) / 3
    assert bank.counts.tolist() == [[3.0, 3.0, 0.0], [1.0, 3.0, 0.0]]
    # Eq. 6 over the valid classes only: coords (3, 1) var 1 and (0, 1) var 0.25 -> 0.625; modality 1 -> 0
    assert torch.allclose(bank.spread, torch.tensor([0.625, 0.0]))
    # an entry nobody observed this round keeps the server's previous value and count
    old = Bank(torch.full((2, 3, 2), 9.0), torch.full((2, 3), 4.0), torch.zeros(2))
    kept = refresh_bank(old, protos, counts, eps=1e-12)
    assert kept.protos[0, 2].tolist() == [9.0, 9.0] and kept.counts[0, 2] == 4.0
    assert torch.allclose(kept.protos[0, 0], torch.tensor([3.0, 0.0]))


def test_server_aligns_local_clusters_into_anchors():
    """First round of an unlabeled task: clusters found in different orders meet in one anchor."""
    pa = torch.tensor([[[1.0, 0.1], [0.1, 1.0]], [[1.0, -0.1], [-0.1, 1.0]]])   # A: cluster 0 ~ e1, 1 ~ e2
    na = torch.full((2, 2), 2.0)
    pb = torch.tensor([[[0.0, 2.0], [2.0, 0.0]], [[0.0, 2.0], [0.0, 0.0]]])     # B: swapped; no modality-1 obs of ~e1
    nb = torch.tensor([[1.0, 3.0], [1.0, 0.0]])
    bank = init_bank_from_local_clusters(torch.stack([pa, pb]), torch.stack([na, nb]), 2, 1e-12,
                                         torch.Generator().manual_seed(0))
    fused, ok = bank.fused()
    assert bool(ok.all())
    e1 = int(fused[:, 0].argmax())
    assert torch.allclose(bank.protos[0, e1], torch.tensor([1.6, 0.04]))      # (2*[1,.1] + 3*[2,0]) / 5
    assert torch.allclose(bank.protos[1, e1], torch.tensor([1.0, -0.1]))     # only A observed it
    assert bank.counts[:, e1].tolist() == [5.0, 2.0] and bank.counts[:, 1 - e1].tolist() == [3.0, 3.0]


def test_aggregation_weights_by_task_size(tiny_fed, tmp_path):
    engine, algo = _algo(_nc_cfg(tmp_path), tiny_fed)
    first = algo.init_server()
    states = {c.cid: {} for c in engine.clients}
    ups = {c.cid: algo.client_update(c, states[c.cid], first, 0) for c in engine.clients[:2]}
    assert [float(ups[c]["num_examples"]) for c in ups] == [float(c.num_train) for c in engine.clients[:2]]
    base = model_payload(algo.global_model)
    for k, (cid, shift) in enumerate(zip(ups, (1.0, 3.0))):
        ups[cid].update({n: t + shift for n, t in base.items() if t.dtype.is_floating_point})
        ups[cid]["num_examples"] = torch.tensor([1.0 + 2.0 * k])          # weights 1 and 3
    out = algo.aggregate(ups, 0)
    key = "model.head.weight"
    assert torch.allclose(out[key], base[key] + 2.5)
    assert {"bank.proto.text", "bank.count.image", "bank.spread.text"} <= set(out)


def test_held_out_labels_never_reach_an_upload(tiny_fed, tmp_path):
    engine, algo = _algo(_nc_cfg(tmp_path), tiny_fed)
    client = engine.clients[0]
    torch.manual_seed(0)
    model = algo.build_model()
    model.bank = None
    up = algo.client_prototypes(model, client, 0)
    flipped = client.to(client.device)
    held_out = ~client.train_mask
    flipped.y = client.y.clone()
    flipped.y[held_out] = (client.y[held_out] + 1) % client.num_classes
    up2 = algo.client_prototypes(model, flipped, 0)
    assert all(torch.equal(up[k], up2[k]) for k in up)
    model.bank = _bank_for(algo, model, client)
    model.eval()
    fw, fw2 = model.run(client), model.run(flipped)                    # q_i reads training labels only
    assert torch.equal(fw.out, fw2.out)
    assert torch.equal(algo.objective(model, client), algo.objective(model, flipped))


def test_config_validation():
    with pytest.raises(ConfigError):
        _nc_cfg("/tmp", lambda_rec=-1.0)
    with pytest.raises(ConfigError):
        _nc_cfg("/tmp", weighting="median")
    with pytest.raises(ConfigError):
        _nc_cfg("/tmp", num_anchors=1)
    with pytest.raises(ConfigError):
        _nc_cfg("/tmp", use_rel_fusion="no")
