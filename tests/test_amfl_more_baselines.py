"""FedGKD*, APFL w/ Prune and HyperPFL w/ Prune (FedMBridge Appendix B.1): each beats Local
where sharing helps, FedGKD*'s public set is a flagged disclosure (not a violation) and its
teachers are other clients' recent models, and pruning zeroes the stated share of units in
what a client receives, trains and sends."""

from __future__ import annotations

import math

import pytest
import torch

from baselines.amfl.pruning import MASK_PREFIX, client_ratio, prunable, row_masks
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.registry import load_plugins
from amfl_sharing import sharing_acc

load_plugins()


def _engine(algo: str, rounds: int = 2, clients: int = 6, **algo_opts) -> tuple[Engine, dict]:
    cfg = build_run_config({
        "dataset": {"name": "av_digits"}, "task": {"name": "amfl_cls"}, "missing": {"name": "none"},
        "partition": {"name": "amfl_population", "num_clients": clients, "samples_mean": 40, "samples_std": 0.0},
        "algorithm": {"name": algo, **algo_opts},
        "train": {"rounds": rounds, "local_epochs": 1, "lr": 0.01, "device": "cpu"}})
    engine = Engine(cfg)
    rec = engine.run()
    assert rec["status"] == "ok" and rec["comm"]["violations"] == []
    return engine, rec


@pytest.mark.parametrize("algo, rounds, lr, margin", [
    ("amfl_apfl", 15, 0.01, 0.05),     # seed 0: 0.2375 against Local's 0.1375 (15 rounds)
    pytest.param("amfl_fedgkd", 15, 0.01, 0.05, marks=pytest.mark.xfail(strict=True, reason=(
        "measured: FedGKD* 0.150 against Local's 0.1375 at 15 rounds, 0.175 against 0.175 at 50; beta 1 or 10 "
        "does not help either (0.1125, 0.150): trunk-output distillation from clients with their own heads "
        "transfers little here. Strict: passing means the method changed; then make this a plain case"))),
])
def test_beats_local_where_sharing_helps(algo, rounds, lr, margin):
    """Same population and Local reference as the other AMFL baselines (``amfl_sharing``);
    HyperPFL w/ Prune (the default ``amfl_hyperpfl``) is checked in test_amfl_baselines.py."""
    assert sharing_acc(algo, rounds, lr) > sharing_acc("amfl_local", rounds, 0.01) + margin


@pytest.mark.parametrize("algo", ["amfl_fedgkd", "amfl_feddistill"])
def test_the_distillation_methods_beat_local_once_the_public_set_carries_something(algo):
    """On the same population, with the paper's rho = 5% the public set is one row of one
    client (8 clients, 10 training rows each): FedGKD* and FedDistill* have nothing to distill
    on (the xfail above; FedDistill* 0.1625 against Local's 0.1375). With rho = 0.5 (4 clients
    send 5 rows each) both reach 0.200 at 15 rounds, measured at seed 0."""
    local = sharing_acc("amfl_local", 15, 0.01)
    assert sharing_acc(algo, 15, 0.01, (("rho", 0.5),)) > local + 0.05


# --------------------------------------------------------------------------- FedGKD*


def test_fedgkd_public_set_is_a_flagged_disclosure_and_only_when_asked_for():
    engine, rec = _engine("amfl_fedgkd")
    groups = {tuple(sorted(c.features)) for c in engine.clients}
    senders = {int(d.split("client ")[1].split(":")[0]) for d in rec["comm"]["disclosures"]}
    assert len(senders) == len(groups) and all("raw feature rows" in d for d in rec["comm"]["disclosures"])
    algo = engine.sim.algo
    assert sum(next(iter(p.values())).shape[0] for p in algo.public) == \
        sum(math.ceil(0.05 * c.num_train) for c in engine.clients if c.cid in senders)
    _, plain = _engine("amfl_fedgkd", public_set=False)
    assert plain["comm"]["disclosures"] == []
    assert not any(n.startswith("public.") for n in plain["comm"]["upload_names"])


def test_fedgkd_teachers_are_recent_models_of_other_clients_within_each_budget():
    engine, _ = _engine("amfl_fedgkd", rounds=6, clients=8, buffer_per_round=3, memory_rounds=1)
    algo = engine.sim.algo
    assert all(4 <= b <= 8 for b in algo.budgets.values()) and len(set(algo.budgets.values())) > 1
    # 3 models a round, rounds r-1 and r kept
    assert sorted({s.rnd for s in algo.buffer}) == [4, 5] and len(algo.buffer) == 6
    for cid in algo.ctx.client_ids:
        sent = engine.sim.broadcast[cid]
        k = sum(1 for n in sent if n.endswith(".arch.spec"))
        assert k == min(algo.budgets[cid], sum(s.cid != cid for s in algo.buffer))
        for j in range(k):   # each teacher is a buffered model of another client
            w = {n[len(f"t{j}."):]: t for n, t in sent.items() if n.startswith(f"t{j}.w.")}
            match = [s for s in algo.buffer if set(s.weights) == set(w)
                     and all(torch.equal(s.weights[n], w[n]) for n in w)]
            assert match and all(s.cid != cid for s in match)


