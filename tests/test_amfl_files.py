"""AMFL loaders for the paper's datasets, on small generated files in their formats."""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.errors import DataError
from data_prep.amfl.files import AMFLFeatures, AVMNIST


def _avmnist(root, n=(12, 6), flat=True):
    rng = np.random.default_rng(0)
    base = root / "avmnist"
    for d in ("image", "audio"):
        (base / d).mkdir(parents=True, exist_ok=True)
    for split, k in zip(("train", "test"), n):
        img = rng.integers(0, 256, size=(k, 784) if flat else (k, 28, 28)).astype(np.uint8)
        np.save(base / "image" / f"{split}_data.npy", img)
        np.save(base / "audio" / f"{split}_data.npy", rng.integers(0, 256, size=(k, 112, 112)).astype(np.uint8))
        np.save(base / f"{split}_labels.npy", rng.integers(0, 10, size=k))
    return base


@pytest.mark.parametrize("flat", [True, False])
def test_avmnist_multibench_layout(tmp_path, flat):
    base = _avmnist(tmp_path, flat=flat)
    src = AVMNIST().load(tmp_path)
    assert src.feature_dims == {"image": 784, "audio": 784} and src.num_samples == 18
    img = np.load(base / "image" / "test_data.npy").reshape(-1, 784) / 255.0
    assert np.allclose(src.features["image"][12:].numpy(), img, atol=1e-6)
    aud = np.load(base / "audio" / "train_data.npy")[0].astype(np.float32) / 255.0
    assert np.isclose(float(src.features["audio"][0, 0]), aud[:4, :4].mean(), atol=1e-6)   # 4x4 pooling
    assert src.token_dims == {"image": 28, "audio": 28}


def test_avmnist_bad_files_are_data_errors(tmp_path):
    base = _avmnist(tmp_path)
    np.save(base / "test_labels.npy", np.array([1.5] * 6))
    with pytest.raises(DataError, match="labels must be 6 non-negative integers"):
        AVMNIST().load(tmp_path)
    (base / "audio" / "train_data.npy").write_bytes(b"\x80\x04not numpy")
    with pytest.raises(DataError, match="not a readable numpy array"):
        AVMNIST().load(tmp_path)


def test_feature_file_loader_for_each_paper_dataset(tmp_path):
    rng = np.random.default_rng(1)
    (tmp_path / "amfl").mkdir()
    np.savez(tmp_path / "amfl" / "cmu_mosei.npz", video=rng.normal(size=(9, 35)), language=rng.normal(size=(9, 300)),
             audio=rng.normal(size=(9, 74)), labels=np.arange(9) % 3)
    src = AMFLFeatures(AMFLFeatures.Config(source="cmu_mosei")).load(tmp_path)
    assert src.modalities == ["video", "language", "audio"] and src.num_classes == 3
    np.savez(tmp_path / "amfl" / "nyuv2.npz", rgb=rng.normal(size=(4, 8)), labels=np.arange(4))
    with pytest.raises(DataError, match="no array 'depth'"):
        AMFLFeatures(AMFLFeatures.Config(source="nyuv2")).load(tmp_path)
    np.savez(tmp_path / "amfl" / "modelnet40.npz", view1=rng.normal(size=(4, 8)), view2=rng.normal(size=(5, 8)),
             labels=np.arange(4))
    with pytest.raises(DataError, match=r"view2\]: 5 rows, but 4 labels"):
        AMFLFeatures().load(tmp_path)
