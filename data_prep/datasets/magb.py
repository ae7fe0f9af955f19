"""MAGB multimodal attributed graphs (Movies, Toys, Grocery, Reddit-S, Reddit-M) and MM-GRAPH's Ele-fashion.

Why: Movies / Grocery / Toys are the node-classification and retrieval graphs of the
FedMGS protocol, Ele-fashion the main node-classification graph of FedMPO. They are not
available offline; this loader reads their public layouts, tested on small generated
files of the same shape.

MAGB layout (``https://huggingface.co/datasets/Sherirto/MAGB``, repo sktsherlock/MAGB).
Each dataset (option ``subset``: Movies, Toys, Grocery, Reddit-S, Reddit-M) is a folder
``<Name>/`` whose files use the prefix ``<Name>`` without the dash (``RedditS``)::

    <Name>/<Prefix>.csv                                    one row per node
    <Name>/TextFeature/<Prefix>_roberta_base_<L>_mean.npy  [N, 768] (option text_feature)
    <Name>/ImageFeature/<Prefix>_openai_clip-vit-large-patch14.npy  [N, 768] (option image_feature)
    <Name>/<Prefix>Graph.pt                                DGL graph (not read, see below)

``<L>`` is the maximum token length the release used for RoBERTa-base on that dataset, so
the text file's name differs per dataset (``MAGB_RELEASE_FILES``): 512 for Movies and
Toys, 256 for Grocery, 100 for Reddit-S and Reddit-M. ``text_feature`` /
``image_feature`` default to ``auto``, the release's file for the subset; any other value
is a path inside the dataset folder (``{prefix}`` / ``{name}`` expand to the prefix / the
subset), e.g. another encoder's file of the release such as
``TextFeature/{prefix}_Llama_3.2_1B_Instruct_256_mean.npy``. A missing file is one
``DataError`` line naming the expected file, every place searched, and these options.
Sources of the names: the per-dataset feature table of ``run_mag_baseline_suite.sh`` and
``plot/plot_analysis_ntk.py`` in sktsherlock/SUPRA (MAGB's authors, run against a clone of
the Hugging Face release; ``TextFeature``/``ImageFeature`` of all five datasets), the
MAGB README (``Movies_roberta_base_512_mean.npy``, ``<Name>Graph.pt``) and the UniMAG
README's listing of the release (``<Prefix>.csv``, ``<Prefix>Graph.pt`` per folder).

The CSV has a header; the loader uses the columns ``label`` (integer class), the adjacency
and optionally ``id`` (the node id that the adjacency lists refer to; row order otherwise)
and the text (only when the text modality is encoded from it, ``text_encoder:
hashing|minilm``: column ``text``, else ``caption`` as in MAGB's Reddit tables). The
adjacency is the first present of: ``neighbors`` (a list literal of node ids, e.g.
``[3, 17]``); ``also_buy`` + ``also_view`` (Amazon tables, joined as MAGB's build script
joins them into the DGL graph); ``also_posted`` (Reddit tables). The graph comes from the
CSV because ``<Prefix>Graph.pt`` is a DGL binary graph that cannot be read without DGL;
with ``graph: <file>`` an edge list next to the CSV is used instead (``.pt``/``.npy``
tensor ``[2, E]`` or ``[E, 2]``, or text ``u v`` lines), e.g. one saved with
``torch.save(torch.stack(g.edges()), "edges.pt")``. Feature rows follow node order.

MM-GRAPH layout (``subset: ele-fashion`` or ``books-nc``;
``https://huggingface.co/datasets/mm-graph-org/mm-graph``, repo
mm-graph-benchmark/mm-graph-benchmark)::

    <name>/nc_edges-nodeid.pt     edge list [E, 2] (torch-saved list or tensor)
    <name>/labels-w-missing.pt    [N] labels, -1 = unlabeled
    <name>/split.pt               {'train_idx', 'val_idx', 'test_idx'} (optional)
    <name>/<feature>_feat.pt      [N, 2d]: text embedding then image embedding, as the
                                  MM-GRAPH code splits it in half (option mmgraph_feature:
                                  clip, imagebind, t5vit, t5dino)

Unlabeled nodes (and their edges) are dropped by default; the official split, when
present, becomes the dataset's train/val/test masks.

Natural availability: a feature row that is all zeros or holds NaN/inf is missing (MAGB
pads nodes without a usable image this way). No checksums are published for MAGB or
MM-GRAPH files, so they are not verified; the URLs are the datasets' Hugging Face
locations as best known, used only with ``download: true``.
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
    as_int_pairs,
    cached_build,
    candidate_paths,
    check_edges,
    config_for_key,
    degree_stats,
    encode_strings,
    file_present,
    load_matrix,
    locate,
    read_edge_list,
    read_text,
    row_availability,
    torch_load_plain,
    undirected_edge_index,
)

DATASET_DIR = "magb"
LOADER_VERSION = 2  # 2: adjacency / text columns of MAGB's own tables (also_buy + also_view, also_posted, caption)
MAGB_NAMES = ("Movies", "Toys", "Grocery", "Reddit-S", "Reddit-M")
# The release's default feature files, inside each dataset folder. The RoBERTa-base text
# features carry the maximum token length used per dataset (512 / 256 / 100) in their name.
# Source: sktsherlock/SUPRA @ 4c602ca0, run_mag_baseline_suite.sh (TEXT_/VIS_FEATURE_BY_DS_GROUP,
# group clip_roberta; Reddit-S in plot/plot_analysis_ntk.py), checked with require_file against
# a clone of huggingface.co/datasets/Sherirto/MAGB.
MAGB_RELEASE_FILES: dict[str, dict[str, str]] = {
    "Movies": {"text": "TextFeature/Movies_roberta_base_512_mean.npy",
               "image": "ImageFeature/Movies_openai_clip-vit-large-patch14.npy"},
    "Toys": {"text": "TextFeature/Toys_roberta_base_512_mean.npy",
             "image": "ImageFeature/Toys_openai_clip-vit-large-patch14.npy"},
    "Grocery": {"text": "TextFeature/Grocery_roberta_base_256_mean.npy",
                "image": "ImageFeature/Grocery_openai_clip-vit-large-patch14.npy"},
    "Reddit-S": {"text": "TextFeature/RedditS_roberta_base_100_mean.npy",
                 "image": "ImageFeature/RedditS_openai_clip-vit-large-patch14.npy"},
    "Reddit-M": {"text": "TextFeature/RedditM_roberta_base_100_mean.npy",
                 "image": "ImageFeature/RedditM_openai_clip-vit-large-patch14.npy"},
}
# Adjacency columns of a MAGB node table, first match wins: an explicit list, else the
# columns MAGB's build scripts join into <Prefix>Graph.pt (Amazon: also_view + also_buy,
# Reddit: also_posted; sktsherlock/MAGB Data/data_processing_utils.py, _for_reddit.py).
NEIGHBOR_COLUMNS: tuple[tuple[str, ...], ...] = (("neighbors",), ("also_buy", "also_view"), ("also_posted",))
TEXT_COLUMNS = ("text", "caption")  # Reddit tables keep the post text in ``caption``
_OPTION = {"text": "dataset.text_feature", "image": "dataset.image_feature", "graph": "dataset.graph"}
MMGRAPH_NAMES = ("ele-fashion", "books-nc")
MAGB_URL = "https://huggingface.co/datasets/Sherirto/MAGB/resolve/main"
MMGRAPH_URL = "https://huggingface.co/datasets/mm-graph-org/mm-graph/resolve/main"
TEXT_ENCODERS = ("file", "hashing", "minilm")


def magb_prefix(name: str) -> str:
    """File prefix of a MAGB folder: ``Reddit-S`` -> ``RedditS``."""
    return name.replace("-", "")


@DATASETS.register("magb")
class MAGB:
    """MAGB (Movies/Toys/Grocery/Reddit) or MM-GRAPH (Ele-fashion) graph with text + visual features."""

    @dataclass
    class Config:
        subset: str = field(
            default="Movies",
            metadata={"help": "Movies, Toys, Grocery, Reddit-S, Reddit-M (MAGB) or ele-fashion, books-nc (MM-GRAPH)", "choices": MAGB_NAMES + MMGRAPH_NAMES},
        )
        text_feature: str = field(
            default="auto",
            metadata={"help": "MAGB text feature file inside the dataset folder; auto = the release's RoBERTa-base "
                              "file of the subset (TextFeature/<prefix>_roberta_base_<512|256|100>_mean.npy; "
                              "{prefix} = subset without '-')"},
        )
        image_feature: str = field(
            default="auto",
            metadata={"help": "MAGB image feature file inside the dataset folder; auto = the release's CLIP file "
                              "(ImageFeature/<prefix>_openai_clip-vit-large-patch14.npy)"},
        )
        text_encoder: str = field(
            default="file",
            metadata={"help": "file (read text_feature) or hashing / minilm (encode the CSV text column)", "choices": TEXT_ENCODERS},
        )
        text_dim: int = field(default=256, metadata={"help": "size of the hashing text encoding", "min": 1, "max": 65_536})
        graph: str = field(
            default="csv",
            metadata={"help": "csv (the neighbors column) or an edge-list file inside the dataset folder"},
        )
        mmgraph_feature: str = field(
            default="clip", metadata={"help": "MM-GRAPH feature set: reads <feature>_feat.pt (text half, image half)"}
        )
        drop_unlabeled: bool = field(
            default=True, metadata={"help": "drop nodes with a negative (missing) label and their edges"}
        )
        download: bool = field(
            default=False, metadata={"help": "fetch missing files from Hugging Face into dataset.root (unverified)"}
        )
        cache: bool = field(default=True, metadata={"help": "reuse the built graph for identical input files"})
        cache_dir: str | None = field(default=None, metadata={"help": "where built graphs are cached"})

    def __init__(self, cfg: Config | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    @property
    def is_mmgraph(self) -> bool:
        return self.cfg.subset in MMGRAPH_NAMES

    def files(self) -> dict[str, RemoteFile]:
        """The files this configuration reads, with their public locations."""
        c = self.cfg
        if self.is_mmgraph:
            base = f"{MMGRAPH_URL}/{c.subset}"
            names = {"edges": "nc_edges-nodeid.pt", "labels": "labels-w-missing.pt",
                     "features": f"{c.mmgraph_feature}_feat.pt"}
            src = "mm-graph-org/mm-graph on Hugging Face (no checksum published)"
            return {k: RemoteFile(f"{c.subset}/{v}", f"{base}/{v}", None, src) for k, v in names.items()}
        prefix = magb_prefix(c.subset)
        names = {"csv": f"{prefix}.csv"}
        if c.text_encoder == "file":
            names["text"] = self.feature_file("text")
        names["image"] = self.feature_file("image")
        if c.graph != "csv":
            names["graph"] = c.graph.format(prefix=prefix, name=c.subset)
        src = "Sherirto/MAGB on Hugging Face (no checksum published)"
        return {k: RemoteFile(f"{c.subset}/{v}", f"{MAGB_URL}/{c.subset}/{v}", None, src) for k, v in names.items()}

    def feature_file(self, modality: str) -> str:
        """The MAGB feature file read for ``modality`` (text / image), relative to the dataset folder."""
        option = self.cfg.text_feature if modality == "text" else self.cfg.image_feature
        if option == "auto":
            return MAGB_RELEASE_FILES[self.cfg.subset][modality]
        return option.format(prefix=magb_prefix(self.cfg.subset), name=self.cfg.subset)

    def load(self, root: Path | None = None) -> GraphDataset:
        """Locate the files of the chosen layout and build (or reuse the cached build)."""
        c = self.cfg
        paths = {k: self._locate(k, spec, root) for k, spec in self.files().items()}
        if self.is_mmgraph:
            split = paths["labels"].parent / "split.pt"  # optional; must sit with the labels it indexes
            if file_present(split):
                paths["split"] = split
        build = self._build_mmgraph if self.is_mmgraph else self._build_magb
        return cached_build(c.cache, c.cache_dir, "magb", LOADER_VERSION, config_for_key(c), list(paths.values()),
                            lambda: build(paths))

    def _locate(self, key: str, spec: RemoteFile, root: Path | None) -> Path:
        """``locate``, with the options that point elsewhere added to a missing-file error (one line)."""
        try:
            return locate(spec, DATASET_DIR, root, self.cfg.download, verify=False)
        except DataError as e:
            if self.is_mmgraph or not str(e).startswith("missing data file"):
                raise
            raise DataError(f"{e}; {self._missing_hint(key, spec, root)}") from None

    def _missing_hint(self, key: str, spec: RemoteFile, root: Path | None) -> str:
        """How to read another file instead: the option naming it and same-prefix files that do exist."""
        c = self.cfg
        option = _OPTION.get(key)
        if option is None:  # the node table: only its place can change
            return f"it is the node table of the release folder '{c.subset}': point dataset.root at the folder above it"
        rel = spec.name.split("/", 1)[1]
        setting = getattr(c, {"text": "text_feature", "image": "image_feature", "graph": "graph"}[key])
        now = f"'auto' = the release's {rel}" if setting == "auto" else f"{setting!r} -> {rel}"
        hint = f"to read another file set {option} (now {now}) to a path inside the '{c.subset}' folder"
        if key == "text":
            hint += ", or dataset.text_encoder=hashing|minilm to encode the CSV text instead"
        seen: list[str] = []
        pattern = f"{magb_prefix(c.subset)}_*{Path(rel).suffix}" if key != "graph" else f"*{Path(rel).suffix}"
        for cand in candidate_paths(spec.name, DATASET_DIR, root):
            try:
                found = sorted(p.name for p in cand.parent.glob(pattern) if p.is_file())
            except OSError:
                continue
            seen += [f for f in found if f not in seen]
        if seen:
            more = f" (+{len(seen) - 6} more)" if len(seen) > 6 else ""
            hint += f"; files there: {', '.join(seen[:6])}{more}"
        return hint

    # ------------------------------------------------------------------ MAGB

    def _build_magb(self, paths: dict[str, Path]) -> GraphDataset:
        c = self.cfg
        need = ["label"] + (["neighbors"] if c.graph == "csv" else []) + (["text"] if c.text_encoder != "file" else [])
        table = read_node_csv(paths["csv"], need)
        n = len(table["label"])
        if "graph" in paths:
            edges = read_edge_list(paths["graph"])
            check_edges(edges, n, str(paths["graph"]))
        else:
            edges = table["edges"]
        image, av_img = row_availability(load_matrix(paths["image"], rows=n))
        if c.text_encoder == "file":
            text, av_txt = row_availability(load_matrix(paths["text"], rows=n))
        else:
            text, av_txt = encode_strings(table["text"], c.text_encoder, c.text_dim, c.cache_dir)
        y = np.asarray(table["label"], dtype=np.int64)
        columns = {k: table[k] for k in ("neighbor_columns", "text_column") if k in table}
        return self._assemble(text, image, av_txt, av_img, edges, y, None, paths, "MAGB", columns)

    # ------------------------------------------------------------------ MM-GRAPH

    def _build_mmgraph(self, paths: dict[str, Path]) -> GraphDataset:
        feats = torch_load_plain(paths["features"])
        feats = feats.numpy() if isinstance(feats, torch.Tensor) else np.asarray(feats)
        if feats.ndim != 2 or feats.shape[1] < 2 or feats.shape[1] % 2:
            raise DataError(f"{paths['features']}: expected [N, 2d] (text half, image half), got shape {feats.shape}")
        n, d = feats.shape[0], feats.shape[1] // 2
        feats = feats.astype(np.float32)
        text, av_txt = row_availability(feats[:, :d])
        image, av_img = row_availability(feats[:, d:])
        labels = torch_load_plain(paths["labels"])
        y = (labels.numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)).reshape(-1)
        if y.shape[0] != n or (y.size and not np.all(np.mod(y, 1) == 0)):
            raise DataError(f"{paths['labels']}: expected {n} integer labels (one per node), got shape {y.shape}")
        y = y.astype(np.int64)
        edges = as_int_pairs(torch_load_plain(paths["edges"]), str(paths["edges"]))
        check_edges(edges, n, str(paths["edges"]))
        split = read_split(paths["split"], n) if "split" in paths else None
        return self._assemble(text, image, av_txt, av_img, edges, y, split, paths, "MM-GRAPH")

    # ------------------------------------------------------------------ shared

    def _assemble(
        self,
        text: np.ndarray,
        image: np.ndarray,
        av_txt: np.ndarray,
        av_img: np.ndarray,
        edges: np.ndarray,
        y: np.ndarray,
        split: dict[str, np.ndarray] | None,
        paths: dict[str, Path],
        layout: str,
        extra_meta: dict[str, Any] | None = None,
    ) -> GraphDataset:
        c = self.cfg
        n = y.shape[0]
        keep = y >= 0 if c.drop_unlabeled else np.ones(n, dtype=np.bool_)
        if not c.drop_unlabeled and (y < 0).any():
            raise DataError(f"{paths.get('labels', paths.get('csv'))}: has unlabeled nodes (label < 0); "
                            "set dataset.drop_unlabeled=true")
        new_id = np.full(n, -1, dtype=np.int64)
        new_id[keep] = np.arange(int(keep.sum()))
        src, dst = new_id[edges[0]], new_id[edges[1]]
        inside = (src >= 0) & (dst >= 0)
        m = int(keep.sum())
        edge_index = undirected_edge_index(src[inside], dst[inside], m)
        y = y[keep]
        classes = np.unique(y)
        if classes.size and (classes != np.arange(classes.size)).any():
            y = np.searchsorted(classes, y)  # labels were not 0..C-1: make them so
        masks: dict[str, torch.Tensor | None] = {"train_mask": None, "val_mask": None, "test_mask": None}
        if split is not None:
            for key, idx in split.items():
                mask = np.zeros(n, dtype=np.bool_)
                mask[idx] = True
                masks[f"{key}_mask"] = torch.from_numpy(mask[keep])
        meta: dict[str, Any] = {
            "source": layout,
            "layout": layout,
            "config": asdict(c),
            "dropped_unlabeled": int(n - m),
            "original_ids": torch.from_numpy(np.flatnonzero(keep)),
            "class_values": classes.tolist(),
            **degree_stats(edge_index, m),
            "files": {k: str(p) for k, p in paths.items()},
            **(extra_meta or {}),
        }
        return GraphDataset(
            name=f"magb-{c.subset}",
            features={"text": torch.from_numpy(np.ascontiguousarray(text[keep])),
                      "image": torch.from_numpy(np.ascontiguousarray(image[keep]))},
            edge_index=edge_index,
            y=torch.from_numpy(y),
            num_classes=int(classes.size),
            available=torch.from_numpy(np.stack([av_txt[keep], av_img[keep]], axis=1)),
            meta=meta,
            **masks,
        )


# --------------------------------------------------------------------------- parsers


def parse_id_list(raw: str) -> list[int]:
    """``[1, 2, 3]`` / ``1 2 3`` / ``""`` -> ints; ValueError on anything else."""
    s = raw.strip()
    if s.startswith("[") and s.endswith("]"):
        s = s[1:-1]
    elif s.startswith("[") or s.endswith("]"):
        raise ValueError("unbalanced brackets")
    parts = [p for p in s.replace(",", " ").split() if p]
    return [int(float(p)) if p.endswith(".0") else int(p) for p in parts]


def read_node_csv(path: Path, need: list[str]) -> dict[str, Any]:
    """Labels, adjacency and text of a MAGB node CSV, validated row by row.

    ``need`` names the logical fields wanted: ``label``, ``neighbors`` (the adjacency: the
    first present group of ``NEIGHBOR_COLUMNS``, lists joined) and ``text`` (the first
    present of ``TEXT_COLUMNS``). Returns ``label`` (list[int]), ``text`` (list[str], when
    asked for) and ``edges`` (``[2, E]`` node indices, when the adjacency is asked for), plus
    ``neighbor_columns`` / ``text_column``: the columns that were read.
    """
    text = read_text(path)
    csv.field_size_limit(1 << 30)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise DataError(f"{path}: line 1: empty file, expected a header row") from None
    cols = {h.strip(): j for j, h in enumerate(header)}
    missing: list[str] = []
    adjacency: tuple[str, ...] = ()
    text_col: str | None = None
    for k in need:
        if k == "neighbors":
            adjacency = next((g for g in NEIGHBOR_COLUMNS if all(col in cols for col in g)), ())
            if not adjacency:
                missing.append(" or ".join(" + ".join(g) for g in NEIGHBOR_COLUMNS))
        elif k == "text":
            text_col = next((col for col in TEXT_COLUMNS if col in cols), None)
            if text_col is None:
                missing.append(" or ".join(TEXT_COLUMNS))
        elif k not in cols:
            missing.append(k)
    if missing:
        raise DataError(f"{path}: line 1: missing column(s) {', '.join(missing)} (columns: {', '.join(cols)})")
    labels: list[int] = []
    texts: list[str] = []
    ids: list[int] = []
    neigh: list[tuple[int, list[int]]] = []
    try:
        for row in reader:
            no = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) != len(header):
                raise DataError(f"{path}: line {no}: {len(row)} fields, header has {len(header)}")
            try:
                labels.append(int(float(row[cols["label"]])))
            except ValueError:
                raise DataError(f"{path}: line {no}: label {row[cols['label']]!r} is not an integer") from None
            if "id" in cols:
                try:
                    ids.append(int(row[cols["id"]]))
                except ValueError:
                    raise DataError(f"{path}: line {no}: id {row[cols['id']]!r} is not an integer") from None
            if text_col is not None:
                texts.append(row[cols[text_col]])
            if adjacency:
                nbrs: list[int] = []
                for col in adjacency:
                    try:
                        nbrs += parse_id_list(row[cols[col]])
                    except ValueError:
                        raise DataError(
                            f"{path}: line {no}: {col} {row[cols[col]][:60]!r} is not a list of node ids"
                        ) from None
                neigh.append((no, nbrs))
    except csv.Error as e:
        raise DataError(f"{path}: line {reader.line_num}: malformed CSV ({e})") from None
    out: dict[str, Any] = {"label": labels, "text": texts}
    if text_col is not None:
        out["text_column"] = text_col
    n = len(labels)
    if adjacency:
        out["neighbor_columns"] = list(adjacency)
        if ids:
            index = {v: i for i, v in enumerate(ids)}
            if len(index) != n:
                raise DataError(f"{path}: the id column has duplicate values")
        else:
            index = None
        src: list[int] = []
        dst: list[int] = []
        for row_i, (no, nbrs) in enumerate(neigh):
            for v in nbrs:
                j = index.get(v) if index is not None else (v if 0 <= v < n else None)
                if j is None:
                    raise DataError(f"{path}: line {no}: neighbor id {v} is not a node of this file")
                src.append(row_i)
                dst.append(j)
        out["edges"] = np.array([src, dst], dtype=np.int64).reshape(2, -1)
    return out


def read_split(path: Path, n: int) -> dict[str, np.ndarray]:
    """MM-GRAPH ``split.pt``: ``{train_idx, val_idx, test_idx}`` -> ``{train, val, test}`` index arrays."""
    obj = torch_load_plain(path)
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a dict with train_idx / val_idx / test_idx, got {type(obj).__name__}")
    out: dict[str, np.ndarray] = {}
    for key, name in (("train_idx", "train"), ("val_idx", "val"), ("valid_idx", "val"), ("test_idx", "test")):
        if key in obj:
            v = obj[key]
            idx = (v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)).reshape(-1).astype(np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= n):
                raise DataError(f"{path}: {key} holds node ids outside [0, {n})")
            out[name] = idx
    if set(out) != {"train", "val", "test"}:
        raise DataError(f"{path}: expected keys train_idx, val_idx, test_idx (got: {', '.join(map(str, obj))})")
    return out
