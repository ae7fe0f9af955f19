"""NineRec video-recommendation datasets (DY, Bili_Dance, Bili_Food, KU, ...) as item graphs.

Why: DY and Bili_Dance are the link-prediction graphs and KU / Bili_Food the
modality-matching graphs of the FedMPO / FedMGS protocols. They are not available
offline; this loader reads NineRec's public layout, tested on small generated files.

Source: westlake-repl/NineRec (TPAMI 2024). The nine downstream datasets are released as
one archive behind a Google Drive link (``NINEREC_URL``), so there is no direct per-file
download and no published checksum: files are found locally only and not verified.

Layout, per dataset folder ``<Name>/`` (option ``subset``; file names are options in which
``{name}`` expands to the subset)::

    <Name>/<Name>_pair.csv        user-item interactions, no header:
                                  item_id,user_id,timestamp (NineRec's column order)
    <Name>/<Name>_item.csv        items, no header: item_id,title[,title_en]
    <Name>/<Name>_image_feat.npy  [num_items, d] cover-image features, rows in item-file order
    <Name>/<Name>_text_feat.npy   [num_items, d] title features (text_encoder: file), or the
                                  titles are encoded here (text_encoder: hashing | minilm;
                                  the English title when present)

NineRec ships raw covers and titles, not features; the image features are whatever
encoder the user ran over ``<Name>_cover/`` (the papers use 512-d CLIP), saved in item
order. A header row in either CSV is recognised and skipped.

Graph. Nodes are the items of the item file. Two items are linked when at least
``min_common_users`` users interacted with both; each item keeps its ``top_k`` neighbours
with most shared users (same construction and default as ``tiktok``, giving the ~8 mean
degree the protocols report for DY, Bili_Dance and KU). All interactions are used: the
graph is the object of link prediction, whose edge split the task makes.

Availability: an all-zero / non-finite feature row, or an empty title when titles are
encoded, is naturally missing.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmark.errors import DataError
from benchmark.federation import GraphDataset
from benchmark.registry import DATASETS
from data_prep.datasets.sources import (
    RemoteFile,
    cached_build,
    co_interaction_pairs,
    config_for_key,
    degree_stats,
    encode_strings,
    load_matrix,
    locate,
    read_text,
    row_availability,
    undirected_edge_index,
)

DATASET_DIR = "ninerec"
LOADER_VERSION = 1
NINEREC_NAMES = ("DY", "Bili_Dance", "Bili_Food", "KU", "Bili_Movie", "Bili_Cartoon", "Bili_Music", "QB", "TN")
# "Downstream Datasets" link of the NineRec README (westlake-repl/NineRec @ baef644b; the
# earlier link 1C58i4o4S-... was replaced there in commit 3fd7308a, April 2024).
NINEREC_URL = "https://drive.google.com/file/d/15RlthgPczrFbP4U7l6QflSImK5wSGP5K/view"
_SOURCE = f"NineRec (westlake-repl/NineRec), archive at {NINEREC_URL}; no checksum published"
# Feature files are not part of the release (it ships <Name>_cover/ JPGs and <Name>_item.csv titles).
_FEATURES = ("not in the NineRec release, which ships {name}_cover/ images and {name}_item.csv titles: "
             "save {what} in item-file order under this name or point {option} at them{alt}")
TEXT_ENCODERS = ("file", "hashing", "minilm")
_HEADER_WORDS = {"item", "item_id", "video_id", "user", "user_id", "timestamp", "title", "title_en", "id"}


@DATASETS.register("ninerec")
class NineRec:
    """NineRec item-item co-interaction graph with cover-image and title features, no labels."""

    @dataclass
    class Config:
        subset: str = field(default="DY", metadata={"help": "NineRec dataset: DY, Bili_Dance, Bili_Food, KU, ...", "choices": NINEREC_NAMES})
        pair_file: str = field(default="{name}_pair.csv", metadata={"help": "interaction file: item,user,timestamp"})
        item_file: str = field(default="{name}_item.csv", metadata={"help": "item file: item_id,title[,title_en]"})
        image_feature: str = field(default="{name}_image_feat.npy", metadata={"help": "[items, d] image features"})
        text_feature: str = field(default="{name}_text_feat.npy", metadata={"help": "[items, d] title features"})
        text_encoder: str = field(
            default="file", metadata={"help": "file (read text_feature) or hashing / minilm (encode the titles)", "choices": TEXT_ENCODERS}
        )
        text_dim: int = field(default=256, metadata={"help": "size of the hashing title encoding", "min": 1, "max": 65_536})
        min_common_users: int = field(default=1, metadata={"help": "shared users needed to link two items", "min": 1, "max": 50_000_000})
        top_k: int = field(default=5, metadata={"help": "keep each item's top-k neighbours by shared users (0 = all)", "min": 0, "max": 10_000})
        cache: bool = field(default=True, metadata={"help": "reuse the built graph for identical input files"})
        cache_dir: str | None = field(default=None, metadata={"help": "where built graphs are cached"})

    def __init__(self, cfg: Config | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def files(self) -> dict[str, RemoteFile]:
        """The files this configuration reads (all local: NineRec has no per-file download)."""
        c = self.cfg
        names = {"pairs": c.pair_file, "items": c.item_file, "image": c.image_feature}
        if c.text_encoder == "file":
            names["text"] = c.text_feature
        sources = {"image": _FEATURES.format(what="cover-image features", name=c.subset, option="dataset.image_feature",
                                             alt=""),
                   "text": _FEATURES.format(what="title features", name=c.subset, option="dataset.text_feature",
                                            alt=", or set dataset.text_encoder=hashing|minilm to encode the titles")}
        return {k: RemoteFile(f"{c.subset}/{v.format(name=c.subset)}", None, None, sources.get(k, _SOURCE))
                for k, v in names.items()}

    def load(self, root: Path | None = None) -> GraphDataset:
        """Locate the files and build (or reuse the cached build)."""
        c = self.cfg
        paths = {k: locate(spec, DATASET_DIR, root, download=False, verify=False) for k, spec in self.files().items()}
        return cached_build(c.cache, c.cache_dir, "ninerec", LOADER_VERSION, config_for_key(c), list(paths.values()),
                            lambda: self._build(paths))

    def _build(self, paths: dict[str, Path]) -> GraphDataset:
        c = self.cfg
        item_ids, titles = read_items(paths["items"])
        index = {v: i for i, v in enumerate(item_ids)}
        users, items = read_pairs(paths["pairs"], index)
        n = len(item_ids)
        image, av_img = row_availability(load_matrix(paths["image"], rows=n))
        if c.text_encoder == "file":
            text, av_txt = row_availability(load_matrix(paths["text"], rows=n))
        else:
            text, av_txt = encode_strings(titles, c.text_encoder, c.text_dim, c.cache_dir)
        src, dst, stats = co_interaction_pairs(users, items, n, c.min_common_users, c.top_k)
        edge_index = undirected_edge_index(src, dst, n)
        meta: dict[str, Any] = {
            "source": _SOURCE,
            "graph": "item-item co-interaction over all interactions",
            "config": asdict(c),
            "item_ids": item_ids,
            "num_users": int(users.max()) + 1 if users.size else 0,
            "num_interactions": int(users.size),
            **stats,
            **degree_stats(edge_index, n),
            "interactions": torch.from_numpy(np.stack([users, items])),
            "files": {k: str(p) for k, p in paths.items()},
        }
        return GraphDataset(
            name=f"ninerec-{c.subset}",
            features={"text": torch.from_numpy(np.ascontiguousarray(text)),
                      "image": torch.from_numpy(np.ascontiguousarray(image))},
            edge_index=edge_index,
            y=None,
            num_classes=0,
            available=torch.from_numpy(np.stack([av_txt, av_img], axis=1)),
            meta=meta,
        )


# --------------------------------------------------------------------------- parsers


def _rows(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, fields) of a header-less CSV; a header row is dropped."""
    csv.field_size_limit(1 << 30)
    reader = csv.reader(io.StringIO(read_text(path), newline=""))
    out: list[tuple[int, list[str]]] = []
    try:
        for row in reader:
            if not row or all(not f.strip() for f in row):
                continue
            if not out and {f.strip().lower() for f in row} & _HEADER_WORDS:
                continue
            out.append((reader.line_num, row))
    except csv.Error as e:
        raise DataError(f"{path}: line {reader.line_num}: malformed CSV ({e})") from None
    return out


