"""Shared plumbing of the real-data loaders: finding files, checking them, caching builds.

Why one module: every real dataset must behave the same way when a file is missing,
corrupt or malformed, so that a user gets one kind of message whatever the dataset.

* **Locating.** A file is looked for, in order, in the loader's ``root`` (``dataset.root``),
  in ``$FEDMM_DATA_ROOT`` and in the offline mirror ``<repo>/../shared/data``; in each
  place both as ``<place>/<dataset dir>/<name>`` and ``<place>/<name>`` (so ``root`` may
  point at the data folder or at the dataset's own folder). A missing file is a
  ``DataError`` that names the file and every path tried, plus the public source. A file
  that is there but unreadable (a directory, a broken or looping symlink, no permission)
  is a ``DataError`` naming it: the search never goes on to the next place for that file.
* **Verifying.** Files with a published or pinned sha256 are checked; a mismatch is an
  error naming the file. Files whose source publishes no checksum carry ``sha256=None``
  and are not verified (each loader's docstring says which).
* **Downloading** is optional and never needed offline: with ``download=True`` and a
  writable ``root``, a missing file that has a direct public URL is fetched with
  ``urllib`` into ``<root>/<dataset dir>/`` and verified before it becomes visible.
* **Validating.** Small readers for the formats the loaders share (``.npy`` matrices,
  text lines) raise ``DataError`` naming the file (and line, for text) and the reason.
* **Graph helpers** used by several loaders: undirected edge lists, item-item
  co-interaction graphs and kNN graphs.
* **Caching.** Building a dataset from raw files can take seconds; the result is stored
  under a cache directory keyed by the sha256 of every input file plus the loader's
  config, so a changed file or option can never reuse a stale build.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from benchmark import state_codec
from benchmark.errors import DataError, first_line, warn_rebuild
from benchmark.federation import GraphDataset
from data_prep.safe_npy import load_npy, load_npz

REPO_ROOT = Path(__file__).resolve().parents[2]
MIRROR = REPO_ROOT.parent / "shared" / "data"
ENV_ROOT = "FEDMM_DATA_ROOT"
ENV_CACHE = "FEDMM_CACHE_DIR"
# Not next to the data: the mirror is a shared read-only folder that no run may write to.
DEFAULT_CACHE = REPO_ROOT / ".cache" / "fedmm" / "datasets"
# What numpy / zipfile / gzip raise for a truncated, emptied or bit-flipped file. An .npz is a
# zip archive whose members are read lazily, so a bad CRC surfaces only when an array is read.
UNREADABLE = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)


@dataclass(frozen=True)
class RemoteFile:
    """One data file: its path inside the dataset folder, public URL and sha256.

    ``url`` is None when the source offers no direct download (an archive behind a web
    page, a file one must extract features into); ``sha256`` is None when no checksum is
    published, and then the file is not verified. ``source`` tells a human where the file
    comes from, for the missing-file message.
    """

    name: str
    url: str | None = None
    sha256: str | None = None
    source: str = ""


# --------------------------------------------------------------------------- locating


def search_places(root: str | Path | None, download: bool = False) -> list[Path]:
    """The directories searched, in order: ``root``, ``$FEDMM_DATA_ROOT``, the mirror.

    A root the user named explicitly (``dataset.root`` or ``$FEDMM_DATA_ROOT``) must be an
    existing directory: a typo there would otherwise fall back to the mirror unnoticed.
    The exception is ``dataset.root`` with ``download=True``, which is created on download.
    Only the implicit mirror may be absent.
    """
    places: list[Path] = []
    if root is not None and str(root) != "":
        p = Path(root).expanduser()
        if not download:
            _require_dir(p, "dataset.root")
        places.append(p)
    env = os.environ.get(ENV_ROOT)
    if env:
        p = Path(env).expanduser()
        _require_dir(p, f"${ENV_ROOT}")
        places.append(p)
    places.append(MIRROR)
    out: list[Path] = []
    for p in places:
        if p not in out:
            out.append(p)
    return out


def _require_dir(path: Path, what: str) -> None:
    """DataError naming ``path`` when an explicitly configured data root is not a directory."""
    if not path.is_dir():
        state = "is not a directory" if path.exists() else "does not exist"
        raise DataError(f"data root {path} ({what}) {state}")


def file_present(path: Path) -> bool:
    """Whether a data file is at ``path``: True for a readable regular file, False when
    nothing is there, and a DataError naming it when something is there that cannot be read.

    A directory, a broken or looping symbolic link, a special file or a file without read
    permission in a data root is an error, not an absence: the search must not go on to the
    next root and silently mix files of two releases (one root's audio, another's images).
    A parent that is not a directory (``<root>/<dataset dir>`` is a file) means absent.
    """
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:  # a looping symlink or an unreadable folder on the way
        raise DataError(f"data file {path} cannot be reached ({e.strerror}); "
                        "fix or remove it (other data roots are not searched for it)") from None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DataError(f"data file {path} is a broken symbolic link (to {os.readlink(path)}); "
                        "fix or remove it (other data roots are not searched for it)") from None
    except OSError as e:
        what = "a symbolic link loop" if e.errno == errno.ELOOP else f"unreadable ({e.strerror})"
        raise DataError(f"data file {path} is {what}; fix or remove it (other data roots are not searched for it)") from None
    if stat.S_ISDIR(st.st_mode):
        raise DataError(f"data file {path} is a directory, not a file; "
                        "fix or remove it (other data roots are not searched for it)")
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"data file {path} is not a regular file; fix or remove it (other data roots are not searched for it)")
    try:
        with open(path, "rb"):
            pass
    except OSError as e:
        raise DataError(f"data file {path} is not readable ({e.strerror}); "
                        "fix or remove it (other data roots are not searched for it)") from None
    return True


def candidate_paths(name: str, dataset_dir: str, root: str | Path | None) -> list[Path]:
    """Every path at which ``name`` is looked for, in search order."""
    out: list[Path] = []
    for place in search_places(root, download=True):  # only lists paths: never fails on a root
        for cand in (place / dataset_dir / name, place / name):
            if cand not in out:
                out.append(cand)
    return out


_sha_memo: dict[tuple[str, int, int], str] = {}


def sha256_file(path: str | Path) -> str:
    """sha256 of a file, memoized per (path, size, mtime) within the process."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _sha_memo:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _sha_memo[key] = h.hexdigest()
    return _sha_memo[key]


