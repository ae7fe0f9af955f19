"""Ledger: byte accounting and the raw-data audit."""

import torch

from benchmark.comm import Ledger, RawDataFingerprint, payload_bytes
from benchmark.federation import ClientData


def _client() -> ClientData:
    g = torch.Generator().manual_seed(0)
    n = 20
    return ClientData(cid=0, global_ids=torch.arange(n), features={"text": torch.randn(n, 8, generator=g),
                      "image": torch.randn(n, 6, generator=g)},
                      available=torch.ones(n, 2, dtype=torch.bool), edge_index=torch.randint(0, n, (2, 40), generator=g),
                      y=torch.randint(0, 3, (n,), generator=g), train_mask=torch.ones(n, dtype=torch.bool),
                      val_mask=torch.zeros(n, dtype=torch.bool), test_mask=torch.zeros(n, dtype=torch.bool),
                      num_classes=3)


def test_bytes_per_round():
    led = Ledger()
    p = {"w": torch.zeros(4, 5), "n": torch.zeros(1)}
    led.record(0, "up", 0, p)
    led.record(0, "down", 0, p)
    led.record(1, "up", 0, p)
    assert payload_bytes(p) == 84
    assert led.bytes_by_round() == {0: {"up": 84, "down": 84}, 1: {"up": 84, "down": 0}}


def test_audit_catches_raw_rows_labels_edges_and_undeclared():
    c = _client()
    raw = RawDataFingerprint(c)
    led = Ledger()
    # its own generator: the global one, seeded 0 by an earlier test in the same worker,
    # would draw exactly the client's first text rows (a CI run failed on that)
    innocent = torch.randn(4, 8, generator=torch.Generator().manual_seed(12345))
    assert led.audit_upload(0, 0, {"model.w": innocent}, raw, (r"model\..+",)) == []
    assert led.audit_upload(0, 0, {"model.w": c.features["text"][3:7] * 1.0}, raw, None)
    assert led.audit_upload(0, 0, {"y": c.y.clone()}, raw, None)
    assert led.audit_upload(0, 0, {"e": c.edge_index.clone()}, raw, None)
    assert led.audit_upload(0, 0, {"secret": torch.zeros(2)}, raw, (r"model\..+",))
    assert len(led.violations) == 4


def test_audit_ignores_fill_rows():
    c = _client()
    c.available[:5, 0] = False
    c.features["text"][:5] = 0.0
    raw = RawDataFingerprint(c)
    assert Ledger().audit_upload(0, 0, {"b": torch.zeros(3, 8)}, raw, None) == []


def test_row_hashes_skip_constant_rows_and_are_silent_on_empty_input():
    import warnings

    from benchmark.comm import _row_hashes

    x = torch.tensor([[0.1, 0.1, 0.1], [0.3, 0.1, 0.2], [7.0, 7.0, 7.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(_row_hashes(x)) == 1
        assert _row_hashes(torch.zeros(0, 5)) == set()
    assert _row_hashes(torch.tensor([[0.0], [2.0]])) == _row_hashes(torch.tensor([[2.0]]))
