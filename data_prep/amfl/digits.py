"""Offline AMFL simulations from packaged digit data (stand-ins for the paper's Mnist AMF).

Sources, both installed with the project (no download):

* ``image``: scikit-learn's 8x8 handwritten digits (1,797 images, 10 classes), scaled to
  [0, 1]; an attention adaptor reads it as 8 row tokens of 8 pixels.
* ``signal``: MNIST-1D (``mnist1d.data.make_dataset``, procedural 40-step signals built
  from one template per digit with random padding, scaling, translation, shear and
  noise), standardized; 5 tokens of 8 steps. It stands in for AV-MNIST's spoken digit.
* ``image2`` (multi-view only): a *different* 8x8 digit of the same class with a digit of
  another class overlaid at half intensity (a MultiMNIST-like second image style).

Every sample's views share its label only: the image and the signal of one sample are not
two recordings of one event, as they are in AV-MNIST. MNIST-1D is generated with its own
seed (``signal_seed``), and the global numpy / random state is restored afterwards.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from benchmark.errors import DataError
from benchmark.registry import DATASETS
from data_prep.amfl.source import AMFLSource
from benchmark.seeding import seeded_rng

AV_CAPTION = ("Mnist AMF stand-in: scikit-learn 8x8 digits (image) paired by label with procedural MNIST-1D "
              "signals (standing in for AV-MNIST audio); views share the label, not the recording")
MV_CAPTION = ("Mnist AMF stand-in, three modalities: scikit-learn 8x8 digits (style-1 image), another digit of "
              "the same class with a distractor overlaid (style-2 image, for MultiMNIST) and procedural MNIST-1D "
              "signals (for AV-MNIST audio); views share the label, not the recording")


@lru_cache(maxsize=4)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


@lru_cache(maxsize=4)
def _signals(per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``per_class`` MNIST-1D signals of every digit (global RNG state left as it was)."""
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError:
        raise DataError("the AMFL digit simulations need the 'mnist1d' package (pip install mnist1d)") from None
    args = get_dataset_args()
    args.num_samples = per_class * 10
    args.train_split = 1.0
    args.seed = seed
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        data = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    x, y = np.asarray(data["x"], dtype=np.float32), np.asarray(data["y"], dtype=np.int64)
    return (x - x.mean()) / (x.std() + 1e-8), y


def _pair_by_label(labels: np.ndarray, pool_x: np.ndarray, pool_y: np.ndarray) -> np.ndarray:
    """For each sample, a distinct row of the pool with the same label (first come, first served)."""
    out = np.empty((labels.size, pool_x.shape[1]), dtype=np.float32)
    for c in np.unique(labels):
        want = np.flatnonzero(labels == c)
        have = np.flatnonzero(pool_y == c)
        if have.size < want.size:
            raise DataError(f"MNIST-1D has {have.size} signals of digit {c}, {want.size} are needed")
        out[want] = pool_x[have[:want.size]]
    return out


def _second_style(images: np.ndarray, labels: np.ndarray, seed: int) -> np.ndarray:
    """Style-2 image of each sample: another image of its class plus half of a random
    image of another class (MultiMNIST-like overlay), clipped to [0, 1]."""
    rng = seeded_rng(seed, "amfl/image2")
    out = np.empty_like(images)
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        partner = idx[(np.arange(idx.size) + 1 + rng.integers(idx.size - 1)) % idx.size]  # never itself
        others = np.flatnonzero(labels != c)
        distractor = others[rng.integers(others.size, size=idx.size)]
        out[idx] = np.clip(images[partner] + 0.5 * images[distractor], 0.0, 1.0)
    return out


def _source(name: str, with_image2: bool, signal_seed: int) -> AMFLSource:
    images, labels = _digits()
    per_class = int(np.bincount(labels).max())
    sx, sy = _signals(per_class, signal_seed)
    feats = {"image": images}
    if with_image2:
        feats["image2"] = _second_style(images, labels, signal_seed)
    feats["signal"] = _pair_by_label(labels, sx, sy)
    tokens = {"image": 8, "image2": 8, "signal": 8}
    return AMFLSource(name=name, features={m: torch.from_numpy(x.copy()) for m, x in feats.items()},
                      y=torch.from_numpy(labels.copy()), num_classes=10,
                      token_dims={m: tokens[m] for m in feats},
                      caption=MV_CAPTION if with_image2 else AV_CAPTION,
                      meta={"signal_seed": signal_seed})


@DATASETS.register("av_digits")
class AVDigits:
    """AMFL audio-visual digits: 8x8 digit images + MNIST-1D signals of the same label (offline AV-MNIST stand-in)."""

    @dataclass
    class Config:
        signal_seed: int = field(default=42, metadata={"help": "seed of the MNIST-1D generator (a fixed dataset)",
                                                       "min": 0, "max": 2**32 - 1})

    def __init__(self, cfg: "AVDigits.Config | None" = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> AMFLSource:
        return _source("av_digits", False, self.cfg.signal_seed)


@DATASETS.register("multiview_digits")
class MultiViewDigits:
    """AMFL three-modality digits: two image styles + MNIST-1D signals of the same label (offline Mnist AMF stand-in)."""

    Config = AVDigits.Config

    def __init__(self, cfg: "AVDigits.Config | None" = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> AMFLSource:
        return _source("multiview_digits", True, self.cfg.signal_seed)
