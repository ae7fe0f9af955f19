"""Fuzzing the real-format loaders: every damaged file is a DataError naming it, or a clean load.

Each loader reads small generated files in its real on-disk format (the writers of
test_datasets_formats.py and test_kg_data.py). Every one of those files is in turn emptied,
truncated to half, cut by one byte, bit-flipped in three places, replaced by random bytes of
the same length and zeroed from the middle on; the loader runs with and,
where it has the option, without checksum verification (with verification the pinned
sha256 of every file is the clean fixture's, as a real release pins its files). The only
allowed outcomes are a load that passes basic invariants or a ``DataError`` whose message
names the damaged file; anything else (zipfile.BadZipFile, UnicodeDecodeError, an
IndexError deep in numpy, ...) is an escape and fails the test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import data_prep.datasets.sources as sources
from benchmark.errors import DataError
from benchmark.federation import GraphDataset
from data_prep.datasets import fb15k237_typing, flickr30k, magb, ninerec, tiktok
from data_prep.datasets.sources import RemoteFile
from data_prep.kg import fb15k237 as kg_fb
from data_prep.kg import fb15k237_small
from data_prep.kg.dataset import KGDataset

sys.path.insert(0, str(Path(__file__).parent))
from test_datasets_formats import (  # noqa: E402
    MAGB_ROWS, NR_ITEMS, NR_PAIRS, TT_ITEMS, TT_USERS, write_fb15k, write_flickr, write_magb, write_ninerec,
    write_tiktok,
)
from test_kg_data import _write_fake_fb  # noqa: E402


# --------------------------------------------------------------------------- damage


def _empty(data: bytes) -> bytes:
    return b""


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _cut_last(data: bytes) -> bytes:
    return data[:-1]


def _flip(data: bytes) -> bytes:
    """Invert a run of bytes at a quarter, half and three quarters of the file."""
    out = bytearray(data)
    for frac in (0.25, 0.5, 0.75):
        start = int(len(out) * frac)
        for i in range(start, min(start + 4, len(out))):
            out[i] ^= 0xFF
    return bytes(out)


def _garbage(data: bytes) -> bytes:
    """Same length, seeded random bytes: right size, wrong everything."""
    return np.random.default_rng(len(data)).integers(0, 256, len(data), dtype=np.uint8).tobytes()


def _zero_tail(data: bytes) -> bytes:
    """The second half zeroed, as a torn write on some filesystems leaves it."""
    return data[: len(data) // 2] + bytes(len(data) - len(data) // 2)


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {"empty": _empty, "half": _half, "cut_last": _cut_last,
                                                    "flip": _flip, "garbage": _garbage, "zero_tail": _zero_tail}


# --------------------------------------------------------------------------- loaders


@dataclasses.dataclass
class Case:
    """A loader on a generated data folder: ``write(root)`` lays it out, ``load(root, verify)`` reads it."""

    write: Callable[[Path], None]
    load: Callable[[Path, bool], Any]
    verifies: bool = False
    module: types.ModuleType | None = None  # whose pinned RemoteFile hashes the clean fixture replaces


def _tiktok(pkl: bool) -> Case:
    return Case(lambda r: write_tiktok(r / "tiktok", TT_USERS, TT_ITEMS, (4, 6), pkl=pkl),
                lambda r, v: tiktok.TikTok(tiktok.TikTok.Config(top_k=0, verify=v, cache=False)).load(r),
                verifies=True, module=tiktok)


def _write_tiktok_splits(root: Path) -> None:
    write_tiktok(root / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    for name in ("val_interactions.npz", "tst_interactions.npz"):
        np.savez(root / "tiktok" / name, user=np.array([0, 3]), item=np.array([1, 5]), shape=np.array([4, 6]))


def _fb_typing_load(root: Path, verify: bool) -> GraphDataset:
    cfg = fb15k237_typing.FB15k237Typing.Config(num_classes=2, text_dim=4, min_attribute_count=1, verify=verify,
                                                cache=False)
    return fb15k237_typing.FB15k237Typing(cfg).load(root)


def _write_kg_small(root: Path) -> None:
    shutil.copytree(fb15k237_small.SUBSET_DIR, root / "fb15k237_small")


ENTS = ["/m/a", "/m/b", "/m/c"]


def _write_image_dir(root: Path) -> None:
    d = root / "img"
    d.mkdir(parents=True)
    rng = np.random.default_rng(5)
    np.save(d / "m.a.npy", rng.standard_normal((2, 4)).astype(np.float32))
    torch.save(torch.randn(4), d / "m_b.pth")
    np.save(d / "m.c.npy", rng.standard_normal(4).astype(np.float32))


def _write_image_files(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    torch.save({"/m/a": torch.randn(4), "/m/b": torch.randn(2, 4)}, root / "all.pth")
    np.savez(root / "all.npz", **{"m.a": np.ones(4, np.float32), "m.c": np.zeros((1, 4), np.float32) + 2})


def _load_images(root: Path, verify: bool) -> list[Any]:
    if (root / "img").is_dir():
        return [kg_fb.load_entity_image_features(root / "img", ENTS)]
    return [kg_fb.load_entity_image_features(root / name, ENTS) for name in ("all.pth", "all.npz")]


def _write_ele_fashion(root: Path) -> None:
    d = root / "magb" / "ele-fashion"
    d.mkdir(parents=True)
    torch.save(np.array([[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0]]), d / "nc_edges-nodeid.pt")
    torch.save(torch.tensor([0, 1, -1, 1, 0, 2]), d / "labels-w-missing.pt")
    torch.save({"train_idx": torch.tensor([0, 1, 3]), "val_idx": torch.tensor([4]), "test_idx": torch.tensor([5])},
               d / "split.pt")
    torch.save(torch.randn(6, 8), d / "clip_feat.pt")


def _write_magb_edges(root: Path) -> None:
    write_magb(root / "magb" / "Movies", "Movies", MAGB_ROWS)
    (root / "magb" / "Movies" / "edges.txt").write_text("src dst\n0 3\n1 3\n")


CASES: dict[str, Case] = {
    "tiktok-npz": _tiktok(pkl=False),
    "tiktok-pkl": _tiktok(pkl=True),
    "tiktok-splits": Case(_write_tiktok_splits,
                          lambda r, v: tiktok.TikTok(tiktok.TikTok.Config(top_k=0, verify=v, cache=False)).load(r),
                          verifies=True, module=tiktok),
    "fb15k237_typing": Case(lambda r: write_fb15k(r / "fb15k237"), _fb_typing_load, verifies=True,
                            module=fb15k237_typing),
    "fb15k237": Case(lambda r: _write_fake_fb(r),
                     lambda r, v: kg_fb.load_fb15k237(r, text_encoder="none", numeric_dim=4, verify=v),
                     verifies=True, module=kg_fb),
    "fb15k237_small": Case(_write_kg_small,
                           lambda r, v: fb15k237_small.load_fb15k237_small(r, numeric_dim=4, verify=v),
                           verifies=True),
    "kg_image_dir": Case(_write_image_dir, _load_images),
    "kg_image_files": Case(_write_image_files, _load_images),
    "magb": Case(lambda r: write_magb(r / "magb" / "Movies", "Movies", MAGB_ROWS),
                 lambda r, v: magb.MAGB(magb.MAGB.Config(cache=False)).load(r)),
    "magb-edgelist": Case(_write_magb_edges,
                          lambda r, v: magb.MAGB(magb.MAGB.Config(graph="edges.txt", cache=False)).load(r)),
    "mmgraph": Case(_write_ele_fashion,
                    lambda r, v: magb.MAGB(magb.MAGB.Config(subset="ele-fashion", cache=False)).load(r)),
    "ninerec": Case(lambda r: write_ninerec(r / "ninerec" / "KU", ["item_id,user_id,timestamp"] + NR_PAIRS, NR_ITEMS),
                    lambda r, v: ninerec.NineRec(ninerec.NineRec.Config(subset="KU", top_k=0, cache=False)).load(r)),
    **{f"flickr30k-{fmt}": Case(lambda r, fmt=fmt: write_flickr(r / "flickr30k", fmt),
                                lambda r, v: flickr30k.Flickr30k(flickr30k.Flickr30k.Config(k=2, cache=False)).load(r))
       for fmt in ("token", "json", "csv")},
}


def _pin(module: types.ModuleType, fixture: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pin every RemoteFile of ``module`` that names a fixture file to that file's sha256."""
    digests = {p.relative_to(fixture).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
               for p in fixture.rglob("*") if p.is_file()}
    by_name = {}
    for rel, digest in digests.items():
        by_name.setdefault(rel.split("/", 1)[-1], digest)  # relative to the dataset folder
        by_name.setdefault(rel, digest)

    def repin(obj: Any) -> Any:
        if isinstance(obj, RemoteFile):
            return dataclasses.replace(obj, sha256=by_name.get(obj.name, obj.sha256))
        if isinstance(obj, dict):
            return {k: repin(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [repin(v) for v in obj]
        return obj

    for attr, value in list(vars(module).items()):
        if isinstance(value, (RemoteFile, dict, list)) and not attr.startswith("__"):
            new = repin(value)
            if new != value:
                monkeypatch.setattr(module, attr, new)


def _check_loaded(result: Any) -> None:
    """Loose invariants of whatever a loader returned (a damaged file that still parses must give sane data)."""
    for obj in result if isinstance(result, list) else [result]:
        if isinstance(obj, GraphDataset):
            ei = obj.edge_index
            assert ei.dtype == torch.long and (ei.numel() == 0 or (0 <= int(ei.min()) and int(ei.max()) < obj.num_nodes))
            assert all(torch.isfinite(x).all() for x in obj.features.values())
        elif isinstance(obj, KGDataset):
            for split in (obj.train, obj.valid, obj.test):
                assert split.ndim == 2 and split.shape[1] == 3
                assert split.numel() == 0 or int(split[:, [0, 2]].max()) < len(obj.entities)
        else:
            x, own, _ = obj
            assert torch.isfinite(x).all() and own.shape[0] == x.shape[0]


def _variants() -> list[tuple[str, bool]]:
    return [(name, v) for name, case in CASES.items() for v in ((False, True) if case.verifies else (False,))]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "MIRROR", tmp_path / "no-mirror")
    monkeypatch.delenv(sources.ENV_ROOT, raising=False)
    monkeypatch.setenv(sources.ENV_CACHE, str(tmp_path / "cache"))


def fuzz(case: Case, verify: bool, tmp_path: Path) -> tuple[list[str], dict[str, int], int]:
    """Damage every file of the case's fixture in every way; (escapes, outcome counts, files)."""
    clean = tmp_path / "clean"
    case.write(clean)
    _check_loaded(case.load(clean, verify))  # the undamaged fixture loads
    files = sorted(p.relative_to(clean) for p in clean.rglob("*") if p.is_file())
    escapes: list[str] = []
    outcomes = {"loaded": 0, "data_error": 0}
    for rel in files:
        for kind, damage in CORRUPTIONS.items():
            root = tmp_path / f"{kind}-{rel.as_posix().replace('/', '_')}"
            shutil.copytree(clean, root)
            target = root / rel
            target.write_bytes(damage(target.read_bytes()))
            try:
                result = case.load(root, verify)
            except DataError as e:
                if rel.name not in str(e):
                    escapes.append(f"{rel} [{kind}]: DataError does not name the file: {e}")
                outcomes["data_error"] += 1
            except Exception as e:  # noqa: BLE001 - any other exception is what this test hunts
                escapes.append(f"{rel} [{kind}]: {type(e).__name__}: {e}")
            else:
                try:
                    _check_loaded(result)
                except AssertionError:
                    escapes.append(f"{rel} [{kind}]: loaded, but the result breaks basic invariants")
                outcomes["loaded"] += 1
            shutil.rmtree(root)
    return escapes, outcomes, len(files)


@pytest.mark.parametrize("loader, verify", _variants(), ids=[f"{n}-{'verify' if v else 'noverify'}"
                                                               for n, v in _variants()])
def test_damaged_files_are_data_errors_naming_the_file(loader: str, verify: bool, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[loader]
    if verify and case.module is not None:
        probe = tmp_path / "probe"
        case.write(probe)
        _pin(case.module, probe, monkeypatch)
    escapes, outcomes, n_files = fuzz(case, verify, tmp_path)
    assert n_files and not escapes, "\n".join(escapes)
    assert outcomes["data_error"] >= n_files  # at least emptying every file is noticed


def test_truncated_interactions_through_the_cli_is_one_line_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    """The issue's probe: a truncated trn_interactions.npz with verify=false used to raise zipfile.BadZipFile."""
    from fedmm_bench.cli import main

    data = tmp_path / "data"
    write_tiktok(data / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    npz = data / "tiktok" / "trn_interactions.npz"
    npz.write_bytes(_half(npz.read_bytes()))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code = main(["prepare", "--set", "dataset.name=tiktok", "--set", f"dataset.root={data}",
                 "--set", "dataset.verify=false", "--set", "dataset.cache=false"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: {npz}: not a readable .npz archive (BadZipFile")
    assert list(work.iterdir()) == []
