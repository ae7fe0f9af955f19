"""Link prediction, retrieval and matching: learnable through FedAvg, audited, deterministic, leak-free."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from benchmark import registry as R
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.errors import BenchmarkError, ConfigError
from benchmark.federation import ClientData
from benchmark.metrics import average_precision, mean_reciprocal_rank, ranks_of_diagonal, recall_at_k, roc_auc
from benchmark.tasks.link_pred import LinkPrediction, undirected_edges
from benchmark.tasks.retrieval import Retrieval
from data_prep.build import build_federation
from data_prep.datasets.sources import MIRROR
from test_multimodal_fl import PAIRED_ROUNDS, _pair_cfg, pair_fed  # noqa: F401 - pair_fed is a fixture

SYNTH = {"name": "synthetic", "num_nodes": 600, "text_dim": 32, "image_dim": 32, "avg_degree": 8}


def _cfg(tmp_path, task: dict, rounds: int, dataset: dict | None = None, algorithm: str = "fedavg"):
    return build_run_config({
        "dataset": dataset or SYNTH, "partition": {"name": "louvain", "num_clients": 3}, "task": task,
        "algorithm": {"name": algorithm}, "model": {"hidden": 32},
        "train": {"rounds": rounds, "lr": 0.01, "local_epochs": 2, "eval_every": 1},
        "output": {"cache_dir": str(tmp_path / "cache"), "checkpoint_dir": str(tmp_path / "ckpt")}})


@pytest.fixture(scope="module")
def synth_fed(tmp_path_factory):
    return build_federation(_cfg(tmp_path_factory.mktemp("fed"), {"name": "link_pred"}, 1))


def _keys(edges: torch.Tensor, n: int) -> set[int]:
    und = undirected_edges(edges, n)
    return set((und[0] * n + und[1]).tolist())


# --------------------------------------------------------------------------- metrics


def test_metric_values_and_validation():
    assert roc_auc(torch.tensor([0.1, 0.9, 0.5]), torch.tensor([0, 1, 1])) == 1.0
    assert roc_auc(torch.tensor([0.5, 0.5]), torch.tensor([0, 1])) == 0.5
    assert math.isnan(roc_auc(torch.tensor([0.5, 0.7]), torch.tensor([1, 1])))
    assert average_precision(torch.tensor([0.9, 0.1]), torch.tensor([1, 0])) == 1.0
    ranks = ranks_of_diagonal(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    assert ranks.tolist() == [1, 2]  # a tie counts against the true item
    assert mean_reciprocal_rank(ranks) == 0.75 and recall_at_k(ranks, 1) == 0.5
    with pytest.raises(ValueError):
        roc_auc(torch.tensor([0.1, 0.2]), torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError):
        roc_auc(torch.tensor([[0.1, 0.2]]), torch.tensor([[0, 1]]))
    with pytest.raises(ValueError):
        roc_auc(torch.tensor([0.1, 0.2]), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError):
        average_precision(torch.tensor([1, 2]), torch.tensor([0, 1]))
    with pytest.raises(ValueError):
        mean_reciprocal_rank(torch.tensor([0, 1]))
    with pytest.raises(ValueError):
        recall_at_k(torch.tensor([1.0, 2.0]), 5)
    with pytest.raises(ValueError):
        ranks_of_diagonal(torch.zeros(2, 3))


# --------------------------------------------------------------------------- link prediction split


def test_edge_split_is_a_deterministic_partition(synth_fed):
    task = LinkPrediction()
    for c in synth_fed.clients:
        n = c.num_nodes
        a, b = task.split(c), task.split(c)
        parts = {s: _keys(torch.cat([p, p.flip(0)], 1), n) for s, p in a.positives.items()}
        assert all(torch.equal(a.positives[s], b.positives[s]) for s in parts)
        assert all(torch.equal(a.negatives[s], b.negatives[s]) for s in parts)
        assert parts["val"] and parts["test"]
        assert not (parts["train"] & parts["val"]) and not (parts["train"] & parts["test"]) \
            and not (parts["val"] & parts["test"])
        assert parts["train"] | parts["val"] | parts["test"] == _keys(c.edge_index, n)
        for s, neg in a.negatives.items():  # evaluation negatives are never real edges
            assert neg.shape == a.positives[s].shape and not (_keys(torch.cat([neg, neg.flip(0)], 1), n)
                                                             & _keys(c.edge_index, n))
    other = LinkPrediction(LinkPrediction.Config(seed=1)).split(synth_fed.clients[0])
    assert not torch.equal(other.positives["test"], task.split(synth_fed.clients[0]).positives["test"])


class _Spy(nn.Module):
    """Wraps a model and records every graph it is run on."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.graphs: list[torch.Tensor] = []

    def forward(self, client: ClientData) -> torch.Tensor:
        self.graphs.append(client.edge_index)
        return self.model(client)


