"""Readers of the FB15K-237 files that both FB15K-237 loaders use, with one validation policy.

Why: the KG-completion loader (``data_prep/kg/fb15k237.py``) and the entity-typing loader
(``data_prep/datasets/fb15k237_typing.py``) read the same three files (the ConvE triples
archive, ``FB15k_mid2name.txt``, ``entity2wikidata.json``). Each used to carry its own copy
of the four readers below, and the copies drifted apart (one stripped whitespace around a
field, the other refused it; one allowed blank lines only at the end; only one checked
Wikidata aliases). This is the one copy, with one policy:

- text is UTF-8; ``\\r\\n`` line ends are accepted; blank (or whitespace-only) lines are
  skipped anywhere;
- a malformed line is a one-line ``DataError`` naming the file (``archive:member`` inside
  the ConvE archive) and the line number; a field with surrounding whitespace is refused,
  never silently stripped;
- every failure to read the archive (not a tar, truncated, corrupt member, not UTF-8) is
  one ``DataError`` line naming the archive and, where known, the member.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

from benchmark.errors import DataError
from data_prep.datasets.sources import UNREADABLE, read_text

try:
    from lzma import LZMAError
except ImportError:  # a Python without lzma cannot open .xz archives at all
    LZMAError = tarfile.TarError  # type: ignore[assignment,misc]

Triple = tuple[str, str, str]
# Split -> member of the ConvE archive, in the order the triples are concatenated where one
# list is wanted (the typing loader's graph): changing it changes that loader's artifacts.
TRIPLE_MEMBERS = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}
_TAR_ERRORS = (tarfile.TarError, LZMAError, *UNREADABLE)


def _one_line(e: BaseException) -> str:
    """An exception as ``Type: message`` on one line (tarfile's open error spans several)."""
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


def data_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of the lines that are not blank, without a ``\\r`` line end."""
    return [(no, line.rstrip("\r")) for no, line in enumerate(text.split("\n"), start=1) if line.strip()]


def parse_triples(text: str, where: str) -> list[Triple]:
    """Tab-separated ``head relation tail`` lines of ``text``; ``where`` names it in errors.

    Written for speed (310k lines): each line is split once, and surrounding whitespace is
    looked for on the few thousand distinct names rather than on every field.
    """
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[Triple] = []
    for no, line in enumerate(lines, start=1):
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] and parts[1] and parts[2]:
            out.append((parts[0], parts[1], parts[2]))
        elif line.strip():
            raise DataError(f"{where}: line {no}: expected 'head<TAB>relation<TAB>tail', got {line[:80]!r}")
    bad = {x for x in {x for t in out for x in t} if x != x.strip()}
    if bad:  # slow path: the first line holding such a field
        no, field = next((no, f) for no, line in enumerate(lines, start=1) for f in line.split("\t") if f in bad)
        raise DataError(f"{where}: line {no}: field {field!r} has surrounding whitespace")
    return out


def read_triples_archive(path: Path) -> dict[str, list[Triple]]:
    """``{split: triples}`` for the train/valid/test members of the ConvE archive, read in memory."""
    try:
        tar = tarfile.open(path, "r:*")
    except _TAR_ERRORS as e:
        raise DataError(f"{path}: not a readable tar archive ({_one_line(e)})") from None
    out: dict[str, list[Triple]] = {}
    with tar:
        try:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
        except _TAR_ERRORS as e:
            raise DataError(f"{path}: truncated or corrupt tar archive ({_one_line(e)})") from None
        for split, name in TRIPLE_MEMBERS.items():
            if name not in members:
                have = ", ".join(sorted(members)) or "none"
                raise DataError(f"{path}: archive has no member {name} (members: {have})")
            try:  # members are regular files (isfile above), so extractfile gives a file object
                raw = tar.extractfile(members[name]).read()  # type: ignore[union-attr]
            except _TAR_ERRORS as e:  # the member runs past a truncated archive, or its data is corrupt
                raise DataError(f"{path}:{name}: truncated or corrupt archive member ({_one_line(e)})") from None
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                line = raw[: e.start].count(b"\n") + 1
                raise DataError(f"{path}:{name}: line {line}: not UTF-8 text ({e.reason})") from None
            out[split] = parse_triples(text, f"{path}:{name}")
    return out


def read_mid2name(path: Path) -> dict[str, str]:
    """``mid<TAB>name`` lines (names use underscores for spaces; the name is stripped)."""
    out: dict[str, str] = {}
    for no, line in data_lines(read_text(path)):
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].startswith("/"):
            raise DataError(f"{path}: line {no}: expected 'mid<TAB>name', got {line[:80]!r}")
        if parts[0] != parts[0].rstrip():
            raise DataError(f"{path}: line {no}: field {parts[0]!r} has surrounding whitespace")
        out[parts[0]] = parts[1].replace("_", " ").strip()
    return out


def read_wikidata(path: Path) -> dict[str, dict[str, Any]]:
    """``{mid: {label, description, alternatives, ...}}``; every error carries a line number.

    ``label`` and ``description`` are strings or null; ``alternatives``, when given and
    not null, a list of strings.
    """
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: line {e.lineno}: malformed JSON ({e.msg})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: line 1: top level must be an object mapping mids to entries")
    for mid, entry in data.items():
        if not isinstance(entry, dict):
            raise DataError(f"{path}: line {_line_of(text, mid)}: entry '{mid}' is not an object")
        for key in ("label", "description"):
            v = entry.get(key)
            if v is not None and not isinstance(v, str):
                raise DataError(f"{path}: line {_line_of(text, mid)}: entry '{mid}': '{key}' must be a string or null")
        alts = entry.get("alternatives")
        if alts is not None and not (isinstance(alts, list) and all(isinstance(a, str) for a in alts)):
            where = f"{path}: line {_line_of(text, mid)}: entry '{mid}'"
            raise DataError(f"{where}: 'alternatives' must be a list of strings or null")
    return data


def _line_of(text: str, key: str) -> int:
    """Line of the first occurrence of a JSON key (for error messages only)."""
    pos = text.find(json.dumps(key))
    return text.count("\n", 0, pos) + 1 if pos >= 0 else 1