def download_file(spec: RemoteFile, dest_dir: Path, timeout: float = 60.0) -> Path:
    """Fetch ``spec.url`` into ``dest_dir/spec.name``; verify the sha256 when one is known.

    The download goes to a temporary name first, so a failed or corrupt transfer never
    leaves a file that a later run would trust.
    """
    if not spec.url:
        raise DataError(f"{spec.name} has no direct download; get it from {spec.source or 'its publisher'}")
    dest = dest_dir / spec.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".part{os.getpid()}")
    try:
        with urllib.request.urlopen(spec.url, timeout=timeout) as resp, open(tmp, "wb") as out:
            for block in iter(lambda: resp.read(1 << 20), b""):
                out.write(block)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise DataError(f"could not download {spec.name} from {spec.url}: {e}") from None
    if spec.sha256 is not None:
        got = sha256_file(tmp)
        if got != spec.sha256:
            tmp.unlink(missing_ok=True)
            raise DataError(f"downloaded {spec.name} from {spec.url} has sha256 {got}, expected {spec.sha256}")
    os.replace(tmp, dest)
    return dest


def check_sha(path: Path, spec: RemoteFile) -> None:
    """DataError naming the file when its sha256 differs from the pinned one (None = unpinned)."""
    if spec.sha256 is None:
        return
    got = sha256_file(path)
    if got != spec.sha256:
        where = f" (source {spec.url})" if spec.url else ""
        raise DataError(
            f"{path}: sha256 {got} does not match the pinned {spec.sha256}{where}; "
            "the file is corrupt or a different version (set dataset.verify=false to use it anyway)"
        )


def missing_error(specs: Sequence[RemoteFile], dataset_dir: str, root: str | Path | None) -> DataError:
    """The error for files found nowhere: each name, every path tried, where to get it."""
    names = " or ".join(repr(s.name) for s in specs)
    tried = "; ".join(str(p) for s in specs for p in candidate_paths(s.name, dataset_dir, root))
    srcs = [s.url or s.source for s in specs if s.url or s.source]
    src = f" (source: {', '.join(dict.fromkeys(srcs))})" if srcs else ""
    downloadable = any(s.url for s in specs)
    hint = "put it in one of those places or set " + ENV_ROOT
    if downloadable:
        hint += ", or set dataset.download=true with dataset.root to fetch it"
    return DataError(f"missing data file {names} of dataset '{dataset_dir}' (looked in: {tried}); {hint}{src}")


