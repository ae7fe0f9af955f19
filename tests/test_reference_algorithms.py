"""The competence references of the graph track (``baselines/reference``): ``chance`` scores
what a trivial predictor scores, by hand; ``linear`` beats it clearly where the features carry
the answer, is deterministic, and never reads a held-out row while it fits."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from baselines.reference.chance import harmonic
from baselines.reference.linear import LinearModel
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.federation import ClientData, FederatedData
from benchmark.models.multimodal import MultimodalGNN
from benchmark.registry import ALGORITHMS, load_plugins
from benchmark.tasks.link_pred import LinkPrediction
from conftest import make_tiny_federation

load_plugins()

GRAPH_TASKS = ("node_cls", "link_pred", "retrieval", "matching")
# retrieval/matching score content: low feature noise, so that a linear map of the query row
# predicts the gallery row (tests/test_multimodal_fl.py uses the same generator settings)
PAIR_DATA = {"name": "synthetic", "num_nodes": 600, "text_dim": 32, "image_dim": 32, "avg_degree": 8, "noise": 0.3}


def _cfg(algo: str, task: str, tmp, rounds: int = 1, dataset: dict | None = None, **opts):  # noqa: ANN001, ANN202
    return build_run_config({
        "dataset": dataset or {"name": "synthetic"},  # unused where the federation is given
        "partition": {"name": "louvain", "num_clients": 3},
        "missing": {"name": "node_level", "rate": 0.3},
        "task": {"name": task},
        "algorithm": {"name": algo, **opts},
        "model": {"hidden": 16},
        "train": {"rounds": rounds, "local_epochs": 1, "lr": 0.01, "device": "cpu", "checkpoint_every": 0},
        "output": {"cache_dir": str(tmp), "checkpoint_dir": str(tmp) + "/ckpt"},
    })


def _run(algo: str, task: str, fed: FederatedData, tmp, **opts) -> dict:  # noqa: ANN001
    rec = Engine(_cfg(algo, task, tmp, **opts), fed=fed).run(resume=False)
    assert rec["status"] == "ok", rec.get("error")
    assert rec["comm"]["violations"] == []
    return rec


def _engine_algo(algo: str, task: str, fed: FederatedData, tmp, **opts):  # noqa: ANN001, ANN202
    engine = Engine(_cfg(algo, task, tmp, **opts), fed=fed)
    return engine, engine.algo_cls(engine.algo_cfg, engine._context())


@pytest.fixture(scope="module")
def tiny() -> FederatedData:
    return make_tiny_federation(n=300, k=3)


@pytest.fixture(scope="module")
def pair_fed(tmp_path_factory) -> tuple[object, FederatedData]:
    from data_prep.build import build_federation

    cache = tmp_path_factory.mktemp("reference_pairs")
    return cache, build_federation(_cfg("linear", "retrieval", cache, dataset=PAIR_DATA))


def test_registered_as_centralized_references_of_the_graph_tasks():
    """Chance, the linear model and the centralized GNN cover every graph task (link
    prediction on the pooled view's union split, below)."""
    expected = {"chance": set(GRAPH_TASKS), "linear": set(GRAPH_TASKS), "centralized": set(GRAPH_TASKS)}
    for name, tasks in expected.items():
        cls = ALGORITHMS.get(name)
        assert cls.centralized and set(cls.tasks) == tasks, name
        assert cls.__doc__ and cls.__module__.startswith("baselines.")


# --------------------------------------------------------------------------- chance


def test_chance_node_cls_is_the_majority_training_class(tiny, tmp_path):
    pooled = tiny.pooled
    majority = int(torch.bincount(pooled.y[pooled.train_mask]).argmax())
    hits = sum(int((c.y[c.test_mask] == majority).sum()) for c in tiny.clients)
    total = sum(int(c.test_mask.sum()) for c in tiny.clients)
    rec = _run("chance", "node_cls", tiny, tmp_path)
    assert rec["metrics"]["test/accuracy"] == pytest.approx(hits / total, abs=1e-6)  # float32 per client
    assert rec["metrics"]["test/spread"] == 0.0
    assert rec["comm"]["bytes_up"] == 0
    engine, algo = _engine_algo("chance", "node_cls", tiny, tmp_path)
    state: dict = {}
    algo.client_update(engine.train_clients[0], state, {}, 0)
    c = engine.clients[0]
    rows = algo.evaluate(c, state, {})
    model = MultimodalGNN(engine._context().feature_dims, c.num_classes, engine.cfg.model)
    assert {s: set(r) for s, r in rows.items()} == {s: set(r) for s, r in engine.task.evaluate(model, c).items()}
    assert rows["test"]["accuracy"] == pytest.approx(float((c.y[c.test_mask] == majority).float().mean()))


def test_chance_retrieval_is_the_expected_random_ranking(tiny, tmp_path):
    engine, algo = _engine_algo("chance", "retrieval", tiny, tmp_path)
    task, c = engine.task, engine.clients[0]
    qi, gi = task.modalities(c)
    g = int((c.test_mask & c.available[:, qi] & c.available[:, gi]).sum())
    assert g >= 10
    rows = algo.evaluate(c, {}, {})
    test = rows["test"]
    assert test["recall@5"] == 5 / g and test["recall@1"] == 1 / g and test["recall@10"] == 10 / g
    assert test["mrr"] == pytest.approx(harmonic(g) / g) and test["n"] == g and test["spread"] == 0.0
    model = MultimodalGNN(engine._context().feature_dims, task.out_dim(0), engine.cfg.model)
    assert {s: set(r) for s, r in rows.items()} == {s: set(r) for s, r in task.evaluate(model, c).items()}
    # a gallery of fewer than two items is no retrieval: NaN and n = 0, as the task
    one = torch.zeros_like(c.test_mask)
    one[int(torch.nonzero(c.test_mask & c.available[:, qi] & c.available[:, gi])[0])] = True
    row = algo.evaluate(dataclasses.replace(c, test_mask=one), {}, {})["test"]
    assert row["n"] == 0.0 and math.isnan(row["mrr"]) and math.isnan(row["recall@5"])


def test_chance_pairs_score_half_and_the_share_of_positives(tiny, tmp_path):
    engine, algo = _engine_algo("chance", "matching", tiny, tmp_path)
    for s, row in algo.evaluate(engine.clients[0], {}, {}).items():
        assert (row["auc"], row["ap"], row["spread"]) == (0.5, 0.5, 0.0) and row["n"] >= 2, s
    engine, algo = _engine_algo("chance", "link_pred", tiny, tmp_path)
    c = engine.clients[0]
    sp = engine.task.split(c)
    for s, row in algo.evaluate(c, {}, {}).items():
        pos, neg = sp.positives[s].shape[1], sp.negatives[s].shape[1]
        assert pos > 0 and row["n"] == pos
        assert row["auc"] == 0.5 and row["ap"] == pytest.approx(pos / (pos + neg)) and row["spread"] == 0.0, s


# --------------------------------------------------------------------------- linear


def test_linear_node_cls_beats_chance_clearly(tiny, tmp_path):
    chance = _run("chance", "node_cls", tiny, tmp_path)["metrics"]["test/accuracy"]
    rec = _run("linear", "node_cls", tiny, tmp_path)
    assert rec["metrics"]["test/accuracy"] > chance + 0.3, (rec["metrics"], chance)
    assert rec["comm"]["bytes_up"] > 0  # the fitted weights went through the ledger


def test_linear_cca_beats_chance_on_retrieval_and_matching(pair_fed, tmp_path):
    _, fed = pair_fed
    chance = _run("chance", "retrieval", fed, tmp_path)["metrics"]["test/mrr"]
    mrr = _run("linear", "retrieval", fed, tmp_path)["metrics"]["test/mrr"]
    assert mrr > 2 * chance, (mrr, chance)  # measured: 0.61 against 0.19
    auc = _run("linear", "matching", fed, tmp_path)["metrics"]["test/auc"]
    assert auc > 0.75, auc  # measured: 0.88 (chance 0.5)


def test_linear_cca_model_is_sklearns_projection(tiny, tmp_path):
    """The uploaded weights reproduce ``CCA.transform`` (scale=True) on the training pairs."""
    from sklearn.cross_decomposition import CCA

    engine, algo = _engine_algo("linear", "retrieval", tiny, tmp_path, n_components=3)
    task, pooled = engine.task, engine.train_clients[0]
    model = LinearModel.from_payload(algo.fit(pooled).payload())
    view = task.training_view(pooled)
    nodes = task.training_nodes(view)
    qi, gi = task.modalities(view)
    x = view.features[view.modalities[qi]][nodes].double().numpy()
    y = view.features[view.modalities[gi]][nodes].double().numpy()
    zx, zy = CCA(n_components=3).fit(x, y).transform(x, y)
    with torch.no_grad():
        got_x = model(task.only(view, qi))[nodes].double().numpy()
        got_y = model(task.only(view, gi))[nodes].double().numpy()
    assert got_x.shape == zx.shape
    assert abs(got_x - zx).max() < 1e-3 * abs(zx).max() and abs(got_y - zy).max() < 1e-3 * abs(zy).max()


def test_linear_link_prediction_beats_chance_from_the_features(tiny, tmp_path):
    """On the tiny DC-SBM graph linked nodes share a community, which the features carry: the
    bilinear score finds it from the training edges alone, and its weights go through the
    ledger."""
    rec = _run("linear", "link_pred", tiny, tmp_path)
    assert rec["metrics"]["test/auc"] > 0.6 and rec["comm"]["bytes_up"] > 0, rec["metrics"]


def test_linear_link_score_is_the_positive_part_of_the_edges_feature_cross_covariance(tiny, tmp_path):
    """z_u . z_v equals (x_u - mean)^T S_+ (x_v - mean), S the symmetrized mean of the centred
    x_u x_v^T over the pooled training edges (both directions), S_+ its positive eigen-part,
    when the components cover every positive eigenvalue."""
    engine, algo = _engine_algo("linear", "link_pred", tiny, tmp_path, n_components=10_000)
    pooled, task = engine.train_clients[0], engine.task
    model = LinearModel.from_payload(algo.fit(pooled).payload())
    x = torch.cat([pooled.features[m] for m in pooled.modalities], dim=1).double()
    xc = x - x.mean(0)
    e = task.known_edges(pooled)
    cross = xc[e[0]].T @ xc[e[1]] / e.shape[1]
    lam, vec = torch.linalg.eigh((cross + cross.T) / 2)
    s_plus = (vec * lam.clamp_min(0)) @ vec.T
    pairs = torch.randint(0, pooled.num_nodes, (2, 200), generator=torch.Generator().manual_seed(0))
    want = ((xc[pairs[0]] @ s_plus) * xc[pairs[1]]).sum(-1)
    with torch.no_grad():
        got = task.score(model(pooled).double(), pairs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5 * float(want.abs().max()))
    # no held-out edge among what it fitted on
    held = torch.cat([task.split(pooled).positives[s] for s in ("val", "test")], dim=1)
    n = pooled.num_nodes
    assert not torch.isin(held[0] * n + held[1], e[0] * n + e[1]).any()


@pytest.mark.parametrize("task", ["node_cls", "link_pred", "retrieval", "matching"])
def test_linear_same_seed_same_metrics(task, tiny, tmp_path):
    first = _run("linear", task, tiny, tmp_path)["metrics"]
    second = _run("linear", task, tiny, tmp_path)["metrics"]
    assert first == second


def _perturbed(c: ClientData, qi: int, gi: int, g: torch.Generator) -> ClientData:
    """The client with other values in the query and gallery rows of its validation/test nodes."""
    feats = {m: x.clone() for m, x in c.features.items()}
    held = c.val_mask | c.test_mask
    for j in (qi, gi):
        m = c.modalities[j]
        feats[m][held] = torch.randn(int(held.sum()), feats[m].shape[1], generator=g) * 3.0 + 1.0
    return dataclasses.replace(c, features=feats)


@pytest.mark.parametrize("task", ["retrieval", "matching"])
def test_linear_weights_ignore_heldout_rows(task, tiny, tmp_path):
    engine, algo = _engine_algo("linear", task, tiny, tmp_path)
    pooled, t = engine.train_clients[0], engine.task
    qi, gi = t.modalities(pooled)
    g = torch.Generator().manual_seed(7)
    base = algo.fit(pooled).payload()
    other = algo.fit(_perturbed(pooled, qi, gi, g)).payload()
    assert base.keys() == other.keys()
    assert all(torch.equal(base[k], other[k]) for k in base), [k for k in base if not torch.equal(base[k], other[k])]
    # the change does reach what evaluation reads (so the check above could fail)
    c = engine.clients[0]
    model = LinearModel.from_payload(base)
    assert t.evaluate(model, c)["test"] != t.evaluate(model, _perturbed(c, qi, gi, g))["test"]


def test_pooled_link_split_is_the_union_of_the_clients_splits(tiny):
    """The pooled view's held-out edges are exactly the clients' held-out edges (global ids), and
    its training edges are every other edge: the clients' training edges and the edges between
    clients, none of which a client evaluates on."""
    task = LinkPrediction()
    pooled = tiny.pooled
    n = pooled.num_nodes

    def keys(e: torch.Tensor) -> set[int]:
        lo, hi = torch.minimum(e[0], e[1]), torch.maximum(e[0], e[1])
        return set((lo * n + hi).tolist())

    sp = task.split(pooled, with_negatives=False)
    trained = keys(sp.train_message) | keys(sp.positives["train"])
    held, client_train = set(), set()
    for c in tiny.clients:
        csp = task.split(c, with_negatives=False)
        held |= keys(c.global_ids[csp.positives["val"]]) | keys(c.global_ids[csp.positives["test"]])
        client_train |= keys(c.global_ids[csp.eval_message])
    assert held and not held & trained
    assert keys(sp.positives["val"]) | keys(sp.positives["test"]) == held
    assert client_train < trained and trained | held == keys(pooled.edge_index)  # edges between clients train too
    # without its members a view is split as one client: the split that overlapped before
    alone = task.split(dataclasses.replace(pooled, members=[]), with_negatives=False)
    assert held & (keys(alone.train_message) | keys(alone.positives["train"]))


def test_centralized_link_prediction_beats_chance(tiny, tmp_path):
    """The centralized GNN learns link prediction on the pooled union split (measured: test AUC
    0.80 after 3 rounds), and its weights go through the ledger."""
    rec = _run("centralized", "link_pred", tiny, tmp_path, rounds=3)
    assert rec["metrics"]["test/auc"] > 0.65 and rec["comm"]["bytes_up"] > 0, rec["metrics"]
