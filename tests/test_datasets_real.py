"""The real offline datasets (``shared/data``): TikTok and FB15K-237 entity typing.

Skipped where the mirror is absent. Loads go through the default dataset cache, so the
first run on a machine builds the graphs (about 15 s together) and later runs read them
back in well under a second; the numbers the benchmark relies on are checked either way.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from benchmark.federation import GraphDataset
from data_prep.datasets.fb15k237_typing import FB15k237Typing
from data_prep.datasets.sources import MIRROR
from data_prep.datasets.tiktok import TikTok

needs_tiktok = pytest.mark.skipif(not (MIRROR / "tiktok").is_dir(), reason="shared/data/tiktok is not available")
needs_fb15k = pytest.mark.skipif(not (MIRROR / "fb15k237").is_dir(), reason="shared/data/fb15k237 is not available")


def check_undirected(ds: GraphDataset) -> torch.Tensor:
    """In range, no self-loops, no duplicates, every edge in both directions; returns degrees."""
    ei, n = ds.edge_index, ds.num_nodes
    assert ei.dtype == torch.long and ei.shape[0] == 2 and ei.shape[1] % 2 == 0
    assert int(ei.min()) >= 0 and int(ei.max()) < n
    assert not (ei[0] == ei[1]).any()
    fwd = torch.sort(ei[0] * n + ei[1]).values
    bwd = torch.sort(ei[1] * n + ei[0]).values
    assert torch.equal(fwd, bwd)
    assert torch.unique(fwd).numel() == fwd.numel()
    return torch.bincount(ei[0], minlength=n)


@pytest.fixture(scope="module")
def tiktok() -> GraphDataset:
    return TikTok().load()


@pytest.fixture(scope="module")
def typing_ds() -> GraphDataset:
    return FB15k237Typing().load()


@needs_tiktok
def test_tiktok_real(tiktok: GraphDataset) -> None:
    ds = tiktok
    assert ds.num_nodes == 6710 and ds.feature_dims == {"visual": 128, "acoustic": 128}
    assert ds.y is None and ds.num_classes == 0
    deg = check_undirected(ds).double()
    assert 4.0 <= float(deg.mean()) <= 30.0, "a sparse but connected item graph"
    assert float((deg == 0).float().mean()) < 0.15
    assert ds.available.all()
    assert all(torch.isfinite(x).all() and x.dtype == torch.float32 for x in ds.features.values())
    assert {k: v.shape[1] for k, v in ds.meta["interactions"].items()} == {"train": 59541, "val": 3051, "test": 6130}
    assert ds.meta["num_users"] == 9308
    print(f"\ntiktok: {ds.num_nodes} nodes, {ds.num_edges} edges, mean degree {deg.mean():.2f}, "
          f"median {deg.median():.0f}, max {deg.max():.0f}, isolated {int((deg == 0).sum())}")


@needs_fb15k
def test_fb15k237_typing_real(typing_ds: GraphDataset) -> None:
    ds = typing_ds
    assert ds.num_nodes > 5000 and ds.num_classes == 10 and ds.y is not None
    counts = torch.bincount(ds.y, minlength=ds.num_classes)
    assert int(counts.min()) >= 100 and counts.tolist() == sorted(counts.tolist(), reverse=True)
    assert ds.meta["classes"][0] == "location" and len(set(ds.meta["classes"])) == 10
    deg = check_undirected(ds).double()
    assert float(deg.mean()) > 5.0
    assert ds.feature_dims["text"] == 256 and ds.feature_dims["numeric"] > 50
    assert ds.available[:, 0].all()  # every entity has a name
    frac = float(ds.available[:, 1].float().mean())
    assert 0.5 < frac < 0.99, "numeric attributes are genuinely, partially missing"
    assert (ds.features["numeric"][~ds.available[:, 1]] == 0).all()
    assert frac == pytest.approx(ds.meta["numeric_available_fraction"])
    print(f"\nfb15k237_typing: {ds.num_nodes} nodes, {ds.num_edges} edges, mean degree {deg.mean():.2f}, "
          f"classes {dict(zip(ds.meta['classes'], counts.tolist()))}, numeric available {frac:.3f}")


@needs_fb15k
def test_fb15k237_typing_cached_load_is_fast(typing_ds: GraphDataset) -> None:
    t0 = time.perf_counter()
    again = FB15k237Typing().load()
    took = time.perf_counter() - t0
    assert took < 2.0, f"cached load took {took:.2f} s"
    assert again.fingerprint() == typing_ds.fingerprint()
    print(f"\nfb15k237_typing cached load: {took:.3f} s")


@needs_fb15k
def test_text_probe_beats_majority(typing_ds: GraphDataset) -> None:
    """A linear probe on the text modality must clearly beat the majority class: the labels are real."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from threadpoolctl import threadpool_limits

    x, y = typing_ds.features["text"].numpy(), typing_ds.y.numpy()
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    with threadpool_limits(limits=1):  # small problem: extra BLAS threads only contend
        acc = LogisticRegression(max_iter=200).fit(xtr, ytr).score(xte, yte)
    majority = np.bincount(yte).max() / yte.size
    print(f"\ntext probe accuracy {acc:.3f} vs majority {majority:.3f}")
    assert acc > majority + 0.2
