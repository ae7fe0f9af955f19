"""TikTok micro-videos: an item-item graph with real visual and acoustic features.

Why this dataset: it is the one real multimodal graph available offline (see
``shared/data/PROVENANCE.md``); the FedMPO / FedMGS protocols use it as the stand-in for
their video-recommendation graphs (DY, Bili) in link prediction, retrieval and matching.

Source: HKUDS/DiffMM @ fae20e64, ``Datasets/tiktok/``: 9,308 users x 6,710 items,
``image_feat.npy`` and ``audio_feat.npy`` (6,710 x 128, float16). The interactions were
published as scipy COO pickles (``trnMat.pkl``, ``valMat.pkl``, ``tstMat.pkl``); the
offline mirror holds them converted to ``{trn,val,tst}_interactions.npz`` (arrays
``user``, ``item``, ``shape``). The loader reads the ``.npz`` files and, when only the
original pickles exist, reads those with a restricted unpickler that builds no objects
(only the row / column / shape arrays are taken). The feature files and the converted
``.npz`` files are pinned by sha256; the original pickles have no published checksum
and are not verified.

Graph. Nodes are the items. Two items are linked when at least ``min_common_users``
users interacted with both in the *training* interactions only (validation and test
interactions never shape the graph, so they stay usable for link-prediction
evaluation). Raw co-interaction is very dense on TikTok (one heavy user with 600 items
alone links 180k pairs: ~4M pairs, mean degree ~1,180), so each item keeps its
``top_k`` neighbours with the most shared users (ties: the less popular neighbour) and
the graph is the union of these choices. The default ``top_k = 5`` gives a mean degree
of ~8, the density of the video graphs in the FedMGS protocol (DY 8.6, Bili Dance 7.9,
KU 8.2). Items nobody co-interacted with in training stay isolated (576 of 6,710).

Availability. Both modalities exist for every TikTok item; a row that is all zeros or
holds NaN/inf is marked naturally missing (and zeroed), so other releases with padded
rows load correctly.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.errors import DataError
from benchmark.federation import GraphDataset
from benchmark.registry import DATASETS
from data_prep.datasets.sources import (
    UNREADABLE,
    RemoteFile,
    cached_build,
    co_interaction_pairs,
    config_for_key,
    degree_stats,
    check_sha,
    file_present,
    load_matrix,
    locate,
    locate_any,
    row_availability,
    undirected_edge_index,
)
from data_prep.safe_npy import load_npz

DATASET_DIR = "tiktok"
LOADER_VERSION = 1
_RAW = "https://raw.githubusercontent.com/HKUDS/DiffMM/fae20e64/Datasets/tiktok"
_SRC = "HKUDS/DiffMM @ fae20e64, Datasets/tiktok/"

IMAGE = RemoteFile("image_feat.npy", f"{_RAW}/image_feat.npy",
                   "f6c1ec1726ed2aa80315411199ab2143bee6333821bf58c5f00bd3f5b462efc2", _SRC)
AUDIO = RemoteFile("audio_feat.npy", f"{_RAW}/audio_feat.npy",
                   "d45a44a9d462f578802de914c2feea5cfd45742b2922775a085b9bdc1beba26f", _SRC)
# converted copies (mirror only, pinned) first, then the published pickles (no checksum)
INTERACTIONS: dict[str, list[RemoteFile]] = {
    "train": [
        RemoteFile("trn_interactions.npz", None,
                   "4caadc8f492b9789b53ba0614ee28f691618446e3f82de6f3e69853b76010b48", "shared/data mirror"),
        RemoteFile("trnMat.pkl", f"{_RAW}/trnMat.pkl", None, _SRC),
    ],
    "val": [
        RemoteFile("val_interactions.npz", None,
                   "2f2125d2322ad56550a315adc628047417dd44753b92171b265a474275d4fce8", "shared/data mirror"),
        RemoteFile("valMat.pkl", f"{_RAW}/valMat.pkl", None, _SRC),
    ],
    "test": [
        RemoteFile("tst_interactions.npz", None,
                   "8407a147b0fe8a4544a767bcf9a946b6ebfc432943167d100a74648341552046", "shared/data mirror"),
        RemoteFile("tstMat.pkl", f"{_RAW}/tstMat.pkl", None, _SRC),
    ],
}


@DATASETS.register("tiktok")
class TikTok:
    """TikTok item-item co-interaction graph, visual + acoustic (128-d each), no labels."""

    @dataclass
    class Config:
        min_common_users: int = field(
            default=1, metadata={"help": "link two items when at least this many users interacted with both", "min": 1, "max": 50_000_000}
        )
        top_k: int = field(
            default=5,
            metadata={"help": "keep each item's top-k neighbours by shared users (0 = keep every pair); "
                              "5 gives mean degree ~8 like the DY/Bili graphs", "min": 0, "max": 10_000},
        )
        include_interactions: bool = field(
            default=True, metadata={"help": "store the user-item train/val/test pairs in meta['interactions']"}
        )
        download: bool = field(
            default=False, metadata={"help": "fetch missing files from their public URL into dataset.root"}
        )
        verify: bool = field(default=True, metadata={"help": "check pinned sha256 checksums of the input files"})
        cache: bool = field(default=True, metadata={"help": "reuse the built graph for identical input files"})
        cache_dir: str | None = field(
            default=None, metadata={"help": "where built graphs are cached (default $FEDMM_CACHE_DIR or .cache/)"}
        )

    def __init__(self, cfg: Config | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> GraphDataset:
        """Locate, verify, validate and build (or reuse the cached build)."""
        c = self.cfg
        image = locate(IMAGE, DATASET_DIR, root, c.download, c.verify)
        audio = locate(AUDIO, DATASET_DIR, root, c.download, c.verify)
        found: dict[str, Path] = {}
        _, found["train"] = locate_any(INTERACTIONS["train"], DATASET_DIR, root, c.download, c.verify)
        if c.include_interactions:
            # the held-out splits must come from the same folder as the train split
            for split in ("val", "test"):
                for spec in INTERACTIONS[split]:
                    p = found["train"].parent / spec.name
                    if file_present(p):
                        if c.verify:
                            check_sha(p, spec)
                        found[split] = p
                        break
        files = [image, audio, *found.values()]
        return cached_build(c.cache, c.cache_dir, "tiktok", LOADER_VERSION, config_for_key(c), files,
                            lambda: self._build(image, audio, found))

    def _build(self, image_path: Path, audio_path: Path, inter_paths: dict[str, Path]) -> GraphDataset:
        c = self.cfg
        inter = {split: read_interactions(p) for split, p in inter_paths.items()}
        users, items, shape = inter["train"]
        num_users, num_items = shape
        for split, (_, _, s) in inter.items():
            if s != shape:
                raise DataError(f"{inter_paths[split]}: shape {s} differs from the train interactions' {shape}")
        visual = load_matrix(image_path, rows=num_items)
        acoustic = load_matrix(audio_path, rows=num_items)
        visual, av_v = row_availability(visual)
        acoustic, av_a = row_availability(acoustic)
        src, dst, stats = co_interaction_pairs(users, items, num_items, c.min_common_users, c.top_k)
        edge_index = undirected_edge_index(src, dst, num_items)
        meta: dict[str, Any] = {
            "source": _SRC,
            "graph": "item-item co-interaction over the train interactions only",
            "config": asdict(c),
            "num_users": num_users,
            "num_train_interactions": int(users.size),
            **stats,
            **degree_stats(edge_index, num_items),
            "files": {k: str(p) for k, p in {"image": image_path, "audio": audio_path, **inter_paths}.items()},
        }
        if c.include_interactions:
            meta["interactions"] = {split: torch.from_numpy(np.stack([u, i])) for split, (u, i, _) in inter.items()}
        return GraphDataset(
            name="tiktok",
            features={"visual": torch.from_numpy(np.ascontiguousarray(visual)),
                      "acoustic": torch.from_numpy(np.ascontiguousarray(acoustic))},
            edge_index=edge_index,
            y=None,
            num_classes=0,
            available=torch.from_numpy(np.stack([av_v, av_a], axis=1)),
            meta=meta,
        )


# --------------------------------------------------------------------------- interactions


def read_interactions(path: Path) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """``(user, item, (num_users, num_items))`` from a converted ``.npz`` or a DiffMM ``.pkl``."""
    if path.suffix == ".pkl":
        users, items, shape = _read_coo_pickle(path)
    else:
        try:
            with load_npz(path) as z:
                missing = [k for k in ("user", "item", "shape") if k not in z.files]
                if missing:
                    raise DataError(f"{path}: missing array(s) {', '.join(missing)} (has: {', '.join(z.files)})")
                users, items, shape_arr = z["user"], z["item"], z["shape"]
        except DataError:
            raise
        except UNREADABLE as e:
            raise DataError(f"{path}: not a readable .npz archive ({type(e).__name__}: {e})") from None
        if shape_arr.shape != (2,) or not np.issubdtype(shape_arr.dtype, np.integer):
            raise DataError(f"{path}: 'shape' must be two integers (users, items), got {shape_arr!r}")
        shape = (int(shape_arr[0]), int(shape_arr[1]))
    return _check_pairs(path, users, items, shape)


def _check_pairs(
    path: Path, users: Any, items: Any, shape: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    users, items = np.asarray(users), np.asarray(items)
    if users.ndim != 1 or items.ndim != 1 or users.shape != items.shape:
        raise DataError(
            f"{path}: 'user' and 'item' must be 1-D arrays of equal length, got {users.shape} and {items.shape}"
        )
    for name, arr in (("user", users), ("item", items)):
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            if not np.all(np.mod(arr, 1) == 0):
                raise DataError(f"{path}: '{name}' holds non-integer ids")
    users, items = users.astype(np.int64), items.astype(np.int64)
    if shape[0] < 1 or shape[1] < 1:
        raise DataError(f"{path}: shape {shape} must be positive")
    for name, arr, bound in (("user", users, shape[0]), ("item", items, shape[1])):
        if arr.size and (arr.min() < 0 or arr.max() >= bound):
            bad = int(np.flatnonzero((arr < 0) | (arr >= bound))[0])
            raise DataError(f"{path}: {name} id {int(arr[bad])} at position {bad} is outside [0, {bound})")
    return users, items, shape


class _Record:
    """Stand-in for any allow-listed class in a pickle: it only records its state."""

    layout = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _CooRecord(_Record):
    layout = "coo"


class _CsrRecord(_Record):
    layout = "csr"


class _CscRecord(_Record):
    layout = "csc"


_LAYOUTS = {"coo": _CooRecord, "csr": _CsrRecord, "csc": _CscRecord}


def _reconstruct_ndarray(_cls: Any, _shape: Any, _dtype: Any) -> "_ArrayStub":
    return _ArrayStub()


class _ArrayStub:
    """Rebuilds a pickled numpy array from its ``__setstate__`` tuple without numpy's pickle path."""

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        _version, shape, dtype, is_fortran, raw = state
        if not isinstance(dtype, np.dtype) or dtype.hasobject:
            raise pickle.UnpicklingError("array of a non-numeric dtype")
        arr = np.frombuffer(raw, dtype=dtype) if isinstance(raw, (bytes, bytearray)) else np.asarray(raw, dtype=dtype)
        self.array = arr.reshape(shape, order="F" if is_fortran else "C").copy()


