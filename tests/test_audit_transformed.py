"""The upload audit sees raw feature rows through transposition, reshaping, rescaling and
small perturbations (|cosine| > 0.9999 with a raw row, at a norm within 4x of its own), not
only byte-identical copies, and stays silent on what algorithms legitimately send: weights,
gradient steps, means over two or more rows.

Before: only exact row hashes were compared, so the raw matrix transposed, flattened or
times 1.0000001 passed the audit (and with it ``submit``). False positives over every
registered algorithm are measured by ``tests/test_every_algorithm_tiny.py``.
"""

from __future__ import annotations

import time

import pytest
import torch

from benchmark import comm
from benchmark import registry as R
from benchmark.algorithm import ModelAlgorithm
from benchmark.comm import Ledger, RawDataFingerprint, audit_findings
from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.federation import ClientData


def _client(n: int = 60, dims: dict[str, int] | None = None, seed: int = 0) -> ClientData:
    g = torch.Generator().manual_seed(seed)
    dims = dims or {"text": 32, "image": 16, "tiny": 4}
    feats = {m: torch.randn(n, d, generator=g) for m, d in dims.items()}
    return ClientData(cid=0, global_ids=torch.arange(n), features=feats,
                      available=torch.ones(n, len(dims), dtype=torch.bool), edge_index=torch.zeros(2, 0, dtype=torch.long),
                      y=torch.arange(n) % 3, train_mask=torch.ones(n, dtype=torch.bool),
                      val_mask=torch.zeros(n, dtype=torch.bool), test_mask=torch.zeros(n, dtype=torch.bool), num_classes=3)


@pytest.fixture(scope="module")
def client() -> ClientData:
    return _client()


@pytest.fixture(scope="module")
def raw(client: ClientData) -> RawDataFingerprint:
    return RawDataFingerprint(client)


def _found(raw: RawDataFingerprint, t: torch.Tensor) -> list[str]:
    return audit_findings(0, 0, {"up": t}, raw, None)


def _noise(shape: tuple[int, ...], scale: float, seed: int = 1) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


LEAKS = {
    "transposed": lambda x: x.T.contiguous(),
    "flattened": lambda x: x.flatten(),
    "transposed then flattened": lambda x: x.T.flatten(),
    "reshaped to another width": lambda x: x.reshape(-1, 8),
    "times 1.0000001": lambda x: x * 1.0000001,
    "transposed times 1.0000001": lambda x: (x * 1.0000001).T.contiguous(),
    "plus small noise": lambda x: x + _noise(tuple(x.shape), 1e-3),
    "flattened plus small noise": lambda x: (x + _noise(tuple(x.shape), 1e-3)).flatten(),
    "negated": lambda x: -x,
    "scaled by 3": lambda x: 3 * x,
    "float16": lambda x: x.half(),
    "float64": lambda x: x.double() * 1.0000001,
    "one row among random ones": lambda x: torch.cat([_noise((5, x.shape[1]), 1.0), x[7:8] * 1.0000001]),
    "one row, 1-D": lambda x: x[11] * 1.0000001,
    "3-D, feature axis first": lambda x: x[:12].reshape(3, 4, -1).permute(2, 0, 1).contiguous() * 1.0000001,
    "mean of a one-member class": lambda x: x[13:14].mean(dim=0) * 1.0000001,
}


@pytest.mark.parametrize("how", sorted(LEAKS))
@pytest.mark.parametrize("modality", ["text", "image"])
def test_transformed_raw_rows_are_flagged(how: str, modality: str, client, raw) -> None:
    found = _found(raw, LEAKS[how](client.features[modality]))
    assert len(found) == 1 and "payload 'up' contains raw feature rows" in found[0], found


def test_exact_copies_are_named_plainly_and_the_old_hash_semantics_hold(client, raw) -> None:
    x = client.features["text"]
    assert _found(raw, x[3:7].clone()) == ["round 0, client 0: payload 'up' contains raw feature rows"]
    assert _found(raw, x.T.contiguous()) == ["round 0, client 0: payload 'up' contains raw feature rows (transposed)"]
    near = _found(raw, x * 1.0000001)[0]
    assert "(rows, |cosine| " in near and "with a 32-wide raw row)" in near
    # a mean over one row is that row: the exact audit always failed it, and still does
    assert _found(raw, x[5:6].mean(dim=0, keepdim=True))


def test_narrow_modalities_are_matched_bit_for_bit_in_every_orientation(client, raw) -> None:
    """Below 8 columns a cosine match is not rare by chance; copies are still caught."""
    x = client.features["tiny"]
    assert _found(raw, x.T.contiguous()) and _found(raw, x.flatten()) and _found(raw, x[:3].clone())
    assert _found(raw, x * 1.0000001) == []


