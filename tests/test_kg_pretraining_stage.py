"""FedE pre-training as a stage of its own (``algorithm.pretrained: fede``, benchmark/stages.py):
made once per federation, seed and settings, cached as safetensors, outside the method's round
budget and ledger; a run from the cache equals a run that made the stage; the method starts
from exactly FedE's end state; isolated and centralized bounds refuse it."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from baselines.kg import common
from benchmark import stages
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from data_prep.build import build_federation
from test_kg_track import kg_cfg

torch.set_num_threads(1)

STAGE_ROUNDS = 3


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("kg_stage")


@pytest.fixture(scope="module")
def fed(tmp):
    return build_federation(kg_cfg(tmp))


def run(tmp, fed, alg: str, rounds: int = 3, **params):
    eng = Engine(kg_cfg(tmp, alg, rounds=rounds, algo_params=params), fed=fed)
    return eng.run(resume=False), eng


@pytest.fixture(scope="module")
def first(tmp, fed):
    """The first pre-trained run: it makes the stage."""
    return run(tmp, fed, "mmfede", imputer="ae", pretrained="fede", pretrain_rounds=STAGE_ROUNDS)


def stage_files(tmp):
    return sorted((tmp / "cache" / stages.STAGE_DIR).glob(f"*{stages.SUFFIX}"))


def test_stage_is_made_once_outside_the_budget(tmp, fed, first):
    rec, eng = first
    assert rec["status"] == "ok", rec["error"]
    info = rec["pretraining"]
    assert info["algorithm"] == "fede" and info["rounds_run"] == STAGE_ROUNDS and info["cached"] is False
    assert rec["rounds_run"] == 3  # the method's own budget, untouched by the stage
    plain, _ = run(tmp, fed, "mmfede", imputer="ae")
    assert rec["comm"]["bytes_up"] == plain["comm"]["bytes_up"]  # the stage's bytes are not the method's
    assert len(stage_files(tmp)) == 1
    again, _ = run(tmp, fed, "mmfed3", imputer="hide", diffusion_steps=2, pretrained="fede",
                   pretrain_rounds=STAGE_ROUNDS)
    assert again["pretraining"]["cached"] is True and again["pretraining"]["config_hash"] == info["config_hash"]
    assert len(stage_files(tmp)) == 1  # every method at this federation and seed shares it


def test_run_from_cache_equals_run_that_made_it(tmp, fed, first):
    rec, _ = first
    cached, _ = run(tmp, fed, "mmfede", imputer="ae", pretrained="fede", pretrain_rounds=STAGE_ROUNDS)
    assert cached["pretraining"]["cached"] is True
    assert cached["metrics"] == rec["metrics"] and cached["curves"]["val/mrr"] == rec["curves"]["val/mrr"]


def test_method_starts_from_fedes_end_state(tmp, fed, first, monkeypatch):
    """The stage holds exactly what a plain FedE run of the same rounds ends with, and the
    method's server table and each client's rows and relations start from it (not from a
    fresh uniform draw). Checked on the tensors, not on a first-round score: a warm start
    above a cold one held on the CPU but not on an H200 at this toy size (0.30 vs 0.35)."""
    fede, eng = run(tmp, fed, "fede", rounds=STAGE_ROUNDS)
    saved = load_file(str(stage_files(tmp)[0]))
    assert torch.equal(saved["server.entity"], eng.sim.algo.table.cpu())
    cid = fed.clients[0].cid
    model = eng.sim.states[cid]["model"]
    assert torch.equal(saved[f"client.{cid}.entity"], model.entity.detach().cpu())
    for k, v in model.decoder.state_dict().items():
        assert torch.equal(saved[f"client.{cid}.decoder.{k}"], v.cpu()), k
    # the warm-started method's models and server table begin as those tensors
    started: list[tuple[dict, torch.Tensor, dict]] = []
    real_start = common.start_from_stage

    def spy(model, warm):
        real_start(model, warm)
        started.append((warm, model.entity.detach().cpu().clone(),
                        {k: v.detach().cpu().clone() for k, v in model.decoder.state_dict().items()}))

    monkeypatch.setattr(common.KGAlgorithm, "init_server", _recording_init_server(tables := []))
    monkeypatch.setattr(common, "start_from_stage", spy)
    run(tmp, fed, "mmfede", imputer="ae", pretrained="fede", pretrain_rounds=STAGE_ROUNDS, rounds=1)
    assert len(tables) == 1 and torch.equal(tables[0], saved["server.entity"])
    assert len(started) == len(fed.clients)
    for c in fed.clients:
        rows = saved[f"client.{c.cid}.entity"]
        warm, entity, decoder = next(t for t in started if torch.equal(t[0]["entity"].cpu(), rows))
        assert torch.equal(entity, rows)
        for k, v in decoder.items():
            assert torch.equal(v, saved[f"client.{c.cid}.decoder.{k}"]), k


def _recording_init_server(tables: list):
    """KGAlgorithm.init_server, keeping the entity table it starts the federation with."""
    real = common.KGAlgorithm.init_server

    def init_server(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        if self.table is not None:
            tables.append(self.table.detach().cpu().clone())
        return out
    return init_server


@pytest.mark.parametrize("alg", ["s_ind", "mmind", "mmcen"])
def test_bounds_refuse_a_federated_stage(tmp, fed, alg):
    with pytest.raises(ConfigError, match="pretrained"):
        run(tmp, fed, alg, pretrained="fede")


def test_unreadable_stage_is_remade(tmp, fed, first):
    path = stage_files(tmp)[0]
    good = path.read_bytes()
    path.write_bytes(b"not a safetensors file")
    try:
        rec, _ = run(tmp, fed, "mmfede", imputer="ae", pretrained="fede", pretrain_rounds=STAGE_ROUNDS)
        assert rec["pretraining"]["cached"] is False and rec["metrics"] == first[0]["metrics"]
        assert path.read_bytes() != b"not a safetensors file"
    finally:
        path.write_bytes(good)
