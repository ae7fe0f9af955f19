"""FedMPO: learns each of its three tasks, passes the ledger audit, each ablation switch changes
the computation, the reliability weights are a distribution of the uploaded statistics only,
hidden modalities are never read, and runs are deterministic.

Node classification uses the small synthetic federation of ``test_baselines.py`` (30%
node-level missingness); link prediction a smaller 32-d synthetic graph; retrieval the paired federation of
``test_multimodal_fl.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from benchmark.algorithm import model_payload
from benchmark.config import build_run_config, load_config
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from data_prep.build import build_federation
from methods.fedmpo.aggregation import reliability_weights
from methods.fedmpo.config import FedMPOConfig
from methods.fedmpo.generation import TopologyAwareGenerator
from test_baselines import _cfg, majority_reference
from test_multimodal_fl import assert_beats_trivial_reference, pair_fed  # noqa: F401 - pair_fed is a fixture

MODEL: dict = {}
SYNTH = {"name": "synthetic", "num_nodes": 600, "text_dim": 32, "image_dim": 32, "avg_degree": 8}


@pytest.fixture(scope="module")
def small_fed(tmp_path_factory):
    cfg = _cfg("fedmpo", tmp_path_factory.mktemp("cache"))
    return cfg.output.cache_dir, build_federation(cfg)


def _with(cfg, algorithm: dict | None = None, **sections):  # noqa: ANN001, ANN202
    """A copy of a RunConfig with algorithm options and section fields replaced."""
    d = cfg.to_dict()
    if algorithm is not None:
        d["algorithm"] = {"name": "fedmpo", **algorithm}
    for sec, values in sections.items():
        d[sec] = {**d[sec], **values}
    return build_run_config(d)


def _algo(cache, fed, **options):  # noqa: ANN001, ANN202
    engine = Engine(_with(_cfg("fedmpo", cache), options), fed=fed)
    return engine, engine.algo_cls(engine.algo_cfg, engine._context())


def _task_cfg(tmp_path, task: dict, rounds: int):  # noqa: ANN001, ANN202
    return build_run_config({
        "dataset": SYNTH, "partition": {"name": "louvain", "num_clients": 3},
        "missing": {"name": "node_level", "rate": 0.3}, "task": task, "algorithm": {"name": "fedmpo"},
        "model": {"hidden": 32, **MODEL}, "train": {"rounds": rounds, "lr": 0.01, "local_epochs": 2},
        "output": {"cache_dir": str(tmp_path / "cache"), "checkpoint_dir": str(tmp_path / "ckpt")}})


# --------------------------------------------------------------------------- learning


def test_node_cls_beats_majority_and_is_near_fedavg(small_fed):
    cache, fed = small_fed
    rec = Engine(_cfg("fedmpo", cache), fed=fed).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["comm"]["violations"] == []
    names = set(rec["comm"]["upload_names"])
    assert {"rel.uncertainty", "rel.rec_error", "rel.missing_ratio", "num_examples"} <= names
    assert any(n.startswith("model.generator.") for n in names)
    reference = majority_reference(fed)
    acc = rec["metrics"]["test/accuracy"]
    assert acc > reference + 0.15, (acc, reference)
    fedavg = Engine(_cfg("fedavg", cache), fed=fed).run()["metrics"]["test/accuracy"]
    print(f"\nnode_cls test accuracy: FedMPO {acc:.4f}, FedAvg {fedavg:.4f}, majority {reference:.4f}")
    # measured at seed 0: FedMPO 0.80 vs FedAvg 0.82 (seeds 0-2: 0.824 vs 0.839); no win is claimed,
    # the bound only catches a FedMPO that has stopped learning what FedAvg learns
    assert acc > fedavg - 0.08, (acc, fedavg)


def test_link_prediction_auc(tmp_path):
    task = {"name": "link_pred", "loss": "bce_bpr_margin", "hard_negatives": True}
    rec = Engine(_task_cfg(tmp_path, task, 8)).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["comm"]["violations"] == []
    print(f"\nlink_pred test AUC: FedMPO {rec['metrics']['test/auc']:.4f}")
    assert rec["metrics"]["test/auc"] > 0.6, rec["metrics"]


def test_retrieval_mrr_beats_random(pair_fed):  # noqa: F811 - pair_fed is a fixture
    """On the content protocol (gallery from each node's own row), FedMPO's test MRR is above
    1.5 x a random ranking's (measured at seed 0: 0.37 against 0.19)."""
    assert_beats_trivial_reference("fedmpo", "retrieval", pair_fed)


def test_same_seed_same_numbers(small_fed):
    cache, fed = small_fed
    cfg = _with(_cfg("fedmpo", cache), train={"rounds": 2})
    a, b = Engine(cfg, fed=fed), Engine(cfg, fed=fed)
    ra, rb = a.run(), b.run()
    assert ra["status"] == "ok" and ra["metrics"] == rb["metrics"]
    assert all(torch.equal(a.sim.broadcast[k], b.sim.broadcast[k]) for k in a.sim.broadcast)


# --------------------------------------------------------------------------- ablation switches


def _one_update(cache, fed, **options):  # noqa: ANN001, ANN202
    """The algorithm, its first broadcast, client 0's first upload, and the aux terms of a forward pass."""
    torch.manual_seed(0)
    engine, algo = _algo(cache, fed, **options)
    first = algo.init_server()
    client = engine.clients[0]
    up = algo.client_update(client, {}, first, 0)
    model = algo.build_model()
    model.train()
    torch.manual_seed(1)
    _, aux = model.forward_full(client)
    return algo, first, up, aux


def test_ablation_switches_change_the_computation(small_fed):
    cache, fed = small_fed
    _, full_first, full_up, full_aux = _one_update(cache, fed)
    assert full_aux.rec > 0 and full_aux.align > 0 and full_aux.route > 0
    assert any(k.startswith("model.generator.") for k in full_up)
    assert any(k.startswith("model.moe.") for k in full_up) and "model.align.weight" in full_up

    algo, first, up, aux = _one_update(cache, fed, use_agmg=False)
    assert algo.global_model.generator is None
    assert not any(k.startswith("model.generator.") for k in {**first, **up})
    assert float(aux.rec.detach()) == 0.0 and aux.err_count > 0    # masked slots exist, nothing rebuilds them
    assert aux.err_sum / aux.err_count == pytest.approx(0.5)       # a zero vector's normalized error

    algo, first, up, aux = _one_update(cache, fed, use_moe=False)
    assert not any(k.startswith("model.moe.") for k in up) and "model.fusion.proj.weight" in up
    assert float(aux.route.detach()) == 0.0 and aux.unc_sum == 0.0

    algo, first, up, aux = _one_update(cache, fed, use_align=False)
    assert "model.align.weight" not in up and float(aux.align.detach()) == 0.0

    algo, first, up, aux = _one_update(cache, fed, use_relagg=False)
    assert not any(k.startswith("rel.") for k in up)
    sizes = [3.0, 1.0]
    w = algo.weights({0: {**up, "num_examples": torch.tensor([sizes[0]])},
                      1: {**up, "num_examples": torch.tensor([sizes[1]])}})
    assert torch.allclose(w, torch.tensor([0.75, 0.25], dtype=torch.float64))


def test_ablation_switches_from_the_command_line():
    cfg = load_config(None, ["algorithm.name=fedmpo", "algorithm.use_moe=false", "algorithm.use_relagg=false"])
    assert cfg.algorithm.params == {"use_moe": False, "use_relagg": False}
    with pytest.raises(ConfigError):
        load_config(None, ["algorithm.name=fedmpo", "algorithm.use_moe=maybe"])
    with pytest.raises(ConfigError):
        FedMPOConfig(interp_min=0.9, interp_max=0.5)
    assert FedMPOConfig().lambdas("retrieval") == (0.5, 0.01, 0.01)
    assert FedMPOConfig(lambda_rec=0.2).lambdas("node_cls") == (0.2, 0.01, 0.01)
    c = FedMPOConfig()
    assert c.gamma(0) == pytest.approx(0.55) and c.gamma(15) == pytest.approx(0.665)
    assert c.gamma(99) == pytest.approx(0.78)


# --------------------------------------------------------------------------- server step


def test_reliability_weights_are_a_distribution_of_the_stats_only(small_fed):
    cache, fed = small_fed
    _, algo = _algo(cache, fed)
    base = algo.init_server()
    stats = [(0.1, 0.2, 0.3), (0.5, 0.4, 0.3), (0.0, 0.0, 0.0)]
    sizes = [100.0, 300.0, 50.0]

    def uploads(param_of: list[float], stat_rows=stats) -> dict:  # noqa: ANN001
        return {cid: {**{k: torch.full_like(v, param_of[cid]) for k, v in base.items()},
                      "num_examples": torch.tensor([sizes[cid]]),
                      "rel.uncertainty": torch.tensor([stat_rows[cid][0]]),
                      "rel.rec_error": torch.tensor([stat_rows[cid][1]]),
                      "rel.missing_ratio": torch.tensor([stat_rows[cid][2]])} for cid in range(3)}

    w = algo.weights(uploads([0.0, 1.0, 2.0]))
    assert (w > 0).all() and float(w.sum()) == pytest.approx(1.0, abs=1e-9)
    mass = [sizes[k] * math.exp(-sum(stats[k])) for k in range(3)]
    assert torch.allclose(w, torch.tensor(mass, dtype=torch.float64) / sum(mass))
    # model parameters do not move the weights; the statistics do
    assert torch.equal(w, algo.weights(uploads([5.0, -3.0, 0.5])))
    worse = [stats[0], (0.9, 0.9, 0.3), stats[2]]
    w2 = algo.weights(uploads([0.0, 1.0, 2.0], worse))
    assert w2[1] < w[1] and w2[0] > w[0] and w2[2] > w[2]
    # equal statistics give the size-weighted FedAvg weights back
    same = reliability_weights(torch.tensor(sizes), *(torch.full((3,), 0.4) for _ in range(3)))
    assert torch.allclose(same, torch.tensor(sizes, dtype=torch.float64) / sum(sizes))
    # the global model is the omega-weighted average of the uploads
    out = algo.aggregate(uploads([0.0, 1.0, 2.0]), 0)
    key = "model.head.weight"
    assert torch.allclose(out[key], torch.full_like(base[key], float(w[1] + 2 * w[2])), atol=1e-6)
    assert algo.last_weights == pytest.approx({0: float(w[0]), 1: float(w[1]), 2: float(w[2])})
    assert model_payload(algo.global_model).keys() == base.keys()


# --------------------------------------------------------------------------- no leakage


def test_hidden_modalities_are_never_read(small_fed):
    """What a node does not show (naturally missing) cannot change any node's output."""
    cache, fed = small_fed
    engine, algo = _algo(cache, fed)
    client = engine.clients[0]
    model = algo.build_model().eval()
    with torch.no_grad():
        before = model(client)
        noisy = {m: torch.where(client.available[:, j:j + 1], x, torch.randn_like(x) * 10)
                 for j, (m, x) in enumerate(client.features.items())}
        after = model(client, noisy)
    assert (~client.available).any()
    assert torch.allclose(before, after, atol=1e-5)


def test_generator_cannot_copy_its_target():
    """z_hat[i, m] does not depend on node i's own modality-m token (the diagonal mask D)."""
    torch.manual_seed(0)
    n, m_count, hidden = 6, 2, 8
    gen = TopologyAwareGenerator(hidden, m_count, heads=2)
    h, h_excl, anchor = (torch.randn(n, m_count, hidden) for _ in range(3))
    vis = torch.ones(n, m_count, dtype=torch.bool)
    neighbors = torch.tensor([[1, 2], [0, 2], [0, 1], [4, -1], [3, 5], [4, -1]])
    z = gen(h, h_excl, anchor, vis, neighbors, 0.7)
    h2 = h.clone()
    h2[0, 1] += 5.0
    z2 = gen(h2, h_excl, anchor, vis, neighbors, 0.7)
    assert torch.allclose(z[0, 1], z2[0, 1], atol=1e-6)     # own target token: invisible
    assert not torch.allclose(z[0, 0], z2[0, 0])             # the other modality's evidence: used
    assert not torch.allclose(z[1, 1], z2[1, 1])             # a neighbour's modality-1 token: used
    # a node with no visible evidence at all gets no attention output (no NaN)
    vis_none = vis.clone()
    vis_none[[3, 4, 5]] = False
    assert torch.isfinite(gen(h, h_excl, anchor, vis_none, neighbors, 0.7)).all()


def test_optimizer_warmup_scales_the_learning_rate_linearly(small_fed):
    """Table 6's 10 warmup rounds: round t trains at lr x min(1, (t + 1) / 10); 0 turns it off."""
    cfg = FedMPOConfig()
    assert cfg.warmup_rounds == 10
    assert [cfg.lr_scale(t) for t in (0, 4, 9, 10, 50)] == [0.1, 0.5, 1.0, 1.0, 1.0]
    assert FedMPOConfig(warmup_rounds=0).lr_scale(0) == 1.0
    cache, fed = small_fed
    engine, algo = _algo(cache, fed)
    state: dict = {}
    received = algo.init_server()
    c = engine.clients[0]
    algo.client_update(c, state, received, 2)
    assert all(g["lr"] == pytest.approx(engine.cfg.train.lr * 0.3) for g in state["opt"].param_groups)
    algo.client_update(c, state, received, 12)
    assert all(g["lr"] == engine.cfg.train.lr for g in state["opt"].param_groups)