def locate(
    spec: RemoteFile,
    dataset_dir: str,
    root: str | Path | None = None,
    download: bool = False,
    verify: bool = True,
) -> Path:
    """Path of a dataset file; missing and not downloadable -> DataError listing every place tried."""
    return locate_any([spec], dataset_dir, root, download, verify)[1]


def locate_any(
    specs: Sequence[RemoteFile],
    dataset_dir: str,
    root: str | Path | None = None,
    download: bool = False,
    verify: bool = True,
) -> tuple[RemoteFile, Path]:
    """The first of several alternative files that exists (e.g. a converted file, else the original).

    Places are searched in order and, within a place, the alternatives in order, so a
    file in ``root`` always wins over one in the mirror. With ``download=True`` the first
    alternative that has a URL is fetched into ``root``.
    """
    for place in search_places(root, download):
        for spec in specs:
            for cand in (place / dataset_dir / spec.name, place / spec.name):
                if file_present(cand):
                    if verify:
                        check_sha(cand, spec)
                    return spec, cand
    if download:
        for spec in specs:
            if spec.url:
                if root is None or str(root) == "":
                    raise DataError(
                        f"cannot download {spec.name}: set dataset.root to a writable directory to download into"
                    )
                return spec, download_file(spec, Path(root).expanduser() / dataset_dir)
    raise missing_error(specs, dataset_dir, root)


# --------------------------------------------------------------------------- validated readers


def read_text(path: Path) -> str:
    """A UTF-8 text file; undecodable bytes are an error naming the file and line."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(f"{path}: line {line}: not UTF-8 text ({e.reason})") from None


def load_matrix(path: Path, rows: int | None = None, key: str | None = None) -> np.ndarray:
    """A 2-D numeric array from ``.npy`` (or member ``key`` of an ``.npz``), as float32.

    Non-finite values are kept here (they mark missing rows, see ``row_availability``).
    """
    try:
        if path.suffix == ".npz":
            with load_npz(path) as z:
                if key not in z.files:
                    raise DataError(f"{path}: archive has no array '{key}' (arrays: {', '.join(z.files)})")
                arr = z[key]
        else:
            arr = load_npy(path)
    except DataError:
        raise
    except UNREADABLE as e:
        raise DataError(f"{path}: not a readable numpy array file ({type(e).__name__}: {e})") from None
    where = f"{path}[{key}]" if key else str(path)
    if arr.ndim != 2:
        raise DataError(f"{where}: expected a 2-D feature matrix, got shape {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise DataError(f"{where}: expected numeric features, got dtype {arr.dtype}")
    if rows is not None and arr.shape[0] != rows:
        raise DataError(f"{where}: has {arr.shape[0]} rows, expected {rows} (one per node)")
    return arr.astype(np.float32, copy=False)


def row_availability(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(features with non-finite rows zeroed, availability) of a feature matrix.

    A row is *naturally missing* when it is all zeros (how the public releases pad items
    without an image or text) or holds any NaN/inf (a failed extraction).
    """
    finite = np.isfinite(x).all(axis=1)
    nonzero = np.abs(np.where(np.isfinite(x), x, 0.0)).sum(axis=1) > 0
    avail = finite & nonzero
    if not finite.all():
        x = x.copy()
        x[~finite] = 0.0
    return x, avail


# --------------------------------------------------------------------------- graphs


