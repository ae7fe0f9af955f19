"""The KG fusions Phi (average, weighted, concat, gated) and the MMFedE-derived FL
baselines MMFedProx and MMFedEC on the tiny synthetic KG: each runs through the Engine,
passes the ledger audit and clearly beats a random scorer; the regularizers behave as
their definitions say in a client's first round; an unknown fusion is a ConfigError."""

from __future__ import annotations

import math

import pytest
import torch

from baselines.kg.fusions import KG_FUSIONS, build_fusion
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from data_prep.build import build_federation
from test_kg_track import kg_cfg, random_mrr

torch.set_num_threads(1)

FUSION_NAMES = ("average", "weighted", "concat", "gated")


def cfg(tmp, alg: str = "mmfede", rounds: int = 5, **algo):
    """The test_kg_track configuration, with algorithm fields."""
    return kg_cfg(tmp, alg, rounds=rounds, algo_params=algo)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("kg_fusions")


@pytest.fixture(scope="module")
def fed(tmp):
    return build_federation(cfg(tmp))


@pytest.fixture(scope="module")
def ref(fed) -> float:
    return random_mrr(fed)


def _check(rec: dict, ref: float, label: str) -> None:
    assert rec["status"] == "ok", (label, rec["error"])
    assert not rec["comm"]["violations"], label
    mrr = rec["metrics"]["test/mrr"]
    assert mrr > 2.0 * ref, f"{label}: test MRR {mrr:.3f} is not clearly above random ({ref:.3f})"


def test_registry_holds_the_four_fusions():
    assert set(FUSION_NAMES) <= set(KG_FUSIONS.names())
    s = torch.randn(7, 8)
    proj = {"text": torch.randn(7, 8), "image": torch.randn(7, 8)}
    avg = (s + proj["text"] + proj["image"]) / 3
    assert torch.allclose(build_fusion("average", 8, ["text", "image"], 0)(s, proj), avg)
    assert torch.allclose(build_fusion("weighted", 8, ["text", "image"], 0)(s, proj), avg, atol=1e-6)
    for name in FUSION_NAMES:
        out = build_fusion(name, 8, ["text", "image"], 3)(s, proj)
        assert out.shape == (7, 8) and torch.isfinite(out).all()
        again = build_fusion(name, 8, ["text", "image"], 3)(s, proj)
        assert torch.equal(out, again), f"{name}: initialization must depend on the seed only"


@pytest.mark.parametrize("fusion", FUSION_NAMES)
def test_each_fusion_runs_audited_and_beats_random(tmp, fed, ref, fusion):
    eng = Engine(cfg(tmp, fusion=fusion), fed=fed)
    rec = eng.run()
    _check(rec, ref, fusion)
    names = set(rec["comm"]["upload_names"])
    params = {f"fusion.{n}" for n, _ in eng.sim.algo.new_model(eng.clients[0]).fusion.named_parameters()}
    assert params <= names and params == {k for k in eng.sim.algo.shared if k.startswith("fusion.")}
    assert (fusion == "average") == (not params), "only the average fusion has no parameters to share"
    assert not any("relation" in n or "decoder" in n for n in names)


def test_mmfedprox_runs_and_its_term_starts_each_round_at_zero(tmp, fed, ref):
    eng = Engine(cfg(tmp, "mmfedprox", mu=0.1), fed=fed)
    rec = eng.run()
    _check(rec, ref, "mmfedprox")
    trace = {cid: st["reg_trace"] for cid, st in eng.sim.states.items()}
    assert set(trace) == {c.cid for c in fed.clients}
    for values in trace.values():
        assert len(values) == 5 and all(v == 0.0 for v in values)  # local rows = global rows at round start


def test_mmfedec_runs_and_its_term_is_finite_from_round_zero(tmp, fed, ref):
    eng = Engine(cfg(tmp, "mmfedec"), fed=fed)
    rec = eng.run()
    _check(rec, ref, "mmfedec")
    trace = {cid: st["reg_trace"] for cid, st in eng.sim.states.items()}
    assert set(trace) == {c.cid for c in fed.clients}
    for values in trace.values():
        assert len(values) == 5 and all(math.isfinite(v) for v in values)
        assert values[0] == pytest.approx(0.1 * math.log(2.0), rel=1e-5)  # s_g = s_l = 1 in round 0
        assert all(0.0 <= v <= 0.1 * (math.log(2.0) + 2.0 / 0.2) for v in values)


def test_unknown_fusion_and_bad_weights_are_config_errors(tmp):
    with pytest.raises(ConfigError, match="average.*concat.*gated.*weighted"):
        cfg(tmp, fusion="bilinear")
    with pytest.raises(ConfigError, match="algorithm.mu"):
        cfg(tmp, "mmfedprox", mu=-1.0)
    with pytest.raises(ConfigError, match="algorithm.tau must be > 0"):
        cfg(tmp, "mmfedec", tau=0.0)
