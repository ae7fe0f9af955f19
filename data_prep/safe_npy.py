"""Reading ``.npy`` and ``.npz`` files without trusting their headers.

``np.load`` allocates whatever an ``.npy`` header claims before it reads a byte of data:
a 100-byte file whose header says shape ``(2**40, 128)`` asks for 256 TiB and dies with a
``MemoryError`` (or, for a claim that fits in memory, takes it and then fails). Every
``.npy``/``.npz`` the data layer reads goes through this module, which reads the header
first and compares ``prod(shape) * itemsize`` with the bytes the file actually holds:

* ``.npy``: the file's size after the header (from the open file, so the bytes checked
  are the bytes read);
* ``.npz``: each member's uncompressed size in the zip directory, and that size against
  what the member's compressed bytes can decode to (stored members: equal; deflate: at
  most ~1032:1), so a forged directory entry cannot make the read allocate either.

A mismatch is a :class:`~benchmark.errors.DataError` naming the file (and member).
Object arrays are refused (nothing is unpickled). The other ways a file can be unreadable
(a bad magic string, a truncated zip, a bad CRC) raise what numpy and ``zipfile`` raise,
as ``np.load`` does, so each loader keeps wrapping them in its own one-line message.
"""

from __future__ import annotations

import math
import os
import tokenize
import zipfile
from pathlib import Path
from typing import IO, Any

import numpy as np
from numpy.lib import format as npformat

from benchmark.errors import DataError

# deflate cannot expand more than ~1032:1; the slack covers headers of tiny members
_DEFLATE_MAX_RATIO = 1100
_DEFLATE_SLACK = 4096


def _read_header(fp: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from an ``.npy`` header; leaves ``fp`` at the first data byte.

    A header that does not parse is a ``ValueError`` on every numpy: 2.4 says so itself,
    but 2.5 lets the tokenizer's ``TokenError`` (and a ``SyntaxError``) escape, which the
    loaders' ``except ValueError`` would miss (found on a GPU machine's numpy 2.5.2).
    """
    try:
        return _parse_header(fp)
    except (SyntaxError, tokenize.TokenError) as e:
        raise ValueError(f"Cannot parse header: {e}") from None


def _parse_header(fp: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    version = npformat.read_magic(fp)
    if version == (1, 0):
        shape, _, dtype = npformat.read_array_header_1_0(fp)
    elif version == (2, 0):
        shape, _, dtype = npformat.read_array_header_2_0(fp)
    else:  # (3, 0): utf-8 field names; numpy reads it with the same private helper
        reader = getattr(npformat, "_read_array_header", None)
        if reader is None:
            from numpy.lib import _format_impl

            reader = _format_impl._read_array_header
        shape, _, dtype = reader(fp, version)
    return tuple(shape), dtype


def check_header(shape: tuple[int, ...], dtype: np.dtype, data_bytes: int, where: str) -> None:
    """DataError naming ``where`` unless ``shape`` x ``dtype`` is exactly ``data_bytes`` of plain data."""
    if dtype.hasobject:
        raise DataError(f"{where}: holds Python objects (dtype {dtype}); only plain numeric arrays are read")
    if any(int(s) < 0 for s in shape):
        raise DataError(f"{where}: header claims a negative dimension in shape {shape}")
    need = math.prod(int(s) for s in shape) * dtype.itemsize
    if need != data_bytes:
        raise DataError(f"{where}: header claims shape {shape} of {dtype} ({need} bytes), "
                        f"but the file holds {data_bytes} bytes of array data")


def load_npy(path: str | Path) -> np.ndarray:
    """An ``.npy`` array whose header matches the file's size (else DataError naming the file).

    The same as ``np.load(path, allow_pickle=False)`` for a well-formed file; read errors
    other than a size mismatch (bad magic, a directory, ...) propagate as numpy raises them.
    """
    p = Path(path)
    with open(p, "rb") as fp:
        size = os.fstat(fp.fileno()).st_size
        shape, dtype = _read_header(fp)
        check_header(shape, dtype, size - fp.tell(), str(p))
        fp.seek(0)
        return npformat.read_array(fp, allow_pickle=False)


class NpzArchive:
    """An ``.npz`` archive read member by member, each header checked before its array is read.

    Used like ``np.load(path, allow_pickle=False)`` on an ``.npz``: ``files`` lists the
    arrays, ``z[key]`` reads one (a missing key is a ``KeyError``), and it is a context
    manager that closes the file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fp = open(self.path, "rb")
        try:
            self._size = os.fstat(self._fp.fileno()).st_size
            self._zip = zipfile.ZipFile(self._fp)
            self._members: dict[str, zipfile.ZipInfo] = {}
            for info in self._zip.infolist():
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                self._members[key] = info
        except BaseException:
            self._fp.close()
            raise
        self.files = list(self._members)

    def __enter__(self) -> NpzArchive:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._zip.close()
        finally:
            self._fp.close()

    def __contains__(self, key: object) -> bool:
        return key in self._members

    def __iter__(self):  # noqa: ANN204 - like a dict: the keys
        return iter(self.files)

    def __len__(self) -> int:
        return len(self.files)

    def keys(self) -> list[str]:
        return list(self.files)

    def _check_member(self, info: zipfile.ZipInfo, where: str) -> None:
        if info.compress_size > self._size:
            raise DataError(f"{where}: the zip directory claims {info.compress_size} compressed bytes, "
                            f"more than the whole archive ({self._size} bytes)")
        if info.compress_type == zipfile.ZIP_STORED:
            if info.file_size != info.compress_size:
                raise DataError(f"{where}: stored member claims {info.file_size} bytes "
                                f"but holds {info.compress_size}")
        elif info.compress_type == zipfile.ZIP_DEFLATED:
            if info.file_size > info.compress_size * _DEFLATE_MAX_RATIO + _DEFLATE_SLACK:
                raise DataError(f"{where}: the zip directory claims {info.file_size} bytes from "
                                f"{info.compress_size} compressed ones, more than deflate can produce")
        else:
            raise DataError(f"{where}: compressed with zip method {info.compress_type}; "
                            "numpy writes stored or deflated members only")

    def __getitem__(self, key: str) -> np.ndarray:
        info = self._members[key]  # KeyError, as np.load's NpzFile
        where = f"{self.path}[{key}]"
        if not info.filename.endswith(".npy"):
            raise DataError(f"{where}: member {info.filename!r} is not an .npy array")
        self._check_member(info, where)
        with self._zip.open(info) as member:
            shape, dtype = _read_header(member)
            check_header(shape, dtype, info.file_size - member.tell(), where)
        with self._zip.open(info) as member:
            return npformat.read_array(member, allow_pickle=False)


def load_npz(path: str | Path) -> NpzArchive:
    """An :class:`NpzArchive` (use it in a ``with`` block, as ``np.load`` of an ``.npz``)."""
    return NpzArchive(path)

