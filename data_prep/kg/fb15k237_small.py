"""Loader of the embedded FB15K-237 subset committed under ``data/fb15k237_small``.

Why a committed subset: tests, examples and CI need *real* multimodal KG data that loads
in well under a second on any machine with no network and no 400 MB of text-encoder
work. ``data_prep/kg/make_small_subset.py`` cuts it (recipe and counts in its
``manifest.json``); this module reads it back, validating every line and checking each
file's sha256 against the manifest so that a hand-edited or truncated file fails loudly.

Files: ``entities.tsv`` (mid, name), ``relations.tsv``, ``triples.npz`` (train/valid/test
``[n, 3]`` int16 ids), ``text_items.tsv`` (entity id, kind, text) with
``text_minilm_f16.npy`` (their MiniLM embeddings, float16), ``numeric_items.tsv``
(entity id, attribute, value; encoded at load time like the full dataset).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from benchmark.errors import DataError
from benchmark.registry import DATASETS
from data_prep.kg.dataset import SPLITS, KGDataset
from data_prep.datasets.sources import UNREADABLE, file_present, read_text
from data_prep.kg.fb15k237 import REPO_ROOT, encode_numeric_items
from data_prep.safe_npy import load_npy, load_npz

SUBSET_DIR = REPO_ROOT / "data" / "fb15k237_small"
MANIFEST = "manifest.json"
OUTPUT_FILES = ("entities.tsv", "relations.tsv", "triples.npz", "text_items.tsv", "text_minilm_f16.npy", "numeric_items.tsv")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _find_dir(root: str | Path | None) -> Path:
    if root is not None and str(root) != "" and not Path(root).expanduser().is_dir():
        raise DataError(f"data root {root} (dataset.root) does not exist or is not a directory")
    root = None if root is None or str(root) == "" else Path(root).expanduser()
    cands = ([] if root is None else [Path(root) / "fb15k237_small", Path(root)]) + [SUBSET_DIR]
    for c in cands:
        if file_present(c / MANIFEST):  # one that is there but unreadable: an error, not the next folder
            return c
    raise DataError(f"missing data file {MANIFEST} of fb15k237_small (looked in: {'; '.join(str(c) for c in cands)}); "
                    "regenerate it with: python -m data_prep.kg.make_small_subset")


def _read_tsv(path: Path, columns: int, header: tuple[str, ...]) -> list[list[str]]:
    rows: list[list[str]] = []
    has_header = False
    # universal newlines, as reading the file in text mode would; undecodable bytes are a DataError
    for no, line in enumerate(io.StringIO(read_text(path), newline=None), start=1):
        parts = line.rstrip("\n").split("\t")
        if no == 1:
            if tuple(parts) != header:
                raise DataError(f"{path}: line 1: expected header {'<TAB>'.join(header)!r}, got {line.rstrip()[:80]!r}")
            has_header = True
            continue
        if len(parts) != columns or not all(parts[:columns - 1]):
            raise DataError(f"{path}: line {no}: expected {columns} tab-separated fields, got {line.rstrip()[:80]!r}")
        rows.append(parts)
    if not has_header:
        raise DataError(f"{path}: empty file (expected header {'<TAB>'.join(header)!r})")
    return rows


def _int_field(path: Path, no: int, value: str, upper: int) -> int:
    try:
        v = int(value)
    except ValueError:
        raise DataError(f"{path}: line {no}: entity id {value!r} is not an integer") from None
    if not 0 <= v < upper:
        raise DataError(f"{path}: line {no}: entity id {v} outside [0, {upper})")
    return v


def load_fb15k237_small(root: str | Path | None = None, numeric_dim: int = 64, verify: bool = True) -> KGDataset:
    """Read the embedded subset from ``root`` (a folder holding it) or else the repo copy."""
    d = _find_dir(root)
    try:
        manifest = json.loads(read_text(d / MANIFEST))
    except json.JSONDecodeError as e:
        raise DataError(f"{d / MANIFEST}: line {e.lineno}: malformed JSON ({e.msg})") from None
    expected = manifest.get("outputs", {}) if isinstance(manifest, dict) else None
    if not isinstance(expected, dict) or not all(isinstance(v, dict) and isinstance(v.get("sha256"), str)
                                                 for v in expected.values()):
        raise DataError(f"{d / MANIFEST}: expected an object with 'outputs': {{file: {{sha256: ...}}}}")
    for name in OUTPUT_FILES:
        p = d / name
        if not file_present(p):
            raise DataError(f"missing data file {name} of fb15k237_small (looked in: {d})")
        if verify and name in expected and _sha256(p) != expected[name]["sha256"]:
            raise DataError(f"{p}: sha256 does not match {MANIFEST}; the file was modified or truncated")

    entities_rows = _read_tsv(d / "entities.tsv", 2, ("mid", "name"))
    entities = [r[0] for r in entities_rows]
    names = [r[1] for r in entities_rows]
    relations = [r[0] for r in _read_tsv(d / "relations.tsv", 1, ("relation",))]
    E = len(entities)
    try:
        with load_npz(d / "triples.npz") as z:
            splits = {s: torch.from_numpy(z[s].astype(np.int64)).reshape(-1, 3) for s in SPLITS}
    except UNREADABLE as e:
        raise DataError(f"{d / 'triples.npz'}: unreadable or missing a train/valid/test array "
                        f"({type(e).__name__}: {e})") from None
    for split, t in splits.items():
        if t.numel() and (int(t.min()) < 0 or int(t[:, [0, 2]].max()) >= E or int(t[:, 1].max()) >= len(relations)):
            raise DataError(f"{d / 'triples.npz'}: {split} triples hold an id outside the {E} entities of "
                            f"entities.tsv or the {len(relations)} relations of relations.tsv")

    text_rows = _read_tsv(d / "text_items.tsv", 3, ("entity", "kind", "text"))
    text_owner = [_int_field(d / "text_items.tsv", i + 2, r[0], E) for i, r in enumerate(text_rows)]
    try:
        text_feats = load_npy(d / "text_minilm_f16.npy")
    except UNREADABLE as e:
        raise DataError(f"{d / 'text_minilm_f16.npy'}: not a readable .npy array ({type(e).__name__}: {e})") from None
    if text_feats.ndim != 2 or text_feats.shape[0] != len(text_rows):
        raise DataError(f"{d / 'text_minilm_f16.npy'}: shape {text_feats.shape} does not match {len(text_rows)} text items")

    num_rows = _read_tsv(d / "numeric_items.tsv", 3, ("entity", "attribute", "value"))
    num_owner, num_attr, num_val = [], [], []
    for i, r in enumerate(num_rows):
        num_owner.append(_int_field(d / "numeric_items.tsv", i + 2, r[0], E))
        num_attr.append(r[1])
        try:
            num_val.append(float(r[2]))
        except ValueError:
            raise DataError(f"{d / 'numeric_items.tsv'}: line {i + 2}: value {r[2]!r} is not a number") from None

    return KGDataset(
        name="fb15k237_small",
        entities=entities,
        relations=relations,
        train=splits["train"], valid=splits["valid"], test=splits["test"],
        item_feats={"text": torch.from_numpy(text_feats.astype(np.float32)),
                    "numeric": torch.from_numpy(encode_numeric_items(num_attr, num_val, numeric_dim))},
        item_entity={"text": torch.tensor(text_owner, dtype=torch.long),
                     "numeric": torch.tensor(num_owner, dtype=torch.long)},
        item_text={"text": [r[2] for r in text_rows]},
        entity_names=names,
        meta={"text_kinds": [r[1] for r in text_rows], "manifest": manifest.get("recipe", {}), "numeric_dim": numeric_dim},
    )


@DATASETS.register("fb15k237_small")
class FB15k237Small:
    """Embedded real subset of FB15K-237 (~1,000 most connected entities, MiniLM text items, numeric items); loads offline in < 1 s."""

    @dataclass
    class Config:
        numeric_dim: int = field(default=64, metadata={"help": "width of the encoded numeric-attribute items", "min": 1, "max": 65_536})
        verify: bool = field(default=True, metadata={"help": "check each file's sha256 against manifest.json"})

    def __init__(self, config: "FB15k237Small.Config | None" = None) -> None:
        self.config = config or self.Config()

    def load(self, root: str | Path | None = None) -> KGDataset:
        return load_fb15k237_small(root, numeric_dim=self.config.numeric_dim, verify=self.config.verify)
