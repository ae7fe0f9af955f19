"""Bounded projections (issue 27, "KG track at convergence"): the projected modality blocks
``W_m x_m`` that every fusion, the split scorers and the imputers' hyper-modal matrix consume
stay on the structural rows' initial scale (``KGEClient.modality_blocks``, ``algorithm.proj_norm``).

The must-show runs MMFeD3 for 50 rounds on the tiny synthetic KG at ``train.lr`` 0.1 (twice the
suites' 0.05, to stress the dense projections within a short run) with every round evaluated:

- every row of every projected block, in every forward of the run (training and scoring, client
  and server views), has RMS ``r = embedding_range / sqrt(3)`` (the bound; 0.505 here), while the
  same run with ``proj_norm: none`` (the code before the bound) grows its blocks past ``4 r``
  (measured: row RMS up to 7.1, i.e. 14 r; a whole block's RMS up to 5.6, i.e. 11 r);
- the client view's validation MRR at the end is within 0.02 of its peak, both as 5-round means
  (the tiny KG scores about 67 validation triples, so a single round moves by +-0.02 on its own;
  measured with the bound: 5-round peak 0.566, end 0.552), and above the unbounded run's end
  (measured 0.464, peak 0.494).
"""

from __future__ import annotations

import math

import pytest
import torch

from baselines.kg.kge_client import KGEClient, _standardize, bound_rows
from baselines.kg.fusions import KG_FUSIONS
from baselines.kg.imputers import ImputerOptions
from benchmark.engine import Engine
from data_prep.build import build_federation
from test_kg_track import kg_cfg

torch.set_num_threads(1)

ROUNDS = 50
LR = 0.1
SMOOTH = 5  # rounds per validation mean


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("kg_bounded")


@pytest.fixture(scope="module")
def fed(tmp):
    return build_federation(kg_cfg(tmp))


def _cfg(tmp, rounds: int, **algo):
    cfg = kg_cfg(tmp, "mmfed3", rounds=rounds, algo_params=algo)
    cfg.train.lr = LR
    cfg.train.eval_every = 1
    return cfg


def _row_rms(x: torch.Tensor) -> torch.Tensor:
    return x.detach().pow(2).mean(dim=1).sqrt()


def _recorded_run(tmp, fed, rounds: int, **algo):
    """Run MMFeD3, recording every projected block ``modality_blocks`` returns: per call,
    ``(min row RMS, max row RMS, block RMS)`` over its modalities, and the bound ``r``."""
    calls: list[tuple[float, float, float]] = []
    scales: set[float] = set()
    orig = KGEClient.modality_blocks

    def recording(self, client):
        structure, projected = orig(self, client)
        scales.add(self.decoder.embedding_range / math.sqrt(3))
        for v in projected.values():
            rows = _row_rms(v)
            calls.append((float(rows.min()), float(rows.max()), float(v.detach().pow(2).mean().sqrt())))
        return structure, projected

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(KGEClient, "modality_blocks", recording)
        eng = Engine(_cfg(tmp, rounds, **algo), fed=fed)
        rec = eng.run()
    assert rec["status"] == "ok", rec["error"]
    assert len(scales) == 1
    return rec, calls, scales.pop()


@pytest.fixture(scope="module")
def bounded(tmp, fed):
    return _recorded_run(tmp, fed, ROUNDS)


@pytest.fixture(scope="module")
def unbounded(tmp, fed):
    return _recorded_run(tmp, fed, ROUNDS, proj_norm="none")


def _smoothed(curve: list[float]) -> list[float]:
    return [sum(curve[i - SMOOTH:i]) / SMOOTH for i in range(SMOOTH, len(curve) + 1)]