LEGIT = {
    "random weights [h, d]": lambda c: _noise((64, 32), 0.1),
    "random weights [d, h]": lambda c: _noise((32, 64), 0.1),
    "random weights [d, d]": lambda c: _noise((16, 16), 0.1),
    "random 3-D kernel": lambda c: _noise((4, 32, 16), 0.1),
    "random bias": lambda c: _noise((32,), 0.1),
    "means of pairs of rows": lambda c: (c.features["text"][0::2] + c.features["text"][1::2]) / 2,
    "class means": lambda c: torch.stack([c.features["text"][c.y == k].mean(0) for k in range(3)]),
    "mean of all rows, flattened": lambda c: c.features["image"].mean(0),
    "all-ones rows": lambda c: torch.ones(10, 32),
    "zeros": lambda c: torch.zeros(10, 16),
    "near-constant rows (a LayerNorm scale)": lambda c: 1 + _noise((4, 32), 1e-3),
    "peaked softmax rows": lambda c: torch.softmax(_noise((20, 32), 1.0) + 30 * torch.eye(32)[:20], dim=1),
    "a gradient-sized step along raw rows": lambda c: -0.005 * c.features["text"][:6],
}


@pytest.mark.parametrize("what", sorted(LEGIT))
def test_legitimate_uploads_are_not_flagged(what: str, client, raw) -> None:
    assert _found(raw, LEGIT[what](client)) == []


def test_a_single_sample_gradient_step_is_not_a_leak(client, raw) -> None:
    """A first-layer update from one sample is that sample's row times lr x its output
    gradient (HyperPFL's deltas come within |cosine| 0.99984 of raw rows, at ~0.005 of their
    norm): gradient descent, not a copy, so a cosine match needs the row's own scale."""
    x = client.features["text"][:1]
    layer = torch.nn.Linear(32, 8)
    before = layer.weight.detach().clone()
    layer(x).pow(2).sum().backward()
    with torch.no_grad():
        layer.weight -= 0.01 * layer.weight.grad
    delta = layer.weight.detach() - before
    cos = torch.nn.functional.cosine_similarity(delta, x, dim=1).abs()
    assert (cos > comm.COSINE_MATCH).all()  # every row points exactly along the raw row
    assert _found(raw, delta) == []
    assert _found(raw, 0.3 * x) and _found(raw, 3 * x) and _found(raw, 0.2 * x) == []


def test_degenerate_raw_rows_match_exactly_only() -> None:
    """A near one-hot or near-constant raw row would point like many legitimate vectors: the
    cosine test leaves it out, the bit-for-bit match keeps it."""
    c = _client(n=20, dims={"text": 32})
    x = c.features["text"]
    x[0] = 0.0
    x[0, 5] = 1.0            # one-hot
    x[1] = 1.0
    x[1, 0] = 1.001          # near-constant
    raw = RawDataFingerprint(c)
    peaked = torch.zeros(32)
    peaked[5], peaked[6] = 1.0, 1e-4
    assert _found(raw, peaked) == [] and _found(raw, 1 + _noise((32,), 1e-5)) == []
    assert _found(raw, x[0].clone()) and _found(raw, x[1].clone())
    assert _found(raw, x[2:] * 1.0000001)  # the informative rows still match by cosine


def test_unavailable_rows_are_not_raw_rows() -> None:
    c = _client(n=20, dims={"text": 32})
    c.available[:10, 0] = False  # features of unavailable rows are fill values in real data; here noise
    raw = RawDataFingerprint(c)
    assert _found(raw, c.features["text"][:10] * 1.0000001) == []
    assert _found(raw, c.features["text"][10:] * 1.0000001)


def test_work_is_bounded_and_a_sampled_comparison_still_finds_a_whole_leak() -> None:
    c = _client(n=5000, dims={"text": 16, "image": 128})
    raw = RawDataFingerprint(c)
    x = c.features["text"]
    assert x.shape[0] ** 2 > comm.COSINE_MAX_PRODUCTS  # the leak below is compared on a sample
    assert _found(raw, x.T.contiguous() * 1.0000001)
    assert _found(raw, (c.features["image"] * 1.0000001).flatten())
    big = _noise((2_000_000,), 0.1)  # a large legitimate upload against 5,000 rows of each width
    start = time.perf_counter()
    assert _found(raw, big) == []
    assert time.perf_counter() - start < 20.0
    # a single exact row inside the big upload is still found: exact matching sees every row
    big[16 * 777:16 * 778] = x[4321]
    assert _found(raw, big)


def _on(c: ClientData, device: torch.device) -> ClientData:
    return ClientData(cid=c.cid, global_ids=c.global_ids.to(device), features={m: x.to(device) for m, x in c.features.items()},
                      available=c.available.to(device), edge_index=c.edge_index.to(device), y=c.y.to(device),
                      train_mask=c.train_mask.to(device), val_mask=c.val_mask.to(device),
                      test_mask=c.test_mask.to(device), num_classes=c.num_classes)