def test_fedgkd_distillation_pulls_the_trunk_towards_the_teachers():
    """Beta = 0 trains the same model as no teachers; a larger beta moves the client's trunk
    output closer to the teachers' mean on its rows."""
    from baselines.amfl.common import mean_embedding
    from baselines.amfl.fedgkd import teachers_from

    dist = {}
    for beta in (1e-9, 50.0):
        engine, _ = _engine("amfl_fedgkd", rounds=4, beta=beta)
        algo, cid = engine.sim.algo, engine.clients[0].cid
        client = engine.clients[0]
        teachers = teachers_from(engine.sim.broadcast[cid], algo.ctx.feature_dims, algo.ctx.device)
        target = mean_embedding(teachers, [client.features], algo.ctx.feature_dims, algo.ctx.device)
        with torch.no_grad():
            dist[beta] = float(torch.nn.functional.mse_loss(engine.sim.states[cid]["model"].embed(client.features),
                                                            target))
    assert dist[50.0] < 0.5 * dist[1e-9]


# --------------------------------------------------------------------------- pruning


def test_row_masks_zero_the_stated_share_of_units():
    torch.manual_seed(0)
    w = {"encoders.image.layers.0.weight": torch.randn(40, 8), "encoders.image.layers.0.bias": torch.randn(40),
         "trunk.layers.0.weight": torch.randn(10, 40), "trunk.layers.0.bias": torch.randn(10),
         "head.linear.weight": torch.randn(4, 10), "encoders.image.pos": torch.randn(6, 8)}
    masks = row_masks(w, 0.25)
    assert set(masks) == {"encoders.image.layers.0.weight", "encoders.image.layers.0.bias",
                          "trunk.layers.0.weight", "trunk.layers.0.bias"}      # not the head, not positions
    assert float((masks["encoders.image.layers.0.weight"] == 0).float().mean()) == 0.25       # 10 of 40 rows
    assert int((masks["trunk.layers.0.bias"] == 0).sum()) == round(0.25 * 10)
    norms = w["encoders.image.layers.0.weight"].norm(dim=1)
    dropped = masks["encoders.image.layers.0.bias"] == 0
    assert norms[dropped].max() <= norms[~dropped].min()                          # the smallest-norm units
    assert row_masks(w, 0.0) == {}


def _zero_rows(t: torch.Tensor) -> int:
    return int((t.abs().sum(dim=1) == 0).sum())


@pytest.mark.parametrize("algo", ["amfl_apfl", "amfl_hyperpfl"])
def test_pruning_zeroes_the_share_set_by_the_client_size(algo, monkeypatch):
    """What a client receives, and what it sends back after training, has exactly the
    stated share of each prunable matrix's units at zero (the largest client 50%)."""
    from benchmark.comm import Ledger

    seen: list[tuple[str, int, dict]] = []
    record = Ledger.record

    def spy(self, rnd, direction, cid, payload, phase="train"):
        seen.append((direction, cid, dict(payload)))
        return record(self, rnd, direction, cid, payload, phase)

    monkeypatch.setattr(Ledger, "record", spy)
    engine, _ = _engine(algo, rounds=3, prune_ratio=0.5)
    algo_ = engine.sim.algo
    sizes = {c.cid: sum(p.numel() for p in engine.sim.states[c.cid]["model"].parameters()) for c in engine.clients}
    assert max(algo_.ratios.values()) == 0.5
    checked = 0
    for direction, cid, payload in seen:
        ratio = client_ratio(sizes[cid], max(sizes.values()), 0.5)
        assert algo_.ratios[cid] == pytest.approx(ratio)
        for name, t in payload.items():
            key = name[2:]
            if direction == "down" and name.startswith("w.") and prunable(key, t):
                assert _zero_rows(t) == round(ratio * t.shape[0])
                assert int((payload[MASK_PREFIX + key].sum(dim=1) == 0).sum()) == _zero_rows(t)
                checked += 1
            if direction == "up" and name[:2] in ("w.", "d.") and prunable(key, t):
                # the trained, sent tensor (APFL: w_i; HyperPFL: Delta theta_i) keeps those units at zero
                assert _zero_rows(t) >= round(ratio * t.shape[0])
                checked += 1
    assert checked > 0
    # the mixture / generated model a client is scored with uses the pruned weights
    cid = engine.clients[0].cid
    sent = engine.sim.broadcast[cid]
    masks = {n[2:]: m for n, m in sent.items() if n.startswith(MASK_PREFIX)}
    assert masks and any((~m).any() for m in masks.values())