def _frombuffer(buf: Any, dtype: Any, shape: Any, order: str) -> np.ndarray:
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise pickle.UnpicklingError("array of a non-numeric dtype")
    return np.frombuffer(bytes(buf), dtype=dtype).reshape(shape, order=order).copy()


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError("only latin1 byte literals are allowed")
    return text.encode("latin1")


def _copyreg_reconstructor(cls: Any, _base: Any, _state: Any) -> "_Record":
    if not (isinstance(cls, type) and issubclass(cls, _Record)):
        raise pickle.UnpicklingError("only sparse matrices may be reconstructed")
    return cls()


def _dtype(name: Any, *_args: Any) -> np.dtype:
    dt = np.dtype(name)
    if dt.hasobject:
        raise pickle.UnpicklingError("object dtype is not allowed")
    return dt


class _SafeUnpickler(pickle.Unpickler):
    """Allows only what a pickled scipy sparse matrix of numbers needs; builds no real objects."""

    _SPARSE = {"coo_matrix", "csr_matrix", "csc_matrix", "coo_array", "csr_array", "csc_array"}

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("scipy.sparse") and name in self._SPARSE:
            return _LAYOUTS[name[:3]]  # the layout decides how the index arrays are read
        if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name == "_reconstruct":
            return _reconstruct_ndarray
        if module == "numpy" and name == "ndarray":
            return np.ndarray
        if module == "numpy" and name == "dtype":
            return _dtype
        if module in ("numpy.core.numeric", "numpy._core.numeric") and name == "_frombuffer":
            return _frombuffer
        if module == "_codecs" and name == "encode":
            return _latin1_bytes  # how protocols 0-2 spell a bytes literal
        if module in ("builtins", "__builtin__") and name == "object":
            return object  # only ever the base-class argument of _reconstructor below
        if module in ("copyreg", "copy_reg") and name == "_reconstructor":
            return _copyreg_reconstructor
        if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name == "scalar":
            return lambda dt, raw=b"": np.frombuffer(raw, dtype=dt)[0] if raw else dt.type(0)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in an interaction matrix")