def read_items(path: Path) -> tuple[list[str], list[str]]:
    """Item ids in file order and their titles (English when a third column has one)."""
    ids: list[str] = []
    titles: list[str] = []
    seen: set[str] = set()
    for no, row in _rows(path):
        if len(row) < 2 or not row[0].strip():
            raise DataError(f"{path}: line {no}: expected 'item_id,title[,title_en]', got {','.join(row)[:80]!r}")
        item = row[0].strip()
        if item in seen:
            raise DataError(f"{path}: line {no}: item id {item!r} appears twice")
        seen.add(item)
        ids.append(item)
        en = row[2].strip() if len(row) > 2 else ""
        titles.append(en or row[1].strip())
    if not ids:
        raise DataError(f"{path}: no items")
    return ids, titles


def read_pairs(path: Path, item_index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """(user index, item index) of ``item_id,user_id[,timestamp]`` rows; users are numbered
    in order of first appearance, items by the item file."""
    users: list[int] = []
    items: list[int] = []
    user_index: dict[str, int] = {}
    for no, row in _rows(path):
        if len(row) < 2 or not row[0].strip() or not row[1].strip():
            raise DataError(f"{path}: line {no}: expected 'item_id,user_id[,timestamp]', got {','.join(row)[:80]!r}")
        if len(row) > 2 and row[2].strip():
            try:
                float(row[2])
            except ValueError:
                raise DataError(f"{path}: line {no}: timestamp {row[2]!r} is not a number") from None
        item = item_index.get(row[0].strip())
        if item is None:
            raise DataError(f"{path}: line {no}: item id {row[0].strip()!r} is not in the item file")
        users.append(user_index.setdefault(row[1].strip(), len(user_index)))
        items.append(item)
    return np.asarray(users, dtype=np.int64), np.asarray(items, dtype=np.int64)
