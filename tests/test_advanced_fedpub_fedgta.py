"""FedPub and FedGTA: they train, pass the ledger audit, beat the majority reference, and
their personalized server steps do what the papers say.

Same small synthetic federation as ``test_baselines.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from baselines.advanced.fedgta import gta_mixing
from baselines.advanced.fedpub import PROXY_PREFIX
from benchmark.algorithm import model_payload
from benchmark.engine import Engine
from data_prep.build import build_federation
from test_baselines import _cfg, majority_reference


@pytest.fixture(scope="module")
def small_fed(tmp_path_factory):
    cfg = _cfg("fedavg", tmp_path_factory.mktemp("cache"))
    return cfg.output.cache_dir, build_federation(cfg)


def _algo(name: str, cache, fed):  # noqa: ANN202
    engine = Engine(_cfg(name, cache), fed=fed)
    return engine, engine.algo_cls(engine.algo_cfg, engine._context())


@pytest.mark.parametrize("algo", ["fedpub", "fedgta"])
def test_beats_majority_and_passes_audit(algo, small_fed):
    cache, fed = small_fed
    rec = Engine(_cfg(algo, cache), fed=fed).run()
    assert rec["status"] == "ok", rec["error"]
    assert rec["comm"]["violations"] == []
    assert rec["comm"]["bytes_up"] > 0
    reference = majority_reference(fed)
    assert rec["metrics"]["test/accuracy"] > reference + 0.15, (rec["metrics"], reference)


def test_fedpub_broadcast_is_per_client_and_proxy_sent_once(small_fed):
    cache, fed = small_fed
    torch.manual_seed(0)
    engine, algo = _algo("fedpub", cache, fed)
    first = algo.init_server()
    cids = [c.cid for c in engine.clients]
    assert sorted(first) == sorted(cids)
    assert all(PROXY_PREFIX + "edge_index" in first[c] for c in cids)
    states = {c.cid: {} for c in engine.clients}
    uploads = {c.cid: algo.client_update(c, states[c.cid], first[c.cid], 0) for c in engine.clients}
    assert all("embedding" in u and not any(k.startswith("masks") for k in u) for u in uploads.values())
    second = algo.aggregate(uploads, 0)
    assert sorted(second) == sorted(cids)
    assert not any(k.startswith(PROXY_PREFIX) for p in second.values() for k in p)  # sent once
    key = "model.head.weight"
    assert not torch.allclose(second[cids[0]][key], second[cids[1]][key])
    # each personalized model is a convex combination of the uploads
    lo = torch.stack([u[key] for u in uploads.values()]).min(0).values
    hi = torch.stack([u[key] for u in uploads.values()]).max(0).values
    assert all(((p[key] >= lo - 1e-6) & (p[key] <= hi + 1e-6)).all() for p in second.values())


def test_fedpub_regularizers_carry_gradients(small_fed):
    """The paper's L1(mask) and ||theta - theta_received||_2 terms must reach the gradient."""
    cache, fed = small_fed
    _, algo = _algo("fedpub", cache, fed)
    model = algo.build_model()
    received = {n: p.detach() + 0.1 for n, p in model.net.named_parameters()}
    algo._regularizer(model, received)(model).backward()
    assert all(m.grad is not None and m.grad.abs().sum() > 0 for m in model.masks.values())
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.net.parameters())


def test_gta_mixing_respects_cosine_threshold():
    # cos(mu0, mu1) = 0.6 (accepted), cos(mu0, mu2) = 0.4 (rejected), cos(mu1, mu2) ~ 0.97
    mus = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.4, math.sqrt(1 - 0.16)]])
    w = torch.tensor([1.0, 3.0, 2.0])
    mix = gta_mixing(mus, w, accept=0.5)
    expected = torch.tensor([[1 / 4, 3 / 4, 0.0],
                             [1 / 6, 3 / 6, 2 / 6],
                             [0.0, 3 / 5, 2 / 5]])
    assert torch.allclose(mix, expected, atol=1e-6)
    # a client always aggregates with itself, even when nobody resembles it
    alone = gta_mixing(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), torch.tensor([1.0, 1.0]), accept=0.5)
    assert torch.allclose(alone, torch.eye(2))


def test_fedgta_aggregate_on_hand_made_uploads(small_fed):
    cache, fed = small_fed
    engine, algo = _algo("fedgta", cache, fed)
    base = algo.init_server()
    mus = [torch.tensor([1.0, 0.0]), torch.tensor([0.6, 0.8]), torch.tensor([0.4, math.sqrt(1 - 0.16)])]
    confs = [1.0, 3.0, 2.0]
    cids = [c.cid for c in engine.clients][:3]
    uploads = {c: {**{k: torch.full_like(v, float(i)) for k, v in base.items()},
                   "moments": mus[i], "confidence": torch.tensor([confs[i]]), "num_examples": torch.tensor([1.0])}
               for i, c in enumerate(cids)}
    out = algo.aggregate(uploads, 0)
    key = "model.head.weight"
    assert torch.allclose(out[cids[0]][key], torch.full_like(base[key], 0.75))           # (1*0 + 3*1) / 4
    assert torch.allclose(out[cids[1]][key], torch.full_like(base[key], (3 + 4) / 6))     # all three
    assert torch.allclose(out[cids[2]][key], torch.full_like(base[key], (3 + 4) / 5))     # client 0 rejected
    assert set(out) == {c.cid for c in engine.clients}
    assert model_payload(algo.global_model).keys() == base.keys()
