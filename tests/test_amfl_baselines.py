"""AMFL supernet baselines: the supernet follows Appendix B.1.3's merge rules, and HeteroFL
w/ mask beats Local where sharing helps (one label space, scarce data)."""

from __future__ import annotations

import math

import pytest
import torch

from baselines.amfl.supernet import Supernet, spec_payload
from benchmark.amfl import AMFLNet, ArchSpec, BlockSpec
from benchmark.amfl.client import AMFLClientData
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.registry import load_plugins
from amfl_sharing import sharing_acc

load_plugins()
DIMS = {"image": 64, "signal": 40}
TOKENS = {"image": 8, "signal": 8}


def _client(cid: int, spec: ArchSpec, classes: int = 4) -> AMFLClientData:
    n = 3
    return AMFLClientData(cid=cid, global_ids=torch.arange(n), features={m: torch.zeros(n, DIMS[m]) for m in
                                                                         spec.modalities},
                          available=torch.ones(n, len(spec.modalities), dtype=torch.bool),
                          edge_index=torch.empty(2, 0, dtype=torch.long), y=torch.zeros(n, dtype=torch.long),
                          train_mask=torch.ones(n, dtype=torch.bool), val_mask=torch.zeros(n, dtype=torch.bool),
                          test_mask=torch.zeros(n, dtype=torch.bool), num_classes=classes, arch=spec,
                          token_dims=dict(TOKENS))


def test_supernet_merges_widths_depths_and_families():
    trunk = BlockSpec.make("mlp", widths=[64, 32])
    shallow = ArchSpec((("image", BlockSpec.make("mlp", widths=[32])),), None, trunk)
    deep_wide = ArchSpec((("image", BlockSpec.make("mlp", widths=[64, 32])),
                          ("signal", BlockSpec.make("mlp", widths=[32]))), BlockSpec.make("concat"), trunk)
    attn = ArchSpec((("image", BlockSpec.make("attn", depth=1, width=32)),
                     ("signal", BlockSpec.make("mlp", widths=[32]))), BlockSpec.make("avg_align"), trunk)
    clients = [_client(0, shallow), _client(1, deep_wide, 5), _client(2, attn)]
    net = Supernet.from_uploads({c.cid: spec_payload(c) for c in clients}, DIMS, torch.Generator().manual_seed(0),
                                torch.device("cpu"))
    t = net.tensors
    assert t["encoders.image.mlp.layers.0.weight"].shape == (64, 64)      # rule 1: widest first layer
    assert t["encoders.image.mlp.layers.1.weight"].shape == (32, 64)      # rule 2: the deepest client's layer
    assert "encoders.image.attn.layers.0.qkv.weight" in t                 # rule 3: a channel per family
    assert t["trunk.layers.0.weight"].shape == (64, 64)                  # concat of two 32-wide encoders
    assert "fusion.avg_align.proj.signal.weight" in t and t["head.linear.weight"].shape == (5, 32)
    for c in clients:   # every client's slice has exactly its own shapes, and holds only its own channel
        model = AMFLNet(c.arch, DIMS, TOKENS, c.num_classes)
        sl = net.extract(c.cid)
        assert {n: tuple(p.shape) for n, p in model.named_parameters()} == {n: tuple(v.shape) for n, v in sl.items()}
    held = net.masks(0)
    assert held["encoders.image.mlp.layers.0.weight"][:32].all() and not held["encoders.image.mlp.layers.0.weight"][32:].any()
    assert not held["encoders.image.attn.layers.0.qkv.weight"].any()


@pytest.mark.parametrize("algo, rounds, lr, margin", [
    ("amfl_heterofl", 15, 0.01, 0.2),    # seed 0: 0.488 against Local's 0.138 (15 rounds)
    ("fedmbridge", 100, 0.1, 0.1),       # 0.388 against 0.175 (100 rounds): it gets there, slowly
    ("amfl_hyperpfl", 100, 0.1, 0.05),   # 0.288 against 0.175
])
def test_beats_local_where_sharing_helps(algo, rounds, lr, margin):
    """Local gets the same rounds (at its own Adam learning rate, 0.01); the population is
    ``amfl_sharing.sharing_acc``'s."""
    assert sharing_acc(algo, rounds, lr) > sharing_acc("amfl_local", rounds, 0.01) + margin


def test_feddistill_public_set_is_a_flagged_disclosure_and_distillation_moves_the_trunk():
    from benchmark.comm import Ledger, RawDataFingerprint, disclosed

    cfg = build_run_config({
        "dataset": {"name": "av_digits"}, "task": {"name": "amfl_cls"}, "missing": {"name": "none"},
        "partition": {"name": "amfl_population", "num_clients": 6, "samples_mean": 40, "samples_std": 0.0},
        "algorithm": {"name": "amfl_feddistill"},
        "train": {"rounds": 2, "local_epochs": 1, "lr": 0.01, "device": "cpu"}})
    engine = Engine(cfg)
    rec = engine.run()
    assert rec["status"] == "ok" and rec["comm"]["violations"] == []
    # one client of each modality combination (5% of 2, rounded up) sent 5% of its training rows
    groups = {tuple(sorted(c.features)) for c in engine.clients}
    senders = {int(d.split("client ")[1].split(":")[0]) for d in rec["comm"]["disclosures"]}
    assert len(senders) == len(groups) and all("raw feature rows" in d for d in rec["comm"]["disclosures"])
    assert {n for n in rec["comm"]["upload_names"] if n.startswith("public.")} == {"public.image", "public.signal"}
    algo = engine.sim.algo
    want = sum(math.ceil(0.05 * c.num_train) for c in engine.clients if c.cid in senders)   # 2 rows each (of 24)
    assert sum(next(iter(p.values())).shape[0] for p in algo.public) == want
    # the same rows under a name not declared as a disclosure fail the audit
    c = engine.clients[0]
    row = {"w.leak": next(iter(c.features.values()))[:2].clone()}
    ledger = Ledger()
    assert ledger.audit_upload(0, c.cid, row, RawDataFingerprint(c), (r"w\..+",))
    assert not Ledger().audit_upload(0, c.cid, {"public.x": row["w.leak"]}, RawDataFingerprint(c),
                                     (disclosed(r"public\..+"),))
    # one server step: the student's trunk moves towards its teachers, its personal head does not
    uploads = {cid: {"w." + n: p.detach().clone() for n, p in engine.sim.states[cid]["model"].named_parameters()}
               for cid in (0, 1, 2)}
    out = algo.aggregate(uploads, 99)
    moved = {k for k in uploads[0] if not torch.equal(out[0][k], uploads[0][k])}
    assert moved and all(k.startswith(("w.trunk", "w.encoders", "w.fusion")) for k in moved)