def _verdicts(raw: RawDataFingerprint, t: torch.Tensor) -> list[str]:
    """The findings without the cosine's last digits, which may differ between devices."""
    return [f.split(", |cosine|")[0] for f in _found(raw, t)]


def test_uploads_on_the_test_device_are_audited_there_with_the_cpu_verdicts(client, raw, device) -> None:
    """A GPU upload is compared on the GPU (no copy to the host per tensor: the graph bench's
    harness overhead on an H200) and every verdict is the CPU's; run with --device cuda."""
    dev_raw = RawDataFingerprint(_on(client, device))
    for what, make in sorted(LEAKS.items()):
        for m in ("text", "image"):
            up = make(client.features[m])
            assert _verdicts(dev_raw, up.to(device)) == _verdicts(raw, up) != [], (what, m)
    for what, make in sorted(LEGIT.items()):
        assert _found(dev_raw, make(client).to(device)) == [], what
    assert "equals the client's labels" in _found(dev_raw, client.y.to(device))[0]
    one = next(iter(dev_raw.rows.values()))
    assert one.on(device) is one.on(device) and one.on(device).rows.device.type == device.type
    assert one.on(torch.device("cpu")).rows.device.type == "cpu"


def test_a_declared_disclosure_is_recorded_not_failed(client, raw) -> None:
    led = Ledger()
    assert led.audit_upload(0, 0, {"public.x": client.features["text"].T.contiguous() * 1.0000001}, raw,
                            (comm.disclosed(r"public\..+"),)) == []
    assert len(led.disclosed_uploads()) == 1 and "raw feature rows (transposed" in led.disclosed_uploads()[0]


def test_an_algorithm_uploading_transposed_scaled_features_fails_its_cell(tiny_fed) -> None:
    @R.ALGORITHMS.register("_transposing_leak_test")
    class TransposingLeak(ModelAlgorithm):
        """Uploads its raw text features transposed and scaled by 1.0000001."""

        upload_keys = ("x",)

        def init_server(self):
            return {}

        def client_update(self, client, state, received, rnd):
            return {"x": (client.features["text"] * 1.0000001).T.contiguous()}

        def aggregate(self, uploads, rnd):
            return {}

        def evaluate(self, client, state, received):
            model, _ = self.client_model(state)
            return self.ctx.task.evaluate(model, client)

    try:
        cfg = build_run_config({"algorithm": {"name": "_transposing_leak_test"}, "model": {"hidden": 8},
                                "train": {"rounds": 2}})
        rec = Engine(cfg, fed=tiny_fed).run()
        assert rec["status"] == "failed"
        assert "payload 'x' contains raw feature rows (transposed, |cosine|" in rec["error"]["reason"]
    finally:
        R.ALGORITHMS.unregister("_transposing_leak_test")


@pytest.fixture()
def screened(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-payload screen, which runs on accelerators only, run on the CPU."""
    monkeypatch.setattr(comm, "SCREEN_ON_CPU", True)


def test_the_payload_screen_clears_every_legitimate_upload_and_no_leak(client, raw, screened) -> None:
    """rows_clean (one device read-back per payload) must never clear a leak, and must clear
    the legitimate uploads, or it saves nothing; the verdicts are those of the per-tensor search."""
    for what, make in sorted(LEAKS.items()):
        for m in ("text", "image"):
            up = make(client.features[m])
            assert not raw.rows_clean({"w": _noise((8, 32), 0.1), "up": up}), (what, m)
            assert _found(raw, up), (what, m)
    for what, make in sorted(LEGIT.items()):
        assert raw.rows_clean({"up": make(client)}), what
        assert _found(raw, make(client)) == [], what
    # a bit-for-bit copy of a narrow (4-wide) row, matched only exactly, inside a legitimate payload
    tiny = client.features["tiny"]
    assert not raw.rows_clean({"w": _noise((8, 32), 0.1), "b": tiny[2].clone()})
    assert raw.rows_clean({"w": _noise((8, 32), 0.1), "b": tiny[2] * 1.0000001})


def test_the_screen_defers_to_the_search_where_it_cannot_tell(screened) -> None:
    c = _client(n=5000, dims={"text": 16})
    raw = RawDataFingerprint(c)
    x = c.features["text"]
    assert not raw.rows_clean({"up": x.T.contiguous() * 1.0000001})  # nearest would subsample: no verdict
    assert _found(raw, x.T.contiguous() * 1.0000001)
    assert raw.rows_clean({"a": _noise((4, 16), 0.1), "b": _noise((4, 16), 0.1).to(torch.float64)})
    comm.SCREEN_ON_CPU = False  # (the fixture restores it) a CPU payload is left to the search
    assert not raw.rows_clean({"up": _noise((4, 16), 0.1)})
