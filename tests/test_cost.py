"""The engine's cost accounting (benchmark/cost.py): every record splits each round into
download, client, upload, server and other seconds that are non-negative and add up to the
round's seconds; COT weighs them as the paper does; the server's held memory is measured,
survives a resume, and is zero for a server that holds nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmark.config import build_run_config
from benchmark.cost import MIB, OTHER, PAPER_COT, STAGES, CostLog, ExchangeTiming, RoundTimer, held_tensor_bytes
from benchmark.engine import Engine
from small_configs import crash_and_resume, tiny_config

AMFL = ("amfl_local", "amfl_feddistill", "amfl_heterofl", "amfl_hyperpfl", "fedmbridge")
TOL = 1e-9


@pytest.fixture(scope="module")
def amfl_runs(tmp_path_factory) -> dict[str, tuple[dict, Engine]]:
    """One 3-round run of every AMFL method on the tiny population: (record, engine)."""
    cache = tmp_path_factory.mktemp("amfl_cost")
    out = {}
    for algo in AMFL:
        engine = Engine(tiny_config(algo, "amfl_cls", cache, rounds=3))
        out[algo] = (engine.run(), engine)
    return out


def check_cost(rec: dict) -> None:
    """The cost parts of a record: present for every round, non-negative, adding up to the round."""
    assert rec["status"] == "ok", rec["error"]
    cost = rec["cost"]
    per = cost["rounds"]
    assert per["round"] == rec["curves"]["round"]
    seconds = rec["curves"]["seconds"]
    for i, sec in enumerate(seconds):
        parts = {k: per[k][i] for k in (*STAGES, OTHER)}
        assert all(v >= 0 for v in parts.values()), parts
        assert sum(parts[k] for k in STAGES) <= sec + TOL
        assert sum(parts.values()) == pytest.approx(sec, rel=1e-9, abs=TOL)
        assert per["cot_s"][i] == pytest.approx(0.46 * parts["download_s"] + 0.46 * parts["upload_s"]
                                                + 0.08 * parts["server_s"], rel=1e-12)
    for k in (*STAGES, OTHER, "cot_s"):
        assert cost[k] == pytest.approx(float(np.median(per[k]))) and cost[k] <= rec["seconds_per_round"] + TOL
    assert sum(cost[k] for k in (*STAGES, OTHER)) == pytest.approx(rec["seconds_per_round"], rel=0.5)
    assert cost["bytes_down"] == float(np.median(rec["curves"]["bytes_down"]))
    assert cost["bytes_up"] == float(np.median(rec["curves"]["bytes_up"]))
    assert cost["cot_weights"] == {"download_s": 0.46, "upload_s": 0.46, "server_s": 0.08}
    assert rec["server_memory_mb"] >= 0


@pytest.mark.parametrize("algo", AMFL)
def test_every_amfl_method_records_cost_parts_within_its_rounds(amfl_runs, algo):
    rec, _ = amfl_runs[algo]
    check_cost(rec)
    assert rec["cost"]["channel"] == "LocalChannel"
    assert rec["cost"]["client_s"] > 0  # every method trains on its clients
    assert rec["cost"]["server_s"] > 0  # the aggregate hook runs, even when it returns nothing


def test_local_server_holds_nothing_and_fedmbridge_holds_its_hypernetwork(amfl_runs):
    local, _ = amfl_runs["amfl_local"]
    bridge, engine = amfl_runs["fedmbridge"]
    assert local["server_memory_mb"] == 0.0
    algo = engine.sim.algo
    tahn = sum(p.numel() * p.element_size() for p in algo.tahn.parameters())
    thetas = sum(p["theta"].numel() * p["theta"].element_size() for p in engine.sim.broadcast.values())
    # TAHN weights, their gradients and Adam's two moments, and every client's theta_i
    assert bridge["server_memory_mb"] * MIB >= 4 * tahn + thetas
    assert bridge["server_memory_mb"] > local["server_memory_mb"]


def test_a_graph_algorithm_records_cost_too(tiny_fed, tmp_path):
    cfg = build_run_config({"algorithm": {"name": "fedavg"}, "model": {"hidden": 16},
                            "train": {"rounds": 4, "lr": 0.01}, "output": {"checkpoint_dir": str(tmp_path)}})
    engine = Engine(cfg, fed=tiny_fed)
    rec = engine.run()
    check_cost(rec)
    model = sum(p.numel() * p.element_size() for p in engine.sim.algo.global_model.parameters())
    assert rec["server_memory_mb"] * MIB >= model > 0


def test_a_resumed_run_keeps_the_rounds_timed_before(tiny_fed, tmp_path, monkeypatch):
    cfg = build_run_config({"algorithm": {"name": "fedavg"}, "model": {"hidden": 16},
                            "train": {"rounds": 6, "lr": 0.01, "checkpoint_every": 2},
                            "output": {"checkpoint_dir": str(tmp_path / "ckpt")}})
    rec = crash_and_resume(cfg, tiny_fed, monkeypatch)
    assert rec["cost"]["rounds"]["round"] == list(range(6))
    check_cost(rec)


def test_round_timer_charges_encoding_to_download_and_decoding_to_upload():
    timer = RoundTimer(torch.device("cpu"))
    timer.parts["client_s"] = 1.0  # the exchange's wall time
    timer.split_exchange(ExchangeTiming(encode_s=0.2, decode_s=0.1, client_s=0.5))
    assert timer.parts == pytest.approx({"download_s": 0.2, "client_s": 0.5, "upload_s": 0.1, "server_s": 0.0})
    timer = RoundTimer(torch.device("cpu"))
    timer.parts["client_s"] = 1.0
    timer.split_exchange(ExchangeTiming(encode_s=0.2, decode_s=0.1))  # no client clock: the rest is theirs
    assert timer.parts["client_s"] == pytest.approx(0.7)
    log = CostLog()
    log.add_round(0, timer, 1.25, 10, 20)
    assert log.parts[OTHER] == [pytest.approx(0.25)]
    assert log.summary("X")["cot_s"] == pytest.approx(PAPER_COT.of(timer.parts))


def test_round_timer_stages_measure_the_work_inside_them():
    timer = RoundTimer(torch.device("cpu"))
    with timer.stage("server_s"):
        sum(i * i for i in range(200_000))
    assert timer.parts["server_s"] > 0 and timer.parts["download_s"] == 0.0


def test_held_tensor_bytes_counts_each_storage_once_through_any_path():
    a = torch.zeros(100)  # 400 bytes
    model = torch.nn.Linear(4, 2)  # 8 + 2 floats = 40 bytes
    model(torch.ones(1, 4)).sum().backward()  # gradients: another 40
    opt = torch.optim.Adam(model.parameters())
    opt.step()  # two moments per parameter (80) and two 4-byte step counters

    class Holder:
        def __init__(self) -> None:
            self.view = a[10:20]
            self.same = a
            self.table = {1: [a, (a,)]}
            self.me = self  # a cycle
            self.array = np.zeros(10, dtype=np.float64)  # 80
            self.array_view = self.array[2:]

    assert held_tensor_bytes(Holder()) == 400 + 80
    assert held_tensor_bytes(model) == 80
    assert held_tensor_bytes(model, opt) == 80 + 80 + 8
    assert held_tensor_bytes({}, [], None, "text", math.pi) == 0


def test_flower_channel_times_its_encoding_apart_from_the_clients(tmp_path):
    pytest.importorskip("flwr")
    from benchmark.backends.flower_app import FlowerChannel, make_client_app
    from benchmark.federation import build_federation
    from flower_loop import LoopGrid

    cfg = tiny_config("fedavg", "node_cls", tmp_path / "cache", rounds=2)
    fed = build_federation(cfg)
    grid = LoopGrid(make_client_app(lambda c, pid: (fed.clients[pid], fed.meta())), fed.num_clients)
    rec = Engine(cfg, channel=lambda eng: FlowerChannel(grid, eng, fed.num_clients)).run(resume=False)
    check_cost(rec)
    per = rec["cost"]["rounds"]
    assert rec["cost"]["channel"] == "FlowerChannel"
    assert all(per["download_s"][i] > 0 and per["upload_s"][i] > 0 and per["client_s"][i] > 0 for i in range(2))


def test_cost_suite_runs_table2s_cells_with_fewer_rounds():
    """fedmbridge_cost's caption says its data are fedmbridge_table2's: the same methods,
    learning rates and scale settings but the rounds, over 5 seeds."""
    from benchmark.sweep import load_suite

    cost, table2 = load_suite("fedmbridge_cost"), load_suite("fedmbridge_table2")
    assert cost.spec["grid"] == table2.spec["grid"] and cost.spec["base"] == table2.spec["base"]
    for scale in ("tiny", "small"):
        ours, theirs = dict(cost.spec["scales"][scale]), dict(table2.spec["scales"][scale])
        assert ours.pop("train.rounds") < theirs.pop("train.rounds")
        theirs.pop("train.patience", None)  # Table 2 stops early; the cost suite times a fixed 8 rounds
        assert ours == theirs
        cells = cost.cells(scale)  # builds and validates every config
        assert len({c.cell_id for c in cells}) == len(cells) == 7 * 5
    assert {p["kind"] for p in cost.spec["plots"]} == {"stacked_bar"}