@pytest.mark.parametrize("supervision_frac", [0.0, 0.3])
def test_no_val_or_test_edge_is_used_for_message_passing(synth_fed, tmp_path, supervision_frac):
    task = LinkPrediction(LinkPrediction.Config(supervision_frac=supervision_frac))
    engine = Engine(_cfg(tmp_path, {"name": "link_pred"}, 1), fed=synth_fed)
    model = engine.algo_cls(engine.algo_cfg, engine._context()).build_model()
    for c in synth_fed.clients:
        c = c.to(engine.device)
        sp, spy = task.split(c), _Spy(model)
        held_out = _keys(torch.cat([sp.positives["val"], sp.positives["test"]], 1), c.num_nodes)
        task.loss(spy, c).backward()
        task.evaluate(spy, c)
        assert len(spy.graphs) == 2
        for g in spy.graphs:
            assert g.shape[1] > 0 and not (_keys(g, c.num_nodes) & held_out)
        if supervision_frac > 0:  # training targets are not in the training message graph
            assert not (_keys(spy.graphs[0], c.num_nodes) & _keys(sp.positives["train"], c.num_nodes))


# --------------------------------------------------------------------------- learning through the engine


def _random_mrr(engine: Engine, split: str = "test") -> float:
    """Size-weighted expectation of MRR for a random ranking of each client's gallery."""
    total = weight = 0.0
    for c in engine.clients:
        both = c.available.all(1) & getattr(c, f"{split}_mask")
        g = int(both.sum())
        if g >= 2:
            total += g * sum(1.0 / k for k in range(1, g + 1)) / g
            weight += g
    return total / weight


def test_fedavg_learns_link_prediction(synth_fed, tmp_path):
    engine = Engine(_cfg(tmp_path, {"name": "link_pred"}, 25), fed=synth_fed)
    rec = engine.run()
    assert rec["status"] == "ok", rec["error"]  # includes the ledger audit
    assert not engine.sim.ledger.violations
    assert rec["metrics"]["test/auc"] > 0.65, rec["metrics"]
    assert len(rec["per_client"]["test/auc"]) == 3


@pytest.mark.parametrize("task", ["retrieval", "matching"])
def test_fedavg_learns_each_paired_task_from_content(pair_fed, task):
    """On the paired federation of ``test_multimodal_fl`` (content protocol, the default):
    retrieval MRR above 2 x a random ranking's, matching AUC above 0.7 (measured at seed 0:
    0.25 against 0.125, and 0.74)."""
    cache, fed = pair_fed
    engine = Engine(_pair_cfg("fedavg", task, cache, rounds=PAIRED_ROUNDS), fed=fed)
    rec = engine.run()
    assert rec["status"] == "ok", rec["error"]
    assert not engine.sim.ledger.violations
    m = rec["metrics"]
    if task == "retrieval":
        assert m["test/mrr"] > 2 * _random_mrr(engine), (m, _random_mrr(engine))
        assert m["test/recall@5"] <= m["test/recall@10"]
    else:
        assert m["test/auc"] > 0.7, m
    assert len(rec["per_client"][f"test/{engine.task.primary_metric}"]) == 3


@pytest.mark.parametrize("task", ["link_pred", "retrieval", "matching"])
def test_same_seed_same_numbers(synth_fed, tmp_path, task):
    a = Engine(_cfg(tmp_path, {"name": task, "hard_negatives": True} if task == "link_pred" else {"name": task}, 3),
               fed=synth_fed).run()
    b = Engine(_cfg(tmp_path, {"name": task, "hard_negatives": True} if task == "link_pred" else {"name": task}, 3),
               fed=synth_fed).run()
    assert a["status"] == "ok" and a["metrics"] == b["metrics"] and a["curves"]["round"] == b["curves"]["round"]


def test_fedmpo_loss_and_options(synth_fed, tmp_path):
    rec = Engine(_cfg(tmp_path, {"name": "link_pred", "loss": "bce_bpr_margin", "num_negatives": 2}, 2),
                 fed=synth_fed).run()
    assert rec["status"] == "ok" and 0.0 <= rec["metrics"]["test/auc"] <= 1.0
    with pytest.raises(ConfigError):
        _cfg(tmp_path, {"name": "link_pred", "loss": "hinge"}, 1)
    with pytest.raises(ConfigError):
        Retrieval(Retrieval.Config(query="audio")).modalities(synth_fed.clients[0])
    assert Retrieval().modalities(synth_fed.clients[0]) == (synth_fed.modalities.index("image"),
                                                            synth_fed.modalities.index("text"))


