"""Data files that lie: a forged .npy/.npz header, an unreadable file in a data root, a
malformed interaction pickle. Each is a one-line DataError naming the file (exit code 2
through the CLI), never a MemoryError, a traceback, or a file quietly taken from elsewhere.

Every .npy and .npz that a loader reads goes through ``data_prep.safe_npy``; the forged
header test runs over every such file of every loader fixture of ``test_loader_fuzz.py``, so a
loader that reads one with ``np.load`` again fails here.
"""

from __future__ import annotations

import io
import os
import pickle
import shutil
import sys
import tokenize
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.lib import format as npformat

import data_prep.datasets.sources as sources
from benchmark.errors import DataError
from data_prep.amfl.files import AMFLFeatures, AVMNIST
from data_prep.datasets.tiktok import TikTok, read_interactions
from data_prep.safe_npy import load_npy, load_npz

sys.path.insert(0, str(Path(__file__).parent))
from test_datasets_formats import TT_ITEMS, TT_USERS, write_tiktok  # noqa: E402
from test_loader_fuzz import CASES  # noqa: E402

HUGE = (2**40, 128)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No real mirror, no $FEDMM_DATA_ROOT, a private cache."""
    monkeypatch.setattr(sources, "MIRROR", tmp_path / "no-mirror")
    monkeypatch.delenv(sources.ENV_ROOT, raising=False)
    monkeypatch.setenv(sources.ENV_CACHE, str(tmp_path / "cache"))


def _npy_bytes(header: dict, data: bytes) -> bytes:
    buf = io.BytesIO()
    npformat.write_array_header_1_0(buf, header)
    return buf.getvalue() + data


def forge_npy(path: Path, shape: tuple[int, ...] = HUGE) -> None:
    """Keep the data, make the header claim ``shape``."""
    arr = np.load(path, allow_pickle=False)
    path.write_bytes(_npy_bytes({"descr": npformat.dtype_to_descr(arr.dtype), "fortran_order": False,
                                 "shape": shape}, np.ascontiguousarray(arr).tobytes()))


def forge_npz(path: Path, shape: tuple[int, ...] = HUGE) -> None:
    """Every member's header claims ``shape`` (the zip directory stays consistent with the bytes)."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    with zipfile.ZipFile(path, "w") as out:
        for k, arr in arrays.items():
            out.writestr(k + ".npy", _npy_bytes({"descr": npformat.dtype_to_descr(arr.dtype), "fortran_order": False,
                                                 "shape": shape}, np.ascontiguousarray(arr).tobytes()))