def test_projected_rows_stay_at_the_structural_scale(bounded, unbounded):
    rec, calls, r = bounded
    assert r == pytest.approx((12.0 + 2.0) / 16 / math.sqrt(3))  # RotatE, gamma 12, dim 16
    # every forward of the run: 2 modalities x (training batches + scorings) x both views x 3 clients
    assert len(calls) > 2 * ROUNDS * 3 * 2
    lo, hi = min(c[0] for c in calls), max(c[1] for c in calls)
    assert r * (1 - 1e-4) <= lo and hi <= r * (1 + 1e-4), (lo, hi, r)
    # the control: without the bound the blocks leave that scale and keep growing
    _, free, r_free = unbounded
    assert r_free == r
    assert max(c[1] for c in free) > 4 * r, max(c[1] for c in free)
    assert free[0][2] < 1.2 * r  # both start at the structural scale (init_projections)
    assert max(c[2] for c in free[-len(free) // 10:]) > 4 * r  # a whole block, late in the run


def test_validation_holds_its_peak(bounded, unbounded):
    rec, _, _ = bounded
    curve = rec["curves"]["val/mrr"]
    assert len(curve) == ROUNDS
    smooth = _smoothed(curve)
    assert smooth[-1] >= max(smooth) - 0.02, (max(smooth), smooth[-1])
    assert rec["metrics"]["val/mrr"] == pytest.approx(max(curve))  # the record's best round is the peak
    free = _smoothed(unbounded[0]["curves"]["val/mrr"])
    assert smooth[-1] > free[-1], (smooth[-1], free[-1])


def _engine(tmp, fed, alg: str, **algo) -> tuple[object, object]:
    eng = Engine(kg_cfg(tmp, alg, rounds=1, algo_params=algo), fed=fed)
    return eng, eng.algo_cls(eng.algo_cfg, eng._context())


def test_every_block_a_fusion_or_scorer_sees_is_bounded(tmp, fed):
    """Direct: the bound holds for the blocks of every fusion, for the rows an imputer fills
    (observed rows pass the imputer unchanged), and for the split paradigm's modality views;
    ``proj_norm: none`` (passed to every model an algorithm builds, both dual views included)
    gives the unbounded ``W_m x_m`` of before."""
    from baselines.kg.split import SplitKGEClient

    eng, algo = _engine(tmp, fed, "mmfede")
    task_cfg, client = eng.task.cfg, eng.clients[0]
    dims = {m: x.shape[1] for m, x in client.features.items()}
    dev = next(iter(client.features.values())).device  # the engine's device (CUDA under --device cuda)
    full = lambda r: torch.full((client.num_entities,), r, device=dev)  # noqa: E731
    for fusion in KG_FUSIONS.names():
        model = KGEClient(client.num_entities, client.num_relations, task_cfg, 7, dims, fusion).to(dev)
        with torch.no_grad():
            for lin in model.proj.values():
                lin.weight.mul_(50.0)  # as if training had blown the projections up
                lin.bias.fill_(3.0)
        r = model.decoder.embedding_range / math.sqrt(3)
        _, blocks = model.modality_blocks(client)
        for v in blocks.values():
            assert torch.allclose(_row_rms(v), full(r), rtol=1e-5)
        assert model.entity_vectors(client).shape == model.entity.shape
        model.proj_norm = "none"
        _, raw = model.modality_blocks(client)
        for m, lin in model.proj.items():
            assert torch.equal(raw[m], lin(_standardize(client.features[m])))
            assert float(_row_rms(raw[m]).min()) > 10 * r

    # an imputer: H holds the bounded blocks; the rows it fills are bounded after it
    model = algo.new_model(client)
    assert model.proj_norm == "rms"
    model.attach_imputer("ae", ImputerOptions(hidden=[], steps=3, beta_low=5e-4, beta_up=5e-2, noise_scale=1e-4,
                                              recon_net="cra", heads=4, drop=0.3), 11)
    model.eval()
    with torch.no_grad():
        model.proj["text"].weight.mul_(50.0)
        plain = {m: lin(_standardize(client.features[m])) for m, lin in model.proj.items()}
        _, blocks = model.modality_blocks(client)
    r = model.decoder.embedding_range / math.sqrt(3)
    for m in model.proj:
        assert torch.allclose(_row_rms(blocks[m]), full(r), rtol=1e-5)
        seen = client.available[:, client.modalities.index(m)]
        assert seen.any() and (~seen).any()
        expect = plain[m][seen] * (r / _row_rms(plain[m][seen])).unsqueeze(1)
        assert torch.allclose(blocks[m][seen], expect, rtol=1e-5, atol=1e-7)

    split = SplitKGEClient(client.num_entities, client.num_relations, task_cfg, 7, dims).to(dev)
    views = split.entity_views(client)
    assert set(dims) < set(views)
    for m in dims:
        assert torch.allclose(_row_rms(views[m][1]), full(r), rtol=1e-5)

    # a zero row (a zero-filled missing feature at a zero bias) stays zero, with a finite gradient
    x = torch.tensor([[0.0, 0.0, 0.0, 0.0], [3.0, -1.0, 2.0, 0.5]], requires_grad=True)
    y = bound_rows(x, r)
    y.sum().backward()
    assert torch.equal(y[0], torch.zeros(4)) and float(_row_rms(y[1:])) == pytest.approx(r)
    assert torch.isfinite(x.grad).all()

    # the option reaches every model an algorithm builds, both views of a dual-view method
    _, free = _engine(tmp, fed, "mmfed3", proj_norm="none")
    cm, sm = free.views(client, {})
    assert cm.proj_norm == sm.proj_norm == "none"