def test_task_support_declarations(synth_fed, tmp_path):
    R.load_plugins()
    for name in ("local", "fedavg", "fedprox", "fedgraphsage"):
        assert set(R.ALGORITHMS.get(name).tasks) == {"node_cls", "link_pred", "retrieval", "matching"}
    assert R.ALGORITHMS.get("fedproto").tasks == ("node_cls",)
    assert "link_pred" in R.ALGORITHMS.get("fedgcn").tasks  # its setup reads training edges only
    # FedLAP's per-node structure vector would enter both views of a pair: a node-identity shortcut
    assert not {"retrieval", "matching"} & set(R.ALGORITHMS.get("fedlap").tasks)
    with pytest.raises(BenchmarkError, match="not defined for task"):
        Engine(_cfg(tmp_path, {"name": "retrieval"}, 1, algorithm="fedproto"), fed=synth_fed)


@pytest.mark.skipif(not (MIRROR / "tiktok").is_dir(), reason="shared/data/tiktok is not available")
def test_tiktok_link_prediction(tmp_path):
    cfg = _cfg(tmp_path, {"name": "link_pred"}, 6, dataset={"name": "tiktok", "root": str(MIRROR)})
    rec = Engine(cfg).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["metrics"]["test/auc"] > 0.55, rec["metrics"]
    assert sum(rec["client_sizes"]) > 1000  # held-out positive edges over the three clients


@pytest.mark.parametrize("task", ["retrieval", "matching"])
def test_fedgcn_scores_the_same_pairs_as_fedavg(tmp_path, task):
    """FedGCN fills missing modalities from neighbours; on paired tasks it must still be scored on
    the nodes' own observed pairs, or its gallery differs from every other method's."""
    def run(algorithm: str) -> dict:
        cfg = _cfg(tmp_path, {"name": task}, 1, algorithm=algorithm)
        cfg = build_run_config({**cfg.to_dict(), "missing": {"name": "node_level", "rate": 0.5}})
        return Engine(cfg).run()

    gcn, avg = run("fedgcn"), run("fedavg")
    assert gcn["status"] == "ok" and avg["status"] == "ok", (gcn["error"], avg["error"])
    assert gcn["client_sizes"] == avg["client_sizes"]


@pytest.mark.parametrize("task_name", ["retrieval", "matching"])
def test_content_gallery_view_encodes_each_node_from_its_own_row_only(synth_fed, tmp_path, task_name):
    """gallery_view: content: a node's gallery embedding ignores every other node (no message
    passing), so graph position cannot match a pair; ``graph`` does not."""
    from benchmark.tasks.paired import PairedModalityTask

    for view, independent in (("content", True), ("graph", False)):
        engine = Engine(_cfg(tmp_path, {"name": task_name, "gallery_view": view}, 1), fed=synth_fed)
        task = engine.task
        assert isinstance(task, PairedModalityTask) and task.content_gallery is independent
        model = engine.algo_cls(engine.algo_cfg, engine._context()).build_model().eval()
        c = engine.clients[0]
        gi = task.modalities(c)[1]
        g = c.modalities[gi]
        other = c.features[g].clone()
        other[1:] = torch.randn_like(other[1:])          # every node's gallery row but node 0's
        changed = dataclasses.replace(c, features={**c.features, g: other})
        with torch.no_grad():
            a, b = model(task.gallery_client(c, gi))[0], model(task.gallery_client(changed, gi))[0]
        assert torch.equal(a, b) is independent, view
        assert (task.gallery_client(c, gi).edge_index.shape[1] == 0) is independent


def test_fedgcn_content_gallery_is_the_nodes_own_row_not_its_neighbourhood_mean(synth_fed, tmp_path):
    engine = Engine(_cfg(tmp_path, {"name": "retrieval", "gallery_view": "content"}, 1, algorithm="fedgcn"),
                    fed=synth_fed)
    assert engine.run()["status"] == "ok"
    for c in engine.clients:
        gi = engine.task.modalities(c)[1]
        g = c.modalities[gi]
        state = engine.sim.states[c.cid]
        own = c.features[g] * c.available[:, gi:gi + 1]
        assert torch.allclose(state["eval_view"].features[g][:c.num_nodes], own)
        train = engine.task.training_view(c)
        assert torch.allclose(state["view"].features[g][:c.num_nodes], train.features[g] * train.available[:, gi:gi + 1])
        qi = engine.task.modalities(c)[0]
        q = c.modalities[qi]  # the query modality keeps FedGCN's neighbourhood mean
        assert not torch.allclose(state["eval_view"].features[q][:c.num_nodes], c.features[q])