def undirected_edge_index(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> Tensor:
    """``[2, 2E]`` long tensor: both directions of each distinct pair, no self-loops, sorted."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_nodes):
        raise ValueError("edge endpoint out of range")
    keep = src != dst
    lo, hi = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    keys = np.unique(lo * num_nodes + hi)
    a, b = keys // num_nodes, keys % num_nodes
    both = np.stack([np.concatenate([a, b]), np.concatenate([b, a])])
    order = np.lexsort((both[1], both[0]))
    return torch.from_numpy(np.ascontiguousarray(both[:, order]))


def co_interaction_pairs(
    users: np.ndarray,
    items: np.ndarray,
    num_items: int,
    min_common_users: int = 1,
    top_k: int = 0,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Item pairs that share at least ``min_common_users`` users, optionally top-k per item.

    Duplicate (user, item) interactions count once. With ``top_k > 0`` every item keeps
    its ``top_k`` neighbours with the most shared users (ties: the less popular
    neighbour first, as it is the more specific evidence, then the lower id) and the
    graph is the union of those choices, so every item with any co-interaction keeps at
    least one edge while hubs created by heavy users are thinned out.
    Returns ``(src, dst, stats)`` with ``src < dst``, unique pairs.
    """
    import scipy.sparse as sp

    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    num_users = int(users.max()) + 1 if users.size else 0
    a = sp.csr_matrix((np.ones(users.size, dtype=np.float32), (users, items)), shape=(num_users, num_items))
    a.data[:] = 1.0  # duplicates were summed: count each (user, item) once
    co = (a.T @ a).tocsr()
    co = (co - sp.diags(co.diagonal())).tocsr()  # no item is its own neighbour
    co.data = np.rint(co.data)
    co.data[co.data < min_common_users] = 0
    co.eliminate_zeros()  # now: off-diagonal pairs with enough shared users
    co.sort_indices()
    candidate_pairs = int(co.nnz // 2)
    indptr, c, v = co.indptr, co.indices.astype(np.int64), co.data.astype(np.int64)
    if top_k > 0 and co.nnz:
        pop = np.asarray(a.sum(axis=0)).ravel().astype(np.int64)
        # within a row, smaller key = better: more shared users, then less popular, then lower id
        vmax, pmax = int(v.max()) + 1, int(pop.max()) + 1
        if float(num_items) * vmax * pmax < 2.0**62:
            key = ((vmax - 1 - v) * pmax + pop[c]) * num_items + c
        else:  # too large for one int64: the rank in a multi-key sort orders the same way
            key = np.lexsort((c, pop[c], -v)).argsort()
        sel: list[np.ndarray] = []
        for i in range(num_items):
            lo, hi = indptr[i], indptr[i + 1]
            if hi - lo <= top_k:
                sel.append(np.arange(lo, hi))
            else:
                sel.append(lo + np.argpartition(key[lo:hi], top_k - 1)[:top_k])
        keep = np.concatenate(sel) if sel else np.empty(0, np.int64)
        rows = np.repeat(np.arange(num_items), np.diff(indptr))[keep]
        cols = c[keep]
    else:
        rows, cols = np.repeat(np.arange(num_items), np.diff(indptr)), c
    lo_, hi_ = np.minimum(rows, cols), np.maximum(rows, cols)
    keys = np.unique(lo_ * num_items + hi_)
    stats = {"candidate_pairs": candidate_pairs, "kept_pairs": int(keys.size)}
    return keys // num_items, keys % num_items, stats


def knn_pairs(x: np.ndarray, k: int, valid: np.ndarray | None = None, block: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """Union-symmetrized k-nearest-neighbour pairs by cosine similarity (``src < dst``).

    Rows marked invalid (naturally missing features) neither get nor give neighbours.
    Computed in row blocks so that memory stays ``O(block * N)``.
    """
    n = x.shape[0]
    idx = np.arange(n) if valid is None else np.flatnonzero(valid)
    if k <= 0 or idx.size < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    t = torch.from_numpy(np.ascontiguousarray(x[idx], dtype=np.float32))
    t = t / t.norm(dim=1, keepdim=True).clamp_min(1e-12)
    kk = min(k, idx.size - 1)
    src_l, dst_l = [], []
    for s in range(0, idx.size, block):
        sim = t[s : s + block] @ t.T
        rows = torch.arange(s, min(s + block, idx.size))
        sim[rows - s, rows] = -math.inf  # never your own neighbour
        nb = sim.topk(kk, dim=1).indices
        src_l.append(rows.repeat_interleave(kk).numpy())
        dst_l.append(nb.reshape(-1).numpy())
    a, b = idx[np.concatenate(src_l)], idx[np.concatenate(dst_l)]
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keys = np.unique(lo.astype(np.int64) * n + hi)
    return keys // n, keys % n


def degree_stats(edge_index: Tensor, num_nodes: int) -> dict[str, float]:
    """Mean / median / max degree and isolated-node count, for ``meta`` and reports."""
    deg = torch.bincount(edge_index[0], minlength=num_nodes).double()
    return {
        "mean_degree": float(deg.mean()) if num_nodes else 0.0,
        "median_degree": float(deg.median()) if num_nodes else 0.0,
        "max_degree": int(deg.max()) if num_nodes else 0,
        "isolated_nodes": int((deg == 0).sum()),
    }


# --------------------------------------------------------------------------- caching


def cache_root(cache_dir: str | None) -> Path:
    """``cache_dir`` if set, else ``$FEDMM_CACHE_DIR``, else ``<repo>/.cache/fedmm/datasets``."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    env = os.environ.get(ENV_CACHE)
    if not env:
        return DEFAULT_CACHE
    root = Path(env).expanduser()
    if root.exists() and not root.is_dir():
        raise DataError(f"{ENV_CACHE}={env[:200]} is not a directory")
    return root


def cache_key(loader: str, version: int, config: dict[str, Any], files: Iterable[Path]) -> str:
    """sha256 over the loader id, its config and the content hash of every input file."""
    payload = {
        "loader": loader,
        "version": version,
        "config": config,
        "files": sorted((p.name, sha256_file(p)) for p in files),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _plain(obj: Any) -> Any:
    """Meta made of plain containers, numbers and tensors (tuples become lists)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return torch.from_numpy(obj)
    return obj


def save_dataset(ds: GraphDataset, path: Path) -> None:
    """Write a built dataset atomically (a concurrent reader never sees half a file)."""
    blob = {
        "name": ds.name,
        "features": dict(ds.features),
        "edge_index": ds.edge_index,
        "y": ds.y,
        "num_classes": ds.num_classes,
        "available": ds.available,
        "train_mask": ds.train_mask,
        "val_mask": ds.val_mask,
        "test_mask": ds.test_mask,
        "meta": _plain(ds.meta),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_bytes(state_codec.pack(blob))  # safetensors + JSON: reading it back unpickles nothing
    os.replace(tmp, path)


def load_dataset(path: Path) -> GraphDataset | None:
    """A cached dataset, or None when the file is unreadable (then it is rebuilt)."""
    try:
        blob = state_codec.unpack_decode(path.read_bytes())[1]
        return GraphDataset(**blob)
    except Exception as e:  # a torn or foreign file: rebuild rather than fail
        warn_rebuild(path, f"is unreadable ({type(e).__name__})")
        return None


def cached_build(
    enabled: bool,
    cache_dir: str | None,
    loader: str,
    version: int,
    config: dict[str, Any],
    files: Sequence[Path],
    build: Callable[[], GraphDataset],
) -> GraphDataset:
    """``build()``, or its stored result for the same input files and config."""
    if not enabled:
        return build()
    key = cache_key(loader, version, config, files)
    path = cache_root(cache_dir) / loader / f"{key[:32]}.safetensors"
    if path.is_file():
        ds = load_dataset(path)
        if ds is not None:
            ds.meta["cache_file"] = str(path)
            return ds
    ds = build()
    try:
        save_dataset(ds, path)
    except OSError:
        pass  # a read-only cache location only costs speed
    return ds


def config_for_key(cfg: Any, skip: Iterable[str] = ("cache", "cache_dir", "download", "verify")) -> dict[str, Any]:
    """The options of a loader Config that change what is built (not where or whether cached)."""
    from dataclasses import asdict

    return {k: v for k, v in asdict(cfg).items() if k not in set(skip)}


# --------------------------------------------------------------------------- shared formats


def torch_load_plain(path: Path) -> Any:
    """``torch.load`` restricted to tensors, containers, numbers and numpy arrays (no code runs).

    The public graph releases save lists, tensors or numpy arrays with ``torch.save``;
    anything else (a pickled DGL graph, arbitrary objects) is refused with a DataError.
    """
    import pickle

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, AttributeError, TypeError) as first:
        numpy_globals: list[Any] = [np.ndarray, np.dtype]
        for modname in ("numpy._core.multiarray", "numpy.core.multiarray"):
            try:
                mod = __import__(modname, fromlist=["_reconstruct"])
                numpy_globals.append(mod._reconstruct)
            except ImportError:
                continue
        numpy_globals += [type(np.dtype(t)) for t in ("f4", "f8", "i4", "i8", "u1", "bool", "f2")]
        try:
            with torch.serialization.safe_globals(numpy_globals):
                return torch.load(path, map_location="cpu", weights_only=True)
        except Exception:
            raise DataError(
                f"{path}: not a plain tensor/list file readable without running code ({first_line(first)}); "
                "a DGL graph must first be converted to an edge list"
            ) from None
    except (OSError, EOFError, ValueError) as e:
        raise DataError(f"{path}: not a readable torch file ({e})") from None


def as_int_pairs(obj: Any, where: str) -> np.ndarray:
    """A ``[2, E]`` int64 edge array from a ``[2, E]`` / ``[E, 2]`` tensor, array or list,
    or a dict holding one under ``edge_index`` / ``edges``."""
    if isinstance(obj, dict):
        for key in ("edge_index", "edges"):
            if key in obj:
                return as_int_pairs(obj[key], f"{where}[{key}]")
        raise DataError(f"{where}: dict has no 'edge_index' or 'edges' entry (keys: {', '.join(map(str, obj))})")
    if isinstance(obj, (tuple, list)) and len(obj) == 2 and all(isinstance(t, (Tensor, np.ndarray)) for t in obj):
        obj = [np.asarray(t) for t in obj]  # (src, dst), as DGL's g.edges() returns
    arr = obj.numpy() if isinstance(obj, Tensor) else np.asarray(obj)
    if arr.ndim != 2 or 2 not in arr.shape:
        raise DataError(f"{where}: expected an edge list of shape [2, E] or [E, 2], got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if not np.issubdtype(arr.dtype, np.floating) or not np.all(np.mod(arr, 1) == 0):
            raise DataError(f"{where}: edge endpoints must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    return arr if arr.shape[0] == 2 else arr.T  # a 2 x 2 array is read as [2, E]


def read_edge_list(path: Path) -> np.ndarray:
    """``[2, E]`` edges from ``.pt``/``.pth`` (torch), ``.npy`` or text (``u v`` / ``u,v`` lines)."""
    if path.suffix in (".pt", ".pth"):
        return as_int_pairs(torch_load_plain(path), str(path))
    if path.suffix == ".npy":
        try:
            return as_int_pairs(load_npy(path), str(path))
        except UNREADABLE as e:
            raise DataError(f"{path}: not a readable .npy array ({e})") from None
    src: list[int] = []
    dst: list[int] = []
    for no, line in enumerate(read_text(path).split("\n"), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        parts = s.replace(",", " ").replace("\t", " ").split()
        try:
            if len(parts) < 2:
                raise ValueError
            u, v = int(parts[0]), int(parts[1])
        except ValueError:
            if no == 1:
                continue  # a header line
            raise DataError(f"{path}: line {no}: expected two integer node ids, got {s[:80]!r}") from None
        src.append(u)
        dst.append(v)
    return np.array([src, dst], dtype=np.int64).reshape(2, -1)


def check_edges(edges: np.ndarray, num_nodes: int, where: str) -> None:
    """Every endpoint must be a node id in ``[0, num_nodes)``."""
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        bad = int(np.flatnonzero(((edges < 0) | (edges >= num_nodes)).any(axis=0))[0])
        raise DataError(f"{where}: edge {bad} ({edges[0, bad]}, {edges[1, bad]}) has an endpoint outside [0, {num_nodes})")


def encode_strings(texts: Sequence[str], encoder: str, dim: int, cache_dir: str | None) -> tuple[np.ndarray, np.ndarray]:
    """(features, availability) for raw strings; an empty string is a naturally missing text.

    ``hashing`` and ``minilm`` are the encoders of ``data_prep.features`` (imported only
    here, so loaders that read precomputed features never pay for it).
    """
    from data_prep.features import encode_texts

    avail = np.array([bool(t.strip()) for t in texts], dtype=np.bool_)
    out = encode_texts(list(texts), encoder=encoder, cache_dir=cache_root(cache_dir) / "text", dim=dim).numpy()
    out = np.ascontiguousarray(out, dtype=np.float32)
    out[~avail] = 0.0
    return out, avail
