"""Flickr30k image-caption pairs as a kNN graph (image -> text retrieval in FedMPO / FedMGS).

Why: Flickr30k is the retrieval dataset of both protocols (31,783 images, 5 captions
each). It has no native graph, so, as in the multimodal-graph benchmarks that use it,
nodes are images linked to their ``k`` most similar images by cosine similarity of the
image features (union of the kNN lists, so the graph is undirected); nodes whose image
feature is missing get no edges. That graph is only the loader's: because it is made of
image content, the federation builder rebuilds it per run after masking
(``meta["feature_graph"]``, see ``data_prep.build.feature_graph``), from the observed image
rows only, so a node whose image is masked keeps no edge that its true image chose.
``k = 8`` gives roughly the 5.7 undirected edges per node
(181,151 edges over 31,783 nodes) that FedMGS reports. Not available offline: this
loader reads the public caption formats plus feature files, tested on generated files.

Files, in the folder ``flickr30k/`` (names are options):

* captions, the first found of (option ``captions``, default ``auto``):
  ``results_20130124.token`` (the official release: ``<image>.jpg#<k><TAB><caption>``),
  ``dataset_flickr30k.json`` (Karpathy splits: ``images[].filename``,
  ``images[].sentences[].raw``, ``images[].split``; the split is kept in ``meta``), or
  ``flickr_annotations_30k.csv`` (Hugging Face ``nlphuji/flickr30k``: columns ``raw`` =
  JSON list of captions, ``filename``, ``split``). Node order is the images' order of
  first appearance in that file.
* ``image_feat.npz`` (arrays ``ids`` = image file names, ``features`` = ``[N, d]``) or an
  ``.npy`` ``[N, d]`` in node order: features of an image encoder (the papers use CLIP).
* text: ``text_feat.npz`` / ``.npy`` the same way (several rows with the same id, e.g. one
  per caption, are averaged), or, with ``text_encoder: hashing | minilm``, the captions of
  each image joined and encoded by ``data_prep.features``.

Public locations: the captions CSV at ``nlphuji/flickr30k`` on Hugging Face and the
Karpathy JSON inside ``caption_datasets.zip`` (Stanford); no checksums are published, so
nothing is verified. Feature files are never downloadable: they are computed by the user.
"""

from __future__ import annotations

import csv
import io
import json
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
    config_for_key,
    degree_stats,
    encode_strings,
    knn_pairs,
    load_matrix,
    locate,
    locate_any,
    read_text,
    row_availability,
    undirected_edge_index,
)
from data_prep.safe_npy import load_npz

DATASET_DIR = "flickr30k"
LOADER_VERSION = 2  # 2: meta names the feature graph the builder redraws after masking
CAPTION_FILES: dict[str, RemoteFile] = {
    "results_20130124.token": RemoteFile(
        "results_20130124.token", None, None,
        "the official Flickr30k release (https://shannon.cs.illinois.edu/DenotationGraph/, by request)"),
    "dataset_flickr30k.json": RemoteFile(
        "dataset_flickr30k.json", None, None,
        "caption_datasets.zip at https://cs.stanford.edu/people/karpathy/deepimagesent/ (Karpathy splits)"),
    "flickr_annotations_30k.csv": RemoteFile(
        "flickr_annotations_30k.csv",
        "https://huggingface.co/datasets/nlphuji/flickr30k/resolve/main/flickr_annotations_30k.csv", None,
        "nlphuji/flickr30k on Hugging Face"),
}
TEXT_ENCODERS = ("file", "hashing", "minilm")
SPLIT_CODES = {"train": 0, "val": 1, "test": 2, "restval": 0}


