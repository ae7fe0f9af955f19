"""Registered algorithms as a Flower ServerApp plus ClientApps give the in-process numbers.

``run --backend flower`` (Flower's simulation engine, one virtual SuperNode per client) for
FedAvg, FedProto (personalized: per-client broadcasts) and FedE (KG track, with a setup
exchange) gives the in-process engine's metrics to 1e-6 and its ledger bytes exactly; the
Flower messages themselves carry those bytes. Protocol details (setup replies, the upload
audit on the client, no server object on a node) are checked through ``tests/flower_loop.py``,
which runs the real ClientApp without a simulation start-up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("flwr")
pytest.importorskip("ray")

from benchmark.backends.flower_app import FlowerChannel, make_client_app  # noqa: E402
from benchmark.backends.flower_codec import PAYLOAD_ARRAY, payload_to_record, record_to_payload  # noqa: E402
from fedmm_bench.cli import main  # noqa: E402
from benchmark.comm import payload_bytes  # noqa: E402
from benchmark.engine import Engine  # noqa: E402
from benchmark.errors import ConfigError  # noqa: E402
from benchmark.federation import build_federation  # noqa: E402
from benchmark.registry import load_plugins  # noqa: E402
from flower_loop import LoopGrid  # noqa: E402
from small_configs import tiny_config  # noqa: E402

load_plugins()
TOL = 1e-6


def _same(a: dict, b: dict) -> None:
    assert a["status"] == b["status"] == "ok", (a.get("error"), b.get("error"))
    assert a["metrics"].keys() == b["metrics"].keys()
    for k, v in a["metrics"].items():
        assert b["metrics"][k] == pytest.approx(v, abs=TOL), k
    for key in ("bytes_up", "bytes_down", "setup_bytes_up", "upload_names", "violations"):
        assert a["comm"][key] == b["comm"][key], key
    for curve in ("bytes_up", "bytes_down"):
        assert a["curves"][curve] == b["curves"][curve]
    assert a["best_round"] == b["best_round"] and a["availability"] == b["availability"]


@pytest.mark.parametrize(("algo", "task"), [("fedavg", "node_cls"), ("fedproto", "node_cls"),
                                            ("fede", "kg_completion"), ("fedmbridge", "amfl_cls")])
def test_run_backend_flower_equals_in_process(algo, task, tmp_path, capsys):
    cfg = tiny_config(algo, task, tmp_path / "cache", rounds=2)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    assert main(["run", str(path), "--backend", "flower", "--out", str(tmp_path / "flower.jsonl")]) == 0
    capsys.readouterr()
    flower = json.loads((tmp_path / "flower.jsonl").read_text().splitlines()[-1])
    local = Engine(cfg).run()
    assert flower["backend"] == "flower-simulation"
    _same(local, flower)
    # evaluation costs Flower one message per client (the in-process engine reads the broadcast)
    assert flower["comm"]["eval_bytes_down"] > 0 or local["comm"]["bytes_down"] == 0
    assert local["comm"]["eval_bytes_down"] == 0


def _loop(cfg, fed):  # noqa: ANN001, ANN202
    app = make_client_app(lambda c, pid: (fed.clients[pid], fed.meta()))
    grid = LoopGrid(app, fed.num_clients)
    engine = Engine(cfg, channel=lambda eng: FlowerChannel(grid, eng, fed.num_clients))
    return engine.run(resume=False), grid


def test_messages_carry_exactly_the_ledgered_bytes_and_setup_is_one_extra_round(tmp_path):
    """FedGCN: the setup exchange is one `train.setup` round; its replies ride on round 0's
    messages; every array a message carries is in the ledger, byte for byte."""
    cfg = tiny_config("fedgcn", "node_cls", tmp_path / "cache", rounds=2)
    fed = build_federation(cfg)
    record, grid = _loop(cfg, fed)
    _same(Engine(cfg, fed=fed).run(), record)
    kinds = [m.metadata.message_type for m in grid.sent]
    n = fed.num_clients
    assert kinds == ["query.meta"] * n + ["train.setup"] * n + (["train"] * n + ["evaluate"] * n) * 2
    records = [rec for m in grid.sent for rec in m.content.array_records.values()]
    assert all(list(rec.keys()) == [PAYLOAD_ARRAY] for rec in records)  # one packed array a payload
    carried = sum(payload_bytes(record_to_payload(rec, torch.device("cpu"))) for rec in records)
    ledger = record["comm"]
    assert carried == ledger["bytes_down"] + ledger["eval_bytes_down"]
    assert all("setup_reply" in m.content for m in grid.sent[2 * n:3 * n])  # round 0 carries the replies
    assert not any("setup_reply" in m.content for m in grid.sent[3 * n:])


def test_a_leak_is_caught_by_the_clients_own_audit(tmp_path):
    """The raw-data audit runs on the node that holds the data, with the same verdict."""
    from benchmark.submit import load_submission, withdraw

    sub = load_submission(Path(__file__).parent / "fixtures" / "submissions" / "leaks_features.py")
    try:
        cfg = tiny_config(sub.name, "node_cls", tmp_path / "cache", rounds=1)
        fed = build_federation(cfg)
        record, _ = _loop(cfg, fed)
        local = Engine(cfg, fed=fed).run()
    finally:
        withdraw(sub)
    assert record["status"] == local["status"] == "failed"
    assert record["error"] == local["error"] and "raw feature rows" in record["error"]["reason"]


def test_payload_record_round_trip_keeps_dtype_shape_and_bytes():
    payload = {"w": torch.randn(3, 4), "n": torch.tensor([5.0]), "ids": torch.arange(4), "mask": torch.ones(2, dtype=torch.bool),
               "d": torch.randn(2, dtype=torch.float64), "s": torch.tensor(1.5)}
    rec = payload_to_record(payload)
    assert list(rec.keys()) == [PAYLOAD_ARRAY] and rec[PAYLOAD_ARRAY].dtype == "uint8"
    back = record_to_payload(rec, torch.device("cpu"))
    assert list(back) == list(payload)
    for k, t in payload.items():
        assert back[k].dtype == t.dtype and back[k].shape == t.shape and torch.equal(back[k], t)
    assert payload_bytes(back) == payload_bytes(payload)


def test_centralized_and_checkpoints_are_clear_errors(tmp_path):
    from benchmark.backends.flower_sim import run_flower

    with pytest.raises(ConfigError, match="centralized upper bound"):
        run_flower(tiny_config("centralized", "node_cls", tmp_path / "cache"))
    cfg = tiny_config("fedavg", "node_cls", tmp_path / "cache")
    cfg.train.checkpoint_every = 1
    with pytest.raises(ConfigError, match="checkpoint_every must be 0"):
        run_flower(cfg)


def test_flower_backend_without_flwr_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(__import__("sys").modules, "flwr", None)
    assert main(["run", "--backend", "flower", "--set", f"output.cache_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "pip install -e .[scale]" in err


def test_a_payload_record_that_is_not_a_packed_payload_is_refused():
    """What a ClientApp or the ServerApp reads off a message cannot run code or pass as a
    payload unless it is the one packed array this codec writes."""
    import numpy as np
    from flwr.app import Array, ArrayRecord

    from benchmark.checkpoint import BadCheckpoint

    cpu = torch.device("cpu")
    with pytest.raises(BadCheckpoint, match="not one 'packed' array"):
        record_to_payload(ArrayRecord({"w": Array(np.zeros(3, dtype=np.float32))}), cpu)
    with pytest.raises(BadCheckpoint):
        record_to_payload(ArrayRecord({PAYLOAD_ARRAY: Array(np.frombuffer(b"\x80\x04junk", dtype=np.uint8).copy())}), cpu)


FAILING_RUN_S = 120  # a failing simulation ends, with its reason, well within this


def test_a_failing_simulation_exits_non_zero_with_its_reason_in_time(tmp_path, capsys):
    """A node whose training diverges (a learning rate of 1e30: non-finite loss on client 0)
    fails the run: `run --backend flower` returns 1 within FAILING_RUN_S (it once hung), and the
    stored record says failed, why, and which backend ran it."""
    import time

    cfg = tiny_config("fedavg", "node_cls", tmp_path / "cache", rounds=2)
    cfg.train.lr = 1e30
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    start = time.monotonic()
    assert main(["run", str(path), "--backend", "flower", "--out", str(tmp_path / "flower.jsonl")]) == 1
    assert time.monotonic() - start < FAILING_RUN_S
    capsys.readouterr()
    rec = json.loads((tmp_path / "flower.jsonl").read_text().splitlines()[-1])
    assert rec["status"] == "failed" and rec["backend"] == "flower-simulation"
    assert "non-finite training loss on client" in rec["error"]["reason"]
