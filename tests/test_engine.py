"""Engine: determinism, checkpoint + resume, NaN capture, audit failures, evaluation modes."""

from __future__ import annotations

import pytest
import torch

from benchmark import registry as R
from benchmark.algorithm import ModelAlgorithm
from benchmark.config import build_run_config
from benchmark.engine import Engine


def _cfg(tmp_path, **train):
    t = {"rounds": 6, "lr": 0.01, **train}
    return build_run_config({"algorithm": {"name": "fedavg"}, "model": {"hidden": 16}, "train": t,
                             "output": {"checkpoint_dir": str(tmp_path / "ckpt")}})


def test_same_seed_same_metrics(tiny_fed, tmp_path):
    a = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    b = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    assert a["status"] == "ok" and a["metrics"] == b["metrics"] and a["per_client"] == b["per_client"]


def test_record_has_curves_and_provenance(tiny_fed, tmp_path):
    rec = Engine(_cfg(tmp_path), fed=tiny_fed).run()
    assert len(rec["curves"]["round"]) == 6 and len(rec["curves"]["bytes_up"]) == 6
    assert rec["curves"]["bytes_up"][0] > 0 and rec["bytes_per_round"] > 0
    prov = rec["provenance"]
    for key in ("artifact_hash", "artifact_recipe", "protocol", "git_sha", "versions", "device", "config_hash"):
        assert key in prov
    assert 0 <= rec["best_round"] < 6 and len(rec["per_client"]["test/accuracy"]) == 3


def test_checkpoint_resume_gives_same_numbers(tiny_fed, tmp_path, monkeypatch):
    full = Engine(_cfg(tmp_path, checkpoint_every=2), fed=tiny_fed).run()
    engine = Engine(_cfg(tmp_path, checkpoint_every=2), fed=tiny_fed)
    original = engine.algo_cls.aggregate
    calls = {"n": 0}

    def crash(self, uploads, rnd):
        if rnd == 4:
            raise KeyboardInterrupt  # a kill in the middle of round 4
        calls["n"] += 1
        return original(self, uploads, rnd)

    monkeypatch.setattr(engine.algo_cls, "aggregate", crash)
    with pytest.raises(KeyboardInterrupt):
        engine.run()
    assert (tmp_path / "ckpt").exists() and any((tmp_path / "ckpt").iterdir())
    monkeypatch.setattr(engine.algo_cls, "aggregate", original)
    resumed = Engine(_cfg(tmp_path, checkpoint_every=2), fed=tiny_fed).run()
    assert resumed["metrics"] == full["metrics"]
    assert resumed["curves"]["round"] == list(range(6))
    assert not any((tmp_path / "ckpt").iterdir())  # cleaned up after the cell ends


def test_nan_loss_becomes_failed_record(tiny_fed, tmp_path, monkeypatch):
    engine = Engine(_cfg(tmp_path), fed=tiny_fed)
    original = engine.task.loss
    count = {"n": 0}

    def loss(model, client):
        count["n"] += 1
        value = original(model, client)
        return value * float("nan") if count["n"] > 10 else value

    monkeypatch.setattr(engine.task, "loss", loss)
    rec = engine.run()
    assert rec["status"] == "failed"
    assert rec["error"]["round"] == 1 and "non-finite" in rec["error"]["reason"]


def test_audit_fails_a_leaking_algorithm(tiny_fed, tmp_path):
    @R.ALGORITHMS.register("_leaky_test")
    class Leaky(ModelAlgorithm):
        """Uploads its raw text features."""

        def init_server(self):
            return {}

        def client_update(self, client, state, received, rnd):
            return {"x": client.features["text"].clone()}

        def aggregate(self, uploads, rnd):
            return {}

        def evaluate(self, client, state, received):
            model, _ = self.client_model(state)
            return self.ctx.task.evaluate(model, client)

    try:
        cfg = build_run_config({"algorithm": {"name": "_leaky_test"}, "model": {"hidden": 8}, "train": {"rounds": 2}})
        rec = Engine(cfg, fed=tiny_fed).run()
        assert rec["status"] == "failed" and "raw feature rows" in rec["error"]["reason"]
    finally:
        R.ALGORITHMS.unregister("_leaky_test")


def test_early_stopping(tiny_fed, tmp_path):
    rec = Engine(_cfg(tmp_path, rounds=40, patience=2, lr=0.0), fed=tiny_fed).run()
    assert rec["rounds_run"] <= 4  # a frozen model never improves after round 0


def test_personalized_local_sends_nothing(tiny_fed, tmp_path):
    cfg = build_run_config({"algorithm": {"name": "local"}, "model": {"hidden": 16}, "train": {"rounds": 3}})
    rec = Engine(cfg, fed=tiny_fed).run()
    assert rec["status"] == "ok" and rec["comm"]["bytes_up"] == 0 and rec["algorithm"]["personalized"]


def test_cuda_request_without_cuda_is_clear_error(tiny_fed):
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    from benchmark.errors import BenchmarkError

    with pytest.raises(BenchmarkError, match="CUDA is not available"):
        Engine(build_run_config({"train": {"device": "cuda"}}), fed=tiny_fed)


def test_non_finite_upload_check_names_the_first_bad_entry():
    from benchmark.engine import _non_finite_key
    from devices import test_device

    dev = test_device()
    ok = {"a": torch.ones(3, device=dev), "n": torch.tensor([2], device=dev)}
    assert _non_finite_key(ok) is None and _non_finite_key({}) is None
    bad = {**ok, "b": torch.tensor([1.0, float("nan")], device=dev), "c": torch.tensor([float("inf")], device=dev)}
    assert _non_finite_key(bad) == "b"


def test_record_carries_the_measured_availability_of_each_modality(tiny_fed, tmp_path):
    cfg = build_run_config({"train": {"rounds": 1}, "model": {"hidden": 8},
                            "output": {"checkpoint_dir": str(tmp_path / "ckpt")}})
    rec = Engine(cfg, fed=tiny_fed).run()
    n = sum(c.num_nodes for c in tiny_fed.clients)
    for j, m in enumerate(tiny_fed.modalities):
        held = sum(int(c.available[:, j].sum()) for c in tiny_fed.clients)
        assert rec["availability"][m] == round(held / n, 4)
    assert 0.7 < rec["availability"]["text"] < 0.9  # the fixture keeps each modality with p = 0.8
