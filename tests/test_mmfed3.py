"""MMFeD3 (methods/mmfed3) and MMFedLU (baselines/kg/mmfedlu.py), the dual-view FedMKGC
methods: both train audited on the tiny synthetic KG and beat the references (random
scorer; S-Ind for MMFeD3-HidE), upload the server view only (never the imputer, diffusion
or relations), report the server view under val_server/test_server, and are deterministic.
Key client steps: the distillation terms vanish when the two views coincide (MMFeD3 with
a synchronized client view and no imputer then *is* MMFedE), imputation makes the views
differ, and FedLU's gating switches its directed terms as specified."""

from __future__ import annotations

import pytest
import torch

from baselines.kg.mmfedlu import DualTerms, candidate_log_probs, distill_kl
from benchmark.errors import ConfigError
from data_prep.build import build_federation
from test_kg_track import kg_cfg, random_mrr
from test_kg_imputers import ALLOWED, run

torch.set_num_threads(1)

HIDE = {"imputer": "hide", "diffusion_steps": 3}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("mmfed3")


@pytest.fixture(scope="module")
def fed(tmp):
    return build_federation(kg_cfg(tmp))


@pytest.fixture(scope="module")
def mmfed3_hide(tmp, fed):
    return run(tmp, fed, "mmfed3", **HIDE)


def _ok(rec: dict, label: str) -> None:
    assert rec["status"] == "ok", (label, rec["error"])
    assert not rec["comm"]["violations"], label
    assert set(rec["comm"]["upload_names"]) <= ALLOWED, set(rec["comm"]["upload_names"]) - ALLOWED


def test_distillation_helpers():
    pos, neg = torch.randn(4), torch.randn(4, 6)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[0, 2] = True
    logp = candidate_log_probs([(pos, neg)], mask)
    assert torch.allclose(logp.exp().sum(1), torch.ones(4)) and logp[0, 3].exp().item() == 0.0
    split = candidate_log_probs([(pos, neg), (pos * 0, neg * 2)], mask)
    assert torch.allclose(split.exp().sum(1), torch.ones(4), atol=1e-6)
    assert distill_kl(logp, logp).item() == pytest.approx(0.0, abs=1e-7)
    student = torch.log_softmax(torch.randn(4, 7), 1).requires_grad_(True)
    teacher = logp.clone().requires_grad_(True)
    kl = distill_kl(teacher, student)
    kl.backward()
    assert kl.item() > 0 and teacher.grad is None and student.grad.abs().sum() > 0


def test_mmfed3_hide_trains_audited_and_beats_s_ind(tmp, fed, mmfed3_hide):
    rec, eng = mmfed3_hide
    _ok(rec, "mmfed3-hide")
    s_ind, _ = run(tmp, fed, "s_ind")
    ref = random_mrr(fed)
    assert rec["metrics"]["test/mrr"] > max(2.0 * ref, s_ind["metrics"]["test/mrr"]), \
        (rec["metrics"]["test/mrr"], s_ind["metrics"]["test/mrr"], ref)
    per_client = eng.sim.best["per_client"]
    for scores in per_client.values():
        assert {"val", "test", "val_server", "test_server"} <= set(scores)
        assert 0.0 < scores["val_server"]["mrr"] <= 1.0


def _traces(eng) -> list[list[dict[str, float]]]:
    """Each client's distillation trace (kept in its own state)."""
    traces = [st["trace"] for st in eng.sim.states.values()]
    assert traces and all(traces)
    return traces


def test_mmfed3_uploads_the_server_view_only(tmp, fed, mmfed3_hide):
    _, eng = mmfed3_hide
    algo, client = eng.sim.algo, eng.clients[0]
    state = eng.sim.states[client.cid]
    up = algo.client_update(client, state, eng._for_client(eng.sim.broadcast, client.cid), 99)
    assert set(up) <= ALLOWED
    assert torch.equal(up["entity"], state["server"].entity.detach())
    assert not torch.equal(up["entity"], state["model"].entity.detach())
    assert state["server"].decoder is state["model"].decoder  # R^c shared by the views, never uploaded
    assert state["model"].imputer is not None and state["server"].imputer is None


def test_mmfed3_terms_vanish_when_views_coincide(tmp, fed):
    """A synchronized client view without imputer equals the server view at every round's
    first batch, so KL and feature distillation are exactly 0 there and MMFeD3 reduces to
    MMFedE; with HidE the imputed client view differs and the feature term is positive."""
    rec, eng = run(tmp, fed, "mmfed3", rounds=3, sync_client=True)
    base, _ = run(tmp, fed, "mmfede", rounds=3)
    _ok(rec, "mmfed3-sync")
    for trace in _traces(eng):
        assert len(trace) == 3 and all(v == 0.0 for terms in trace for v in terms.values())
    # the synchronized client view is the global model: MMFedE's server view, round by round
    assert rec["curves"]["val/mrr"] == pytest.approx(base["curves"]["val_server/mrr"], abs=1e-6)
    assert rec["curves"]["test/mrr"] == pytest.approx(base["curves"]["test_server/mrr"], abs=1e-6)
    imputed, eng2 = run(tmp, fed, "mmfed3", rounds=2, sync_client=True, **HIDE)
    _ok(imputed, "mmfed3-sync-hide")
    for trace in _traces(eng2):
        assert all(terms["fd"] > 0 for terms in trace)


def test_mmfed3_is_deterministic(tmp, fed, mmfed3_hide):
    again, _ = run(tmp, fed, "mmfed3", **HIDE)
    assert again["metrics"] == mmfed3_hide[0]["metrics"]


def test_mmfedlu_plain_and_gated(tmp, fed):
    ref = random_mrr(fed)
    plain, eng = run(tmp, fed, "mmfedlu")
    _ok(plain, "mmfedlu")
    assert plain["metrics"]["test/mrr"] > 2.0 * ref
    for trace in _traces(eng):
        assert all(set(terms) == {"kl"} for terms in trace)
    gated, eng = run(tmp, fed, "mmfedlu", rounds=4, gating=True, wait_rounds=2)
    _ok(gated, "mmfedlu-gated")
    assert gated["metrics"]["test/mrr"] > 2.0 * ref
    for trace in _traces(eng):
        assert trace[0] == {}  # round 0: no stall seen yet, before wait_rounds
        assert all("kl_g2l" in terms for terms in trace[2:])  # from wait_rounds on
        assert all("kl_g2l" in terms for terms in trace if "kl_l2g" in terms)  # a stall switches both on
    # the gate itself: l2g only while stalled; g2l from a stall or wait_rounds on, for good
    algo = eng.sim.algo
    logp = torch.log_softmax(torch.randn(3, 5), 1)
    terms = DualTerms(logp, logp.roll(1, 1), torch.randn(4, 2), torch.randn(4, 2))
    state = {"bad": 0}
    assert algo.distill(terms, state, 0) == {}
    assert set(algo.distill(terms, {"bad": 1}, 0)) == {"kl_g2l", "kl_l2g"}
    assert set(algo.distill(terms, state, 2)) == {"kl_g2l"}
    assert set(algo.distill(terms, state, 0)) == {"kl_g2l"}  # sticky once on


def test_config_errors(tmp):
    with pytest.raises(ConfigError, match="algorithm.eta must be >= 0"):
        kg_cfg(tmp, "mmfed3", algo_params={"eta": -1.0})
    with pytest.raises(ConfigError, match="algorithm.mu"):
        kg_cfg(tmp, "mmfedlu", algo_params={"mu": -0.5})