def _one_line_cli_error(argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> str:
    from fedmm_bench.cli import main

    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    monkeypatch.chdir(work)
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert list(work.iterdir()) == []  # nothing written
    return err


def _prepare_tiktok(root: Path) -> list[str]:
    return ["prepare", "--set", "dataset.name=tiktok", "--set", f"dataset.root={root}",
            "--set", "dataset.verify=false", "--set", "dataset.cache=false"]


# --------------------------------------------------------------------------- forged headers


def test_safe_npy_reads_what_np_load_reads(tmp_path: Path) -> None:
    a = np.arange(24, dtype=np.float16).reshape(4, 6)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    np.save(tmp_path / "s.npy", np.array(["x", "yz"]))
    np.save(tmp_path / "e.npy", np.zeros((0, 3)))
    for name in ("a", "f", "s", "e"):
        assert np.array_equal(load_npy(tmp_path / f"{name}.npy"), np.load(tmp_path / f"{name}.npy"))
    np.savez(tmp_path / "z.npz", a=a, b=np.arange(3))
    np.savez_compressed(tmp_path / "c.npz", a=a, zeros=np.zeros(100_000))
    for name in ("z", "c"):
        with load_npz(tmp_path / f"{name}.npz") as z, np.load(tmp_path / f"{name}.npz") as ref:
            assert z.files == ref.files and "a" in z and all(np.array_equal(z[k], ref[k]) for k in z.files)
            with pytest.raises(KeyError):
                z["nope"]


def test_npy_header_claiming_2_40_rows_is_a_data_error_not_an_allocation(tmp_path: Path) -> None:
    p = tmp_path / "x.npy"
    np.save(p, np.ones((4, 128), np.float16))
    forge_npy(p)
    with pytest.raises(DataError, match=r"x\.npy: header claims shape \(1099511627776, 128\) of float16 "
                                        r"\(281474976710656 bytes\), but the file holds 1024 bytes"):
        load_npy(p)
    np.save(p, np.ones((4, 128), np.float16))
    forge_npy(p, (3, 128))  # a smaller lie, and a byte short, are the same error
    with pytest.raises(DataError, match="header claims shape"):
        load_npy(p)
    p.write_bytes(p.read_bytes()[:-1])
    with pytest.raises(DataError, match="header claims shape"):
        load_npy(p)
    p.write_bytes(_npy_bytes({"descr": "|O", "fortran_order": False, "shape": (2,)}, b"\0" * 16))
    with pytest.raises(DataError, match="holds Python objects"):
        load_npy(p)


@pytest.mark.parametrize("error", [SyntaxError("bad header"), tokenize.TokenError("unterminated string literal")])
def test_an_unparsable_npy_header_is_a_value_error_on_every_numpy(error: Exception, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy 2.5 lets the tokenizer's errors escape its header parser (numpy 2.4 says ValueError):
    every loader catches ValueError, so load_npy must turn them into one."""
    p = tmp_path / "x.npy"
    np.save(p, np.ones(4, np.float32))

    def parse(fp):  # what numpy 2.5.2 does on a bit-flipped header
        raise error

    monkeypatch.setattr(npformat, "read_array_header_1_0", parse)
    with pytest.raises(ValueError, match="Cannot parse header"):
        load_npy(p)


def test_npz_member_and_zip_directory_lies_are_data_errors(tmp_path: Path) -> None:
    p = tmp_path / "z.npz"
    np.savez(p, user=np.arange(5), item=np.arange(5))
    forge_npz(p)
    with load_npz(p) as z, pytest.raises(DataError, match=r"z\.npz\[user\]: header claims shape \(1099511627776, 128\)"):
        z["user"]
    # a stored member whose zip directory entry claims more bytes than the member holds
    np.savez(p, user=np.arange(5))
    data = bytearray(p.read_bytes())
    info = zipfile.ZipFile(p).getinfo("user.npy")
    cd = data.rfind(b"PK\x01\x02")
    data[cd + 24:cd + 28] = (info.file_size * 1000).to_bytes(4, "little")  # central directory: uncompressed size
    p.write_bytes(bytes(data))
    with load_npz(p) as z, pytest.raises(DataError, match=r"z\.npz\[user\]: stored member claims"):
        z["user"]


@pytest.mark.parametrize("loader", sorted(CASES))
def test_every_loader_refuses_a_forged_header_in_each_of_its_arrays(loader: str, tmp_path: Path) -> None:
    case = CASES[loader]
    clean = tmp_path / "clean"
    case.write(clean)
    arrays = sorted(p.relative_to(clean) for p in clean.rglob("*") if p.suffix in (".npy", ".npz"))
    for rel in arrays:
        root = tmp_path / rel.as_posix().replace("/", "_")
        shutil.copytree(clean, root)
        (forge_npz if rel.suffix == ".npz" else forge_npy)(root / rel)
        with pytest.raises(DataError, match="header claims shape") as e:
            case.load(root, False)
        assert rel.name in str(e.value)
        shutil.rmtree(root)


def test_amfl_files_refuse_forged_headers(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    base = tmp_path / "avmnist"
    for d in ("image", "audio"):
        (base / d).mkdir(parents=True)
    for split in ("train", "test"):
        np.save(base / "image" / f"{split}_data.npy", rng.integers(0, 256, size=(3, 784)).astype(np.uint8))
        np.save(base / "audio" / f"{split}_data.npy", rng.integers(0, 256, size=(3, 112, 112)).astype(np.uint8))
        np.save(base / f"{split}_labels.npy", rng.integers(0, 10, size=3))
    AVMNIST().load(tmp_path)
    forge_npy(base / "audio" / "test_data.npy")
    with pytest.raises(DataError, match=r"audio/test_data\.npy: header claims shape"):
        AVMNIST().load(tmp_path)
    (tmp_path / "amfl").mkdir()
    npz = tmp_path / "amfl" / "modelnet40.npz"
    np.savez(npz, view1=rng.normal(size=(4, 8)), view2=rng.normal(size=(4, 8)), labels=np.arange(4))
    forge_npz(npz)
    with pytest.raises(DataError, match=r"modelnet40\.npz\[\w+\]: header claims shape"):
        AMFLFeatures().load(tmp_path)
    npz.write_bytes(b"not a zip archive at all")
    with pytest.raises(DataError, match=r"modelnet40\.npz: not a readable \.npz archive \(BadZipFile"):
        AMFLFeatures().load(tmp_path)


def test_a_forged_text_cache_file_is_rebuilt(tmp_path: Path, capsys) -> None:
    from data_prep.features import encode_texts

    first = encode_texts(["a b", "c"], encoder="hashing", dim=8, cache_dir=tmp_path / "tc")
    cached = next((tmp_path / "tc").iterdir())
    forge_npy(cached)
    again = encode_texts(["a b", "c"], encoder="hashing", dim=8, cache_dir=tmp_path / "tc")
    assert np.array_equal(first.numpy(), again.numpy()) and "rebuilding" in capsys.readouterr().err
    assert load_npy(cached).shape == (2, 8)


def test_forged_image_feat_header_through_prepare_is_one_line_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    """The issue's probe: image_feat.npy claiming (2**40, 128) used to die allocating 256 TiB."""
    data = tmp_path / "data"
    write_tiktok(data / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    img = data / "tiktok" / "image_feat.npy"
    forge_npy(img)
    err = _one_line_cli_error(_prepare_tiktok(data), tmp_path, monkeypatch, capsys)
    assert err.startswith(f"error: {img}: header claims shape (1099511627776, 128) of float16")


# --------------------------------------------------------------------------- data roots


def _break(path: Path, how: str) -> None:
    if path.is_file() or path.is_symlink():
        path.unlink()
    if how == "directory":
        path.mkdir()
    elif how == "symlink loop":
        os.symlink(path.name, path)
    elif how == "broken symlink":
        os.symlink(path.parent / "gone.npy", path)
    elif how == "unreadable":
        path.write_bytes(b"x")
        path.chmod(0)


HOW = ["directory", "symlink loop", "broken symlink",
       pytest.param("unreadable", marks=pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file"))]


@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("where", ["dataset.root", "$FEDMM_DATA_ROOT"])
def test_unreadable_file_in_a_data_root_is_an_error_not_the_next_roots_file(
        how: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """image_feat.npy broken in the first root, whole and valid in the mirror: the two roots
    used to be mixed silently (the first root's audio and interactions, the mirror's images)."""
    mirror, first = tmp_path / "mirror", tmp_path / "first"
    write_tiktok(mirror / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    write_tiktok(first / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    monkeypatch.setattr(sources, "MIRROR", mirror)
    bad = first / "tiktok" / "image_feat.npy"
    _break(bad, how)
    root = None
    if where == "dataset.root":
        root = first
    else:
        monkeypatch.setenv(sources.ENV_ROOT, str(first))
    with pytest.raises(DataError, match=rf"data file {bad} is ") as e:
        TikTok(TikTok.Config(top_k=0, verify=False, cache=False)).load(root)
    assert "\n" not in str(e.value) and "other data roots are not searched" in str(e.value)
    shutil.rmtree(first / "tiktok")  # a root without the dataset's folder: the mirror serves, as before
    ds = TikTok(TikTok.Config(top_k=0, verify=False, cache=False)).load(root)
    assert ds.meta["files"]["image"] == str(mirror / "tiktok" / "image_feat.npy")


def test_unreadable_held_out_split_is_an_error_not_a_dropped_split(tmp_path: Path) -> None:
    write_tiktok(tmp_path / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    np.savez(tmp_path / "tiktok" / "tst_interactions.npz", user=np.array([0]), item=np.array([1]), shape=np.array([4, 6]))
    (tmp_path / "tiktok" / "val_interactions.npz").mkdir()  # used to be skipped: no validation split at all
    with pytest.raises(DataError, match=r"val_interactions\.npz is a directory"):
        TikTok(TikTok.Config(top_k=0, verify=False, cache=False)).load(tmp_path)


def test_looping_image_feat_through_prepare_is_one_line_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    mirror, data = tmp_path / "mirror", tmp_path / "data"
    write_tiktok(mirror / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    write_tiktok(data / "tiktok", TT_USERS, TT_ITEMS, (4, 6))
    monkeypatch.setattr(sources, "MIRROR", mirror)
    bad = data / "tiktok" / "image_feat.npy"
    _break(bad, "symlink loop")
    err = _one_line_cli_error(_prepare_tiktok(data), tmp_path, monkeypatch, capsys)
    assert err.startswith(f"error: data file {bad} is a symbolic link loop")


def test_other_lookups_refuse_unreadable_files_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from data_prep.kg import fb15k237, fb15k237_small

    root = tmp_path / "root"
    (root / "fb15k237").mkdir(parents=True)
    _break(root / "fb15k237" / "FB15k-237.tar.gz", "broken symlink")
    with pytest.raises(DataError, match=r"FB15k-237\.tar\.gz is a broken symbolic link"):
        fb15k237.locate("FB15k-237.tar.gz", root, verify=False)
    # the embedded subset: a manifest that is a directory does not fall back to the repo copy
    (root / "fb15k237_small").mkdir()
    (root / "fb15k237_small" / fb15k237_small.MANIFEST).mkdir()
    with pytest.raises(DataError, match="is a directory"):
        fb15k237_small.load_fb15k237_small(root)
    # AMFL: a looping feature file, a folder that is a file
    (root / "amfl").mkdir()
    _break(root / "amfl" / "modelnet40.npz", "symlink loop")
    with pytest.raises(DataError, match=r"modelnet40\.npz is a symbolic link loop"):
        AMFLFeatures().load(root)
    (root / "avmnist").write_text("not a folder")
    with pytest.raises(DataError, match=r"data folder .*avmnist is not a readable directory"):
        AVMNIST().load(root)
    # an entity's image feature file that is a broken link is an error, not an entity without an image
    img = tmp_path / "img"
    img.mkdir()
    np.save(img / "m.a.npy", np.ones(4, np.float32))
    _break(img / "m.b.npy", "broken symlink")
    with pytest.raises(DataError, match=r"m\.b\.npy is a broken symbolic link"):
        fb15k237.load_entity_image_features(img, ["/m/a", "/m/b"])


# --------------------------------------------------------------------------- interaction pickles


def _coo() -> sp.coo_matrix:
    return sp.coo_matrix((np.ones(8, np.float32), (TT_USERS, TT_ITEMS)), shape=(4, 6))


def _tamper(kind: str, **state) -> bytes:
    m = {"coo": _coo, "csr": lambda: _coo().tocsr(), "csc": lambda: _coo().tocsc()}[kind]()
    m.__dict__.update(state)
    return pickle.dumps(m)


BAD_PICKLES = {
    "negative shape": (_tamper("coo", _shape=(-4, 6)), r"shape \(-4, 6\) must be positive"),
    "zero shape": (_tamper("coo", _shape=(0, 6)), "must be positive"),
    "absurd shape": (_tamper("csr", _shape=(2**62, 6)), "must be positive"),
    "3-D shape": (_tamper("coo", _shape=(4, 6, 1)), "no 2-D shape"),
    "shape not a tuple": (_tamper("coo", _shape=4), "no 2-D shape"),
    "string in shape": (_tamper("coo", _shape=("4", 6)), "must be two integers"),
    "float in shape": (_tamper("coo", _shape=(4.5, 6)), "must be two integers"),
    "item beyond the shape": (_tamper("coo", _shape=(4, 3)), r"item id 5 at position 2 is outside \[0, 3\)"),
    "user beyond the shape": (_tamper("coo", _shape=(2, 6)), r"user id 2 at position 5 is outside \[0, 2\)"),
    "row and col lengths differ": (_tamper("coo", coords=(np.array(TT_USERS), np.array(TT_ITEMS[:5]))),
                                   "8 row ids but 5 column ids"),
    "one coordinate array": (_tamper("coo", coords=(np.array(TT_USERS),)), "must be \\(rows, cols\\)"),
    "2-D coordinates": (_tamper("coo", coords=(np.array([TT_USERS]), np.array([TT_ITEMS]))), "'row' must be 1-D"),
    "coordinates not arrays": (_tamper("coo", coords=("ab", "cd")), "'row' is not an array"),
    "values of another length": (_tamper("coo", data=np.ones(3, np.float32)), "3 stored values but 8 stored indices"),
    "csr with a negative shape": (_tamper("csr", _shape=(-4, 6)), "must be positive"),
    "csr indptr too short": (_tamper("csr", indptr=np.array([0, 3])), r"'indptr' has 2 entries, expected 5"),
    "csr indptr falling": (_tamper("csr", indptr=np.array([0, 5, 1, 6, 8])), "'indptr' must rise"),
    "csr indptr past the indices": (_tamper("csr", indptr=np.array([0, 3, 5, 7, 9])), "'indptr' must rise"),
    "csr indices beyond the shape": (_tamper("csr", indices=np.array([0, 2, 9, 0, 2, 3, 4, 1])),
                                     r"item id 9 .* outside \[0, 6\)"),
    "a forged 2**60-byte literal": (b"\x80\x04\x8e" + (2**60).to_bytes(8, "little") + b"abc.",
                                    "expected 1152921504606846976 bytes"),
}


@pytest.mark.parametrize("name", sorted(BAD_PICKLES))
def test_malformed_interaction_pickle_is_a_data_error(name: str, tmp_path: Path) -> None:
    data, message = BAD_PICKLES[name]
    p = tmp_path / "trnMat.pkl"
    p.write_bytes(data)
    with pytest.raises(DataError, match=message) as e:
        read_interactions(p)
    assert str(e.value).startswith(f"{p}: ") and "\n" not in str(e.value)


def test_csr_and_csc_pickles_read_as_the_same_interactions(tmp_path: Path) -> None:
    """The unpickler used to read a CSC matrix as if it were CSR (rows and columns swapped)."""
    want = sorted(zip(TT_USERS, TT_ITEMS))
    for kind in ("coo", "csr", "csc"):
        p = tmp_path / f"{kind}.pkl"
        p.write_bytes(_tamper(kind))
        users, items, shape = read_interactions(p)
        assert sorted(zip(users.tolist(), items.tolist())) == want and shape == (4, 6), kind


def test_bad_trnmat_through_prepare_is_one_line_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    data = tmp_path / "data"
    write_tiktok(data / "tiktok", TT_USERS, TT_ITEMS, (4, 6), pkl=True)
    pkl = data / "tiktok" / "trnMat.pkl"
    pkl.write_bytes(_tamper("csr", indptr=np.array([0, 5, 1, 6, 8])))
    err = _one_line_cli_error(_prepare_tiktok(data), tmp_path, monkeypatch, capsys)
    assert err.startswith(f"error: {pkl}: 'indptr' must rise")
