"""Loaders for the FedMBridge paper's datasets in public or declared file formats.

* ``avmnist``: AV-MNIST as MultiBench distributes it: a folder ``avmnist/`` with
  ``image/{train,test}_data.npy`` (28x28 digits, 784 values a row or [N, 28, 28]),
  ``audio/{train,test}_data.npy`` (112x112 spectrograms) and ``{train,test}_labels.npy``.
  Pixels are scaled by 1/255 as MultiBench does; spectrograms are average-pooled by
  ``audio_pool`` (default 4: 28x28) to keep the encoders small. The official train/test
  split is pooled: the AMFL population deals each client its own splits.
* ``amfl_features``: pre-extracted features of NYU-v2 (rgb, depth), ModelNet40 (view1,
  view2) or CMU-MOSEI (video, language, audio), as the paper's simulations use them: one
  ``<source>.npz`` with a float array per modality ([N, d]) and an integer ``labels`` [N].
  Every array is read with ``allow_pickle=False``; nothing in a file can run code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from benchmark.errors import DataError
from benchmark.registry import DATASETS
from data_prep.amfl.source import AMFLSource
from data_prep.datasets.sources import UNREADABLE, candidate_paths, file_present
from data_prep.safe_npy import load_npy, load_npz

FEATURE_SOURCES = {"nyuv2": ("rgb", "depth"), "modelnet40": ("view1", "view2"),
                   "cmu_mosei": ("video", "language", "audio")}


def _find(name: str, dataset_dir: str, root: Path | None, folder: bool = False) -> Path:
    """The first data root's ``name`` (a file, or with ``folder`` a directory); something there
    that is not what is looked for is a DataError naming it, never a reason to try the next root."""
    for cand in candidate_paths(name, dataset_dir, root):
        if not folder:
            if file_present(cand):
                return cand
            continue
        if cand.is_dir():
            return cand
        if cand.is_symlink() or cand.exists():
            raise DataError(f"data folder {cand} is not a readable directory; "
                            "fix or remove it (other data roots are not searched for it)")
    raise DataError(f"{name} not found under the data roots (dataset.root, $FEDMM_DATA_ROOT, the mirror); "
                    f"looked in {dataset_dir}/")


def _npy(path: Path) -> np.ndarray:
    try:
        return load_npy(path)
    except UNREADABLE as e:
        raise DataError(f"{path}: not a readable numpy array file ({type(e).__name__}: {e})") from None


def _labels(y: np.ndarray, where: str, n: int) -> torch.Tensor:
    y = np.asarray(y).reshape(-1)
    if y.shape[0] != n or not np.issubdtype(y.dtype, np.integer) or (y < 0).any():
        raise DataError(f"{where}: labels must be {n} non-negative integers, got {y.dtype} {y.shape}")
    return torch.from_numpy(y.astype(np.int64))


@DATASETS.register("avmnist")
class AVMNIST:
    """AV-MNIST in MultiBench's layout (image 28x28 + audio spectrogram), the paper's Mnist AMF source."""

    @dataclass
    class Config:
        audio_pool: int = field(default=4, metadata={"help": "average-pool the 112x112 spectrograms by this factor",
                                                     "min": 1, "max": 112})

    def __init__(self, cfg: "AVMNIST.Config | None" = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> AMFLSource:
        base = _find("avmnist", "", root, folder=True)
        images, audios, labels = [], [], []
        for split in ("train", "test"):
            img = _npy(base / "image" / f"{split}_data.npy").astype(np.float32).reshape(-1, 784) / 255.0
            aud = _npy(base / "audio" / f"{split}_data.npy").astype(np.float32) / 255.0
            side = int(round(np.sqrt(aud[0].size)))
            if side * side != aud[0].size or side % self.cfg.audio_pool:
                raise DataError(f"{base}/audio/{split}_data.npy: rows of {aud[0].size} values are not square "
                                f"spectrograms divisible by audio_pool {self.cfg.audio_pool}")
            p = self.cfg.audio_pool
            aud = aud.reshape(-1, side // p, p, side // p, p).mean(axis=(2, 4)).reshape(len(aud), -1)
            y = _labels(_npy(base / f"{split}_labels.npy"), f"{base}/{split}_labels.npy", len(img))
            if len(aud) != len(img):
                raise DataError(f"{base}: {split} has {len(img)} images but {len(aud)} spectrograms")
            images.append(img)
            audios.append(aud)
            labels.append(y)
        audio = np.concatenate(audios)
        return AMFLSource(name="avmnist", features={"image": torch.from_numpy(np.concatenate(images)),
                                                    "audio": torch.from_numpy(audio)},
                          y=torch.cat(labels), num_classes=10,
                          token_dims={"image": 28, "audio": int(round(np.sqrt(audio.shape[1])))},
                          caption="AV-MNIST (MultiBench files): MNIST digit images with spoken-digit spectrograms")


@DATASETS.register("amfl_features")
class AMFLFeatures:
    """Pre-extracted features of NYU-v2, ModelNet40 or CMU-MOSEI (one .npz: an array per modality + labels)."""

    @dataclass
    class Config:
        source: str = field(default="modelnet40", metadata={"help": "which paper dataset the file holds",
                                                            "choices": tuple(FEATURE_SOURCES)})

    def __init__(self, cfg: "AMFLFeatures.Config | None" = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> AMFLSource:
        name = self.cfg.source
        path = _find(f"{name}.npz", "amfl", root)
        try:
            with load_npz(path) as z:
                arrays = {k: z[k] for k in z.files}
        except UNREADABLE as e:
            raise DataError(f"{path}: not a readable .npz archive ({type(e).__name__}: {e})") from None
        want = FEATURE_SOURCES[name]
        missing = [m for m in (*want, "labels") if m not in arrays]
        if missing:
            raise DataError(f"{path}: no array '{missing[0]}' (a {name} file holds {', '.join(want)} and labels)")
        feats = {}
        for m in want:
            x = arrays[m]
            if x.ndim != 2 or not np.issubdtype(x.dtype, np.number) or not np.isfinite(x).all():
                raise DataError(f"{path}[{m}]: expected a finite 2-D feature matrix, got {x.dtype} {x.shape}")
            feats[m] = torch.from_numpy(x.astype(np.float32))
        y = _labels(arrays["labels"], f"{path}[labels]", len(next(iter(feats.values()))))
        for m, x in feats.items():
            if x.shape[0] != y.numel():
                raise DataError(f"{path}[{m}]: {x.shape[0]} rows, but {y.numel()} labels")
        return AMFLSource(name=name, features=feats, y=y, num_classes=int(y.max()) + 1,
                          caption=f"{name} pre-extracted features ({', '.join(want)})")