@DATASETS.register("flickr30k")
class Flickr30k:
    """Flickr30k images as nodes of an image-feature kNN graph, with image + caption features."""

    @dataclass
    class Config:
        captions: str = field(
            default="auto",
            metadata={"help": "auto, results_20130124.token, dataset_flickr30k.json or flickr_annotations_30k.csv", "choices": ("auto", *CAPTION_FILES)},
        )
        image_feature: str = field(
            default="image_feat.npz", metadata={"help": "image features (.npz ids+features or .npy)"}
        )
        text_feature: str = field(default="text_feat.npz", metadata={"help": "caption features (.npz or .npy)"})
        text_encoder: str = field(
            default="file", metadata={"help": "file (read text_feature) or hashing / minilm (encode the captions)", "choices": TEXT_ENCODERS}
        )
        text_dim: int = field(default=256, metadata={"help": "size of the hashing caption encoding", "min": 1, "max": 65_536})
        k: int = field(default=8, metadata={"help": "neighbours per image in the kNN graph (union-symmetrized)", "min": 1, "max": 10_000})
        download: bool = field(
            default=False, metadata={"help": "fetch the captions CSV from Hugging Face into dataset.root (unverified)"}
        )
        cache: bool = field(default=True, metadata={"help": "reuse the built graph for identical input files"})
        cache_dir: str | None = field(default=None, metadata={"help": "where built graphs are cached"})

    def __init__(self, cfg: Config | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> GraphDataset:
        """Locate captions and features, then build (or reuse the cached build)."""
        c = self.cfg
        specs = list(CAPTION_FILES.values()) if c.captions == "auto" else [CAPTION_FILES[c.captions]]
        _, captions = locate_any(specs, DATASET_DIR, root, c.download, verify=False)
        paths = {"captions": captions,
                 "image": locate(RemoteFile(c.image_feature, source="features computed by the user"), DATASET_DIR, root)}
        if c.text_encoder == "file":
            paths["text"] = locate(RemoteFile(c.text_feature, source="features computed by the user"), DATASET_DIR, root)
        return cached_build(c.cache, c.cache_dir, "flickr30k", LOADER_VERSION, config_for_key(c), list(paths.values()),
                            lambda: self._build(paths))

    def _build(self, paths: dict[str, Path]) -> GraphDataset:
        c = self.cfg
        images, captions, split = read_captions(paths["captions"])
        n = len(images)
        image, av_img = row_availability(aligned_features(paths["image"], images))
        if c.text_encoder == "file":
            text, av_txt = row_availability(aligned_features(paths["text"], images))
        else:
            text, av_txt = encode_strings([" ".join(cs) for cs in captions], c.text_encoder, c.text_dim, c.cache_dir)
        src, dst = knn_pairs(image, c.k, valid=av_img)
        edge_index = undirected_edge_index(src, dst, n)
        meta: dict[str, Any] = {
            "source": "Flickr30k",
            "graph": f"union-symmetrized {c.k}-NN over cosine similarity of image features",
            "feature_graph": {"modality": "image", "k": c.k},
            "config": asdict(c),
            "images": images,
            "captions_per_image": [len(cs) for cs in captions],
            **degree_stats(edge_index, n),
            "files": {k: str(p) for k, p in paths.items()},
        }
        if split is not None:
            meta["karpathy_split"] = torch.from_numpy(split)  # 0 train (incl. restval), 1 val, 2 test
        return GraphDataset(
            name="flickr30k",
            features={"text": torch.from_numpy(np.ascontiguousarray(text)),
                      "image": torch.from_numpy(np.ascontiguousarray(image))},
            edge_index=edge_index,
            y=None,
            num_classes=0,
            available=torch.from_numpy(np.stack([av_txt, av_img], axis=1)),
            meta=meta,
        )


# --------------------------------------------------------------------------- parsers


def read_captions(path: Path) -> tuple[list[str], list[list[str]], np.ndarray | None]:
    """(image names in first-appearance order, their captions, Karpathy split codes or None)."""
    if path.suffix == ".json":
        return _read_karpathy(path)
    if path.suffix == ".csv":
        return _read_hf_csv(path)
    return _read_token(path)


def _collect(order: list[str], caps: dict[str, list[str]], name: str, caption: str) -> None:
    if name not in caps:
        caps[name] = []
        order.append(name)
    if caption:
        caps[name].append(caption)


def _read_token(path: Path) -> tuple[list[str], list[list[str]], None]:
    order: list[str] = []
    caps: dict[str, list[str]] = {}
    for no, line in enumerate(read_text(path).split("\n"), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        key, tab, caption = line.partition("\t")
        name, hash_, k = key.partition("#")
        if not tab or not hash_ or not name.strip() or not k.strip().isdigit():
            raise DataError(f"{path}: line {no}: expected '<image>#<k><TAB><caption>', got {line[:80]!r}")
        _collect(order, caps, name.strip(), caption.strip())
    if not order:
        raise DataError(f"{path}: no captions")
    return order, [caps[i] for i in order], None


def _read_karpathy(path: Path) -> tuple[list[str], list[list[str]], np.ndarray]:
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: line {e.lineno}: malformed JSON ({e.msg})") from None
    imgs = data.get("images") if isinstance(data, dict) else None
    if not isinstance(imgs, list) or not imgs:
        raise DataError(f"{path}: line 1: expected an object with a non-empty 'images' list")
    order: list[str] = []
    caps: dict[str, list[str]] = {}
    split: list[int] = []
    for i, img in enumerate(imgs):
        ok = isinstance(img, dict) and isinstance(img.get("filename"), str) and isinstance(img.get("sentences"), list)
        if not ok or img.get("split", "train") not in SPLIT_CODES:
            raise DataError(
                f"{path}: images[{i}]: needs 'filename', a 'sentences' list and a train/val/test/restval 'split'"
            )
        if img["filename"] in caps:
            raise DataError(f"{path}: images[{i}]: image {img['filename']!r} appears twice")
        sents = []
        for s in img["sentences"]:
            raw = s.get("raw") if isinstance(s, dict) else s
            if not isinstance(raw, str):
                raise DataError(f"{path}: images[{i}]: each sentence needs a 'raw' string")
            sents.append(raw.strip())
        order.append(img["filename"])
        caps[img["filename"]] = [s for s in sents if s]
        split.append(SPLIT_CODES[img.get("split", "train")])
    return order, [caps[i] for i in order], np.asarray(split, dtype=np.int64)


def _read_hf_csv(path: Path) -> tuple[list[str], list[list[str]], np.ndarray | None]:
    csv.field_size_limit(1 << 30)
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    if reader.fieldnames is None or not {"raw", "filename"} <= set(reader.fieldnames):
        got = ", ".join(reader.fieldnames or [])
        raise DataError(f"{path}: line 1: expected columns 'raw' and 'filename' (got: {got})")
    order: list[str] = []
    caps: dict[str, list[str]] = {}
    split: list[int] = []
    try:
        for row in reader:
            no = reader.line_num
            try:
                raw = json.loads(row["raw"] or "")
            except json.JSONDecodeError:
                raise DataError(f"{path}: line {no}: 'raw' must be a JSON list of captions") from None
            if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw) or not (row["filename"] or "").strip():
                raise DataError(f"{path}: line {no}: needs a filename and 'raw' = JSON list of caption strings")
            name = row["filename"].strip()
            if name in caps:
                raise DataError(f"{path}: line {no}: image {name!r} appears twice")
            order.append(name)
            caps[name] = [s.strip() for s in raw if s.strip()]
            split.append(SPLIT_CODES.get((row.get("split") or "train").strip(), 0))
    except csv.Error as e:
        raise DataError(f"{path}: line {reader.line_num}: malformed CSV ({e})") from None
    return order, [caps[i] for i in order], np.asarray(split, dtype=np.int64) if "split" in reader.fieldnames else None


def aligned_features(path: Path, images: list[str]) -> np.ndarray:
    """``[N, d]`` features in node order from an ``.npz`` (ids + features) or a node-ordered ``.npy``.

    In an ``.npz``, rows sharing an id are averaged (one row per caption is common); an
    image without any row gets a zero row, i.e. a naturally missing modality.
    """
    if path.suffix != ".npz":
        return load_matrix(path, rows=len(images))
    try:
        with load_npz(path) as z:
            if "ids" not in z.files:
                raise DataError(f"{path}: archive has no array 'ids' (arrays: {', '.join(z.files)})")
            ids = z["ids"]
    except DataError:
        raise
    except UNREADABLE as e:
        raise DataError(f"{path}: not a readable .npz archive ({e})") from None
    feats = load_matrix(path, key="features")
    if ids.ndim != 1 or ids.shape[0] != feats.shape[0]:
        raise DataError(f"{path}: 'ids' has shape {ids.shape}, expected ({feats.shape[0]},) to match 'features'")
    index = {name: i for i, name in enumerate(images)}
    names = [str(x) for x in ids.tolist()]
    rows = np.array([index.get(nm, -1) for nm in names], dtype=np.int64)
    if (rows < 0).all() and names:
        raise DataError(f"{path}: none of its ids ({names[0]!r}, ...) is an image of the captions file")
    out = np.zeros((len(images), feats.shape[1]), dtype=np.float64)
    count = np.bincount(rows[rows >= 0], minlength=len(images))
    np.add.at(out, rows[rows >= 0], feats[rows >= 0])  # a NaN/inf row stays non-finite: missing
    out /= np.maximum(count, 1)[:, None]
    return out.astype(np.float32)