def _arr(x: Any) -> np.ndarray:
    if isinstance(x, _ArrayStub):
        if x.array is None:
            raise ValueError("an array without data")
        return x.array
    if not isinstance(x, (np.ndarray, list, tuple)):
        raise TypeError(f"a {type(x).__name__}")
    return np.asarray(x)


def _prescan(path: Path, data: bytes) -> None:
    """Walk the pickle's opcodes without building anything: every length-prefixed argument
    (a bytes or string literal) must fit in the file, so a forged length of 2**60 is an
    error here instead of an allocation in the unpickler."""
    import pickletools

    try:
        for _ in pickletools.genops(io.BytesIO(data)):
            pass
    except (ValueError, EOFError) as e:  # pickletools' words for a length beyond the data, a bad opcode
        raise DataError(f"{path}: not a pickled scipy sparse matrix of numbers ({e})") from None


def _index_array(path: Path, x: Any, name: str) -> np.ndarray:
    """A 1-D numeric array (ids: integers, or floats that _check_pairs tests for integrality)."""
    try:
        a = _arr(x)
    except (TypeError, ValueError) as e:
        raise DataError(f"{path}: '{name}' is not an array ({e})") from None
    if a.dtype.kind not in "iuf":
        raise DataError(f"{path}: '{name}' must hold integer ids, got dtype {a.dtype}")
    if a.ndim != 1:
        raise DataError(f"{path}: '{name}' must be 1-D, got shape {a.shape}")
    return a