def test_shared_hard_negative_pool_keeps_the_top_scorers_of_one_pool():
    """hard_pool_min > 0 (FedMPO's pool: scale 4, at least 256): per positive, the num_negatives
    highest scores among one pool of max(hard_pool_min, hard_pool x num_negatives) nodes, the
    head itself left out."""
    task = LinkPrediction(LinkPrediction.Config(hard_negatives=True, hard_pool=4, hard_pool_min=256, num_negatives=2))
    z = torch.randn(500, 8)
    pos = torch.randint(0, 500, (2, 30))
    torch.manual_seed(3)
    got = task._negatives(z, pos, 500)
    torch.manual_seed(3)
    pool = torch.randint(0, 500, (256,))
    scores = (z[pos[0]] @ z[pool].T).masked_fill(pool.unsqueeze(0) == pos[0].unsqueeze(1), float("-inf"))
    want = scores.topk(2, dim=1).values
    assert got.shape == (30, 2) and torch.allclose(got, want)
    task.cfg.hard_pool_min = 0            # per-positive candidates: 8 each
    torch.manual_seed(3)
    assert task._negatives(z, pos, 500).shape == (30, 2)


@pytest.mark.parametrize("pool_min", [0, 64])
def test_a_hard_negative_is_never_a_known_training_edge_of_its_head(pool_min):
    """The highest-scoring candidates of a trained model are its true neighbours; picking them
    as negatives taught every model to rank edges below non-edges (issue 26). Here each head's
    neighbours score far above every other node: with the training edges known, no chosen
    negative is one of them; without, they are what gets chosen."""
    n, heads = 64, torch.arange(0, 32, 2)
    neighbour = heads + 1
    z = torch.zeros(n, n)
    z[heads, heads] = 1.0
    z[neighbour, heads] = 5.0          # score(head, its neighbour) = 5, any other pair 0 or 1
    pos = torch.stack([heads, neighbour])
    known = torch.cat([heads * n + neighbour, neighbour * n + heads])
    task = LinkPrediction(LinkPrediction.Config(hard_negatives=True, hard_pool=n * 8, hard_pool_min=pool_min))
    torch.manual_seed(0)
    blind = task._negatives(z, pos, n)
    torch.manual_seed(0)
    seen = task._negatives(z, pos, n, known)
    assert (blind == 5.0).all()        # every pool of 512 draws holds the neighbour
    assert (seen < 5.0).all() and (seen < 1.0).all()   # neither the neighbour nor the head itself


def test_training_loss_passes_the_known_edges_to_hard_negatives(synth_fed, monkeypatch):
    """The loss hands ``_negatives`` every training edge of the client (both directions), and
    no validation or test edge."""
    task = LinkPrediction(LinkPrediction.Config(hard_negatives=True))
    client = synth_fed.clients[0]
    seen = {}
    real = task._negatives

    def spy(z, pos, n, known=None):
        seen["known"] = known
        return real(z, pos, n, known)

    monkeypatch.setattr(task, "_negatives", spy)
    model = nn.Linear(client.features[client.modalities[0]].shape[1], 4)
    task.loss(lambda c: model(c.features[c.modalities[0]]), client)
    sp = task.split(client)
    n = client.num_nodes
    assert set(seen["known"].tolist()) == set((sp.eval_message[0] * n + sp.eval_message[1]).tolist())
    held = torch.cat([sp.positives["val"], sp.positives["test"]], dim=1)
    assert not torch.isin(held[0] * n + held[1], seen["known"]).any()


def test_hard_negative_configs_alone_carry_the_protocol_mark():
    """Excluding known edges changed how hard negatives train: those records go stale, every
    other link-prediction record keeps its protocol hash."""
    from benchmark.results import protocol_hash

    def hashes(task: dict) -> tuple[str, str]:
        cfg = build_run_config({"task": {"name": "link_pred", **task}})
        return protocol_hash(cfg), cfg

    plain, cfg = hashes({})
    original = LinkPrediction.protocol_marks
    try:
        LinkPrediction.protocol_marks = classmethod(lambda cls, c: {})
        assert protocol_hash(cfg) == plain
        hard_unmarked, _ = hashes({"hard_negatives": True})
    finally:
        LinkPrediction.protocol_marks = original
    hard, _ = hashes({"hard_negatives": True})
    assert hard != hard_unmarked and LinkPrediction.protocol_marks({"hard_negatives": True}) == {"hard_negatives": 2}