def _sparse_shape(path: Path, st: dict) -> tuple[int, int]:
    shape = st.get("_shape", st.get("shape"))
    if not isinstance(shape, (tuple, list)) or len(shape) != 2:
        raise DataError(f"{path}: sparse matrix has no 2-D shape (got {str(shape)[:80]})")
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in shape):
        raise DataError(f"{path}: sparse matrix shape {str(tuple(shape))[:80]} must be two integers")
    dims = (int(shape[0]), int(shape[1]))
    if not all(0 < v < 2**62 for v in dims):
        raise DataError(f"{path}: sparse matrix shape {dims} must be positive (and below 2**62)")
    return dims


def _expand_compressed(path: Path, st: dict, n_major: int, axis: str) -> tuple[np.ndarray, np.ndarray]:
    """(major ids, minor ids) of a CSR (major = rows) or CSC (major = columns) matrix."""
    indptr = _index_array(path, st["indptr"], "indptr")
    indices = _index_array(path, st["indices"], "indices")
    if indptr.shape[0] != n_major + 1:
        raise DataError(f"{path}: 'indptr' has {indptr.shape[0]} entries, expected {n_major + 1} "
                        f"(one per {axis} of the declared shape, plus one)")
    steps = np.diff(indptr)
    if indptr[0] != 0 or (steps < 0).any() or indptr[-1] != indices.shape[0]:
        raise DataError(f"{path}: 'indptr' must rise from 0 to the {indices.shape[0]} stored indices")
    return np.repeat(np.arange(n_major), steps.astype(np.int64)), indices


def _read_coo_pickle(path: Path) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """(rows, cols, shape) of a pickled scipy COO/CSR/CSC matrix, read without executing code.

    Every part is checked before it is used: a 2-D positive integer shape, 1-D numeric index
    arrays of equal length (and of the stored values' length), a CSR/CSC ``indptr`` that
    matches the shape and the indices; ids out of the declared shape fail in ``_check_pairs``.
    Anything else is a DataError naming the file.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: not readable ({e.strerror})") from None
    _prescan(path, data)
    try:
        obj = _SafeUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError,
            OverflowError, RecursionError) as e:
        raise DataError(f"{path}: not a pickled scipy sparse matrix of numbers ({e})") from None
    if not isinstance(obj, _Record) or not obj.layout or not isinstance(obj.state, dict):
        raise DataError(f"{path}: expected a pickled scipy sparse matrix, got {type(obj).__name__}")
    st = obj.state
    shape = _sparse_shape(path, st)
    if obj.layout == "coo":
        if "row" in st and "col" in st:                   # scipy < 1.13
            rows, cols = st["row"], st["col"]
        elif "coords" in st:                              # scipy >= 1.13
            coords = st["coords"]
            if not isinstance(coords, (tuple, list)) or len(coords) != 2:
                raise DataError(f"{path}: COO 'coords' must be (rows, cols) for a 2-D matrix")
            rows, cols = coords
        else:
            raise DataError(f"{path}: COO matrix without row/col or coords (keys: {', '.join(sorted(map(str, st)))})")
        rows, cols = _index_array(path, rows, "row"), _index_array(path, cols, "col")
    elif "indptr" in st and "indices" in st:
        if obj.layout == "csr":
            rows, cols = _expand_compressed(path, st, shape[0], "row")
        else:
            cols, rows = _expand_compressed(path, st, shape[1], "column")
    else:
        raise DataError(f"{path}: unsupported sparse matrix layout (keys: {', '.join(sorted(map(str, st)))})")
    if rows.shape != cols.shape:
        raise DataError(f"{path}: {rows.shape[0]} row ids but {cols.shape[0]} column ids")
    if "data" in st:
        values = _index_array(path, st["data"], "data")  # numeric and 1-D, like the ids
        if values.shape[0] != rows.shape[0]:
            raise DataError(f"{path}: {values.shape[0]} stored values but {rows.shape[0]} stored indices")
    return rows, cols, shape
