"""FB15K-237 entity typing: node classification with real labels and real missing modalities.

Why: the FedMPO / FedMGS node-classification datasets (Movies, Grocery, Ele-fashion) are
not available offline; FB15K-237 is, with real text, real numeric attributes whose
absence is *natural* (most entities simply have none), and real coarse types. It is the
offline stand-in named in ``docs/protocols.md`` (Tracks 2 and 3).

Nodes and edges. Nodes are FB15K-237 entities that have a kept type (below). Edges are
all train/valid/test triples of the ConvE archive ``FB15k-237.tar.gz`` (read member by
member with ``tarfile``, never extracted), made undirected, without relation labels,
self-loops or duplicates; edges to dropped entities are dropped.

Labels. ``entity_types/ET_{valid,test}.txt`` (``mid<TAB>/domain/type``, from the CET
entity-typing benchmark, noisy) give each entity a few Freebase types; the label is the
type's *domain*, the first path segment (``/film/actor`` -> ``film``). Namespaces that
are not domains (``base`` = user-contributed bases, ``user``, ``common``, ``type``,
``freebase``) are ignored by default. An entity with several domains takes the one with
most of its types; ties go to the domain fewer entities have (the more specific one,
e.g. ``tv`` over ``film`` for a TV actor who also acts in films), then to the name. The
``num_classes`` domains with most entities are kept; every entity is then labelled with
its best *kept* domain, and entities without one are dropped. Class ids follow class
size (0 = largest); ``meta['classes']`` names them.

Modalities.

* ``text``: the entity name (Wikidata label, else the ``FB15k_mid2name`` name) and its
  Wikidata description (``entity2wikidata.json``). Default encoder ``svd``: TF-IDF of
  hashed word unigrams and bigrams (sklearn ``HashingVectorizer``), reduced to
  ``text_dim`` with a seeded ``TruncatedSVD`` and L2-normalized: fast, offline and
  dependency-free. ``text_encoder: minilm`` uses ``data_prep.features`` (the packaged
  all-MiniLM-L6-v2, 384-d; imported only when chosen). Every entity has a name, so text
  is always available; with ``text_source: description`` only the description is used
  and entities without one (about 6%) are naturally missing.
* ``numeric``: one slot per mmkb numeric attribute (``FB15K_NumericalTriples.txt``, e.g.
  latitude, population, date of birth as a year): ``sign(v) * log1p(|v|)``, averaged
  over repeated values, z-scored per attribute over the entities that have it and
  clipped to +-5; 0 where the entity lacks the attribute (``presence_flags`` appends one
  0/1 column per attribute to tell "absent" from "average"). An entity without any kept
  attribute has the numeric modality *naturally missing*.

Every input file has a pinned sha256 and public source (see ``FILES``). Every line is
validated; a malformed line is a ``DataError`` naming the file and line number. The
built tensors are cached, keyed by the input files' sha256 and the config, so a repeated
load takes well under a second.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
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
    cache_root,
    cached_build,
    config_for_key,
    degree_stats,
    locate,
    read_text,
    undirected_edge_index,
)
from data_prep.fb15k237_files import (
    TRIPLE_MEMBERS, data_lines, read_mid2name, read_triples_archive, read_wikidata,
)

DATASET_DIR = "fb15k237"
LOADER_VERSION = 1
_GH = "https://raw.githubusercontent.com"
FILES: dict[str, RemoteFile] = {
    "triples": RemoteFile("FB15k-237.tar.gz", f"{_GH}/TimDettmers/ConvE/f3c0eb28/FB15k-237.tar.gz",
                          "311df7930f842a02979eaa7a802484a6afe62303c07f915f1e6edbc30cbe05e8",
                          "TimDettmers/ConvE @ f3c0eb28"),
    "names": RemoteFile("FB15k_mid2name.txt", f"{_GH}/yao8839836/kg-bert/0b8f6251/data/FB15k-237/FB15k_mid2name.txt",
                        "4da94b8059a83bc7e08c832f573d34221d38e85030576e332a0d0e9726d13d73",
                        "yao8839836/kg-bert @ 0b8f6251"),
    "wikidata": RemoteFile("entity2wikidata.json",
                           f"{_GH}/villmow/datasets_knowledge_embedding/9e392453/FB15k-237/entity2wikidata.json",
                           "80e74bb002fb9ca0ecd3d63879a3a51121db855d312a101917a1ffb6aed2fea9",
                           "villmow/datasets_knowledge_embedding @ 9e392453"),
    "numeric": RemoteFile("FB15K_NumericalTriples.txt", f"{_GH}/mniepert/mmkb/dc1c89ca/FB15K/FB15K_NumericalTriples.txt",
                          "9fd4f2dfe95af2bc4caa6ce1db84641168f42be759217dfbfcf95ca79d5aa0f3",
                          "mniepert/mmkb @ dc1c89ca"),
    "types_valid": RemoteFile("entity_types/ET_valid.txt", f"{_GH}/CCIIPLab/CET/b85de91a/data/FB15kET/clean/ET_valid.txt",
                              "ba2bae5af674e468ed1f476cd73b61621d4aa499ea7741463327af5c9f03e62a",
                              "CCIIPLab/CET @ b85de91a"),
    "types_test": RemoteFile("entity_types/ET_test.txt", f"{_GH}/CCIIPLab/CET/b85de91a/data/FB15kET/clean/ET_test.txt",
                             "9298e06e83e5d0b98c76e3a437894f2a0eae576aaf433955d81e6a70389b36ca",
                             "CCIIPLab/CET @ b85de91a"),
}
NOT_DOMAINS = ["base", "user", "common", "type", "freebase"]
TEXT_ENCODERS = ("svd", "minilm", "hashing")
TEXT_SOURCES = ("name_description", "description")


@DATASETS.register("fb15k237_typing")
class FB15k237Typing:
    """FB15K-237 entity graph, coarse type domains as labels, text + numeric (naturally missing)."""

    @dataclass
    class Config:
        num_classes: int = field(
            default=10, metadata={"help": "number of most frequent type domains kept as classes (>= 2)", "min": 2, "max": 100_000}
        )
        exclude_domains: list[str] = field(
            default_factory=lambda: list(NOT_DOMAINS),
            metadata={"help": "type namespaces that are not domains and never become labels"},
        )
        text_encoder: str = field(
            default="svd",
            metadata={"help": "svd (hashed TF-IDF + TruncatedSVD, fast), minilm (data_prep.features, 384-d) or hashing", "choices": TEXT_ENCODERS},
        )
        text_dim: int = field(default=256, metadata={"help": "text feature size for the svd and hashing encoders", "min": 2, "max": 65_536})
        text_source: str = field(
            default="name_description",
            metadata={"help": "name_description (always available) or description (missing where none exists)", "choices": TEXT_SOURCES},
        )
        min_attribute_count: int = field(
            default=1, metadata={"help": "drop numeric attributes that fewer kept entities than this have", "min": 1, "max": 50_000_000}
        )
        presence_flags: bool = field(
            default=False, metadata={"help": "append a 0/1 column per numeric attribute saying it is present"}
        )
        seed: int = field(default=0, metadata={"help": "seed of the TruncatedSVD text projection", "min": 0, "max": 2**32 - 1})
        download: bool = field(
            default=False, metadata={"help": "fetch missing files from their public URL into dataset.root"}
        )
        verify: bool = field(default=True, metadata={"help": "check pinned sha256 checksums of the input files"})
        cache: bool = field(default=True, metadata={"help": "reuse the built tensors for identical input files"})
        cache_dir: str | None = field(
            default=None, metadata={"help": "where built tensors are cached (default $FEDMM_CACHE_DIR or .cache/)"}
        )

    def __init__(self, cfg: Config | None = None) -> None:
        self.cfg = cfg if cfg is not None else self.Config()

    def load(self, root: Path | None = None) -> GraphDataset:
        """Locate and verify the six input files, then build (or reuse the cached build)."""
        c = self.cfg
        paths = {k: locate(spec, DATASET_DIR, root, c.download, c.verify) for k, spec in FILES.items()}
        return cached_build(c.cache, c.cache_dir, "fb15k237_typing", LOADER_VERSION, config_for_key(c),
                            list(paths.values()), lambda: self._build(paths))

    def _build(self, paths: dict[str, Path]) -> GraphDataset:
        c = self.cfg
        splits = read_triples_archive(paths["triples"])
        triples = [t for split in TRIPLE_MEMBERS for t in splits[split]]  # train, valid, test: as cached
        graph_entities = sorted({e for h, _, t in triples for e in (h, t)})
        in_graph = set(graph_entities)
        types: dict[str, set[str]] = defaultdict(set)
        for key in ("types_valid", "types_test"):
            for mid, typ in read_type_file(paths[key]):
                types[mid].add(typ)
        typed_outside = sum(1 for m in types if m not in in_graph)
        types = {m: t for m, t in types.items() if m in in_graph}
        labels, classes, label_info = assign_domains(types, c.num_classes, set(c.exclude_domains))
        entities = [e for e in graph_entities if e in labels]
        index = {e: i for i, e in enumerate(entities)}
        n = len(entities)
        y = np.array([classes.index(labels[e]) for e in entities], dtype=np.int64)

        src = np.array([index.get(h, -1) for h, _, _ in triples], dtype=np.int64)
        dst = np.array([index.get(t, -1) for _, _, t in triples], dtype=np.int64)
        inside = (src >= 0) & (dst >= 0)
        edge_index = undirected_edge_index(src[inside], dst[inside], n)

        names = read_mid2name(paths["names"])
        wiki = read_wikidata(paths["wikidata"])
        name_of = [((wiki.get(e, {}).get("label") or names.get(e) or e).strip()) for e in entities]
        desc_of = [((wiki.get(e, {}).get("description") or "").strip()) for e in entities]
        has_desc = np.array([bool(d) for d in desc_of])
        if c.text_source == "description":
            docs, text_avail = desc_of, has_desc
        else:
            docs = [f"{nm}. {d}" if d else nm for nm, d in zip(name_of, desc_of)]
            text_avail = np.array([bool(d) for d in docs])
        text = self._encode_text(docs, text_avail)

        numeric, num_avail, attributes = numeric_matrix(
            read_numeric_triples(paths["numeric"]), index, c.min_attribute_count, c.presence_flags
        )
        counts = np.bincount(y, minlength=len(classes))
        meta: dict[str, Any] = {
            "source": "FB15K-237 (ConvE) + CET entity types + Wikidata text + mmkb numeric attributes",
            "config": asdict(c),
            "classes": classes,
            "class_counts": counts.tolist(),
            "entities": entities,
            "attributes": attributes,
            "num_triples": len(triples),
            "num_graph_entities": len(graph_entities),
            "typed_entities": len(types),
            "typed_entities_outside_graph": typed_outside,
            "dropped_entities": len(graph_entities) - n,
            "text_encoder": c.text_encoder,
            "text_available_fraction": float(text_avail.mean()) if n else 0.0,
            "description_fraction": float(has_desc.mean()) if n else 0.0,
            "numeric_available_fraction": float(num_avail.mean()) if n else 0.0,
            **label_info,
            **degree_stats(edge_index, n),
            "files": {k: str(p) for k, p in paths.items()},
        }
        return GraphDataset(
            name="fb15k237_typing",
            features={"text": torch.from_numpy(text), "numeric": torch.from_numpy(numeric)},
            edge_index=edge_index,
            y=torch.from_numpy(y),
            num_classes=len(classes),
            available=torch.from_numpy(np.stack([text_avail, num_avail], axis=1)),
            meta=meta,
        )

    def _encode_text(self, docs: list[str], avail: np.ndarray) -> np.ndarray:
        """Encode the entity documents; unavailable rows are zero."""
        c = self.cfg
        if c.text_encoder == "minilm":
            from data_prep.features import encode_texts  # heavy: only when asked for

            out = encode_texts(docs, encoder="minilm", cache_dir=cache_root(c.cache_dir) / "text").numpy()
        elif c.text_encoder == "hashing":
            from data_prep.features import hashing_encode

            out = hashing_encode(docs, dim=c.text_dim)
        else:
            out = svd_text_features(docs, c.text_dim, c.seed)
        out = np.ascontiguousarray(out, dtype=np.float32)
        out[~avail] = 0.0
        return out


# --------------------------------------------------------------------------- labels


def assign_domains(
    types: dict[str, set[str]], num_classes: int, exclude: set[str]
) -> tuple[dict[str, str], list[str], dict[str, Any]]:
    """Label every entity with a coarse domain (see the module docstring for the rule).

    Returns ``(entity -> domain, classes ordered by size then name, info)``.
    """
    per_entity: dict[str, Counter[str]] = {}
    for mid, ts in types.items():
        cnt = Counter(t.split("/")[1] for t in ts)
        for d in exclude:
            cnt.pop(d, None)
        if cnt:
            per_entity[mid] = cnt
    spread = Counter(d for cnt in per_entity.values() for d in cnt)  # entities having each domain

    def best(cnt: Counter[str], allowed: set[str] | None = None) -> str | None:
        cands = [d for d in cnt if allowed is None or d in allowed]
        return min(cands, key=lambda d: (-cnt[d], spread[d], d)) if cands else None

    primary = Counter(best(cnt) for cnt in per_entity.values())
    ranked = sorted(primary, key=lambda d: (-primary[d], d))
    if len(ranked) < 2:
        raise DataError(f"entity types give {len(ranked)} usable domain(s); node classification needs at least 2")
    kept = set(ranked[:num_classes])
    labels = {}
    for mid, cnt in per_entity.items():
        d = best(cnt, kept)
        if d is not None:
            labels[mid] = d
    sizes = Counter(labels.values())
    classes = sorted(sizes, key=lambda d: (-sizes[d], d))
    info = {"domains_available": len(ranked), "entities_with_domain": len(per_entity)}
    return labels, classes, info


# --------------------------------------------------------------------------- text


def svd_text_features(docs: list[str], dim: int, seed: int) -> np.ndarray:
    """TF-IDF over hashed unigrams + bigrams, projected to ``dim`` by a seeded TruncatedSVD.

    Terms occurring in a single document are dropped first. Rows are L2-normalized.
    With fewer documents (or terms) than ``dim`` the projection has fewer components and
    the rest is zero padding, so the size is fixed.
    """
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
    from threadpoolctl import threadpool_limits

    out = np.zeros((len(docs), dim), dtype=np.float32)
    if len(docs) < 2:
        return out
    counts = HashingVectorizer(n_features=2**18, ngram_range=(1, 2), alternate_sign=False, norm=None).transform(docs)
    # Terms seen in one document cannot relate two documents: dropping them (and the
    # unused hash buckets) shrinks the matrix ~20x and the SVD with it.
    df = counts.getnnz(axis=0)
    counts = counts[:, np.flatnonzero(df >= 2)] if (df >= 2).sum() >= 2 else counts[:, np.flatnonzero(df)]
    tfidf = TfidfTransformer(sublinear_tf=True).fit_transform(counts)
    k = min(dim, len(docs) - 1, max(tfidf.shape[1] - 1, 1))
    # One BLAS thread: the matrices are small, and multi-threaded OpenBLAS slows down
    # several-fold when the cores are shared (measured 23 s vs 3.5 s on a busy 2-core box).
    with threadpool_limits(limits=1):
        z = TruncatedSVD(n_components=k, random_state=seed, n_iter=5).fit_transform(tfidf)
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    out[:, :k] = np.divide(z, norm, out=np.zeros_like(z), where=norm > 0)
    return out


# --------------------------------------------------------------------------- numeric


def numeric_matrix(
    rows: list[tuple[str, str, float]], index: dict[str, int], min_count: int, presence_flags: bool
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``[N, A]`` per-attribute slots (see module docstring), availability, attribute names."""
    n = len(index)
    sums: dict[tuple[int, str], list[float]] = defaultdict(list)
    for mid, attr, value in rows:
        i = index.get(mid)
        if i is not None:
            sums[(i, attr)].append(math.copysign(math.log1p(abs(value)), value))
    owners = Counter(attr for (_, attr) in sums)
    attributes = sorted(a for a, k in owners.items() if k >= min_count)
    col = {a: j for j, a in enumerate(attributes)}
    vals = np.zeros((n, len(attributes)), dtype=np.float64)
    present = np.zeros((n, len(attributes)), dtype=np.bool_)
    for (i, attr), vs in sums.items():
        j = col.get(attr)
        if j is not None:
            vals[i, j] = float(np.mean(vs))
            present[i, j] = True
    for j in range(len(attributes)):
        m = present[:, j]
        x = vals[m, j]
        std = x.std()
        vals[m, j] = np.clip((x - x.mean()) / std, -5.0, 5.0) if std > 1e-12 else 0.0
    out = vals.astype(np.float32)
    if presence_flags:
        out = np.concatenate([out, present.astype(np.float32)], axis=1)
    return out, present.any(axis=1), attributes


# --------------------------------------------------------------------------- parsers


def read_type_file(path: Path) -> list[tuple[str, str]]:
    """``mid<TAB>/domain/type`` lines of the CET entity-typing files."""
    out: list[tuple[str, str]] = []
    for no, line in data_lines(read_text(path)):
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].startswith("/") or not parts[1].startswith("/") or len(parts[1]) < 2:
            raise DataError(f"{path}: line {no}: expected 'mid<TAB>/domain/type', got {line[:80]!r}")
        out.append((parts[0].strip(), parts[1].strip()))
    return out


def read_numeric_triples(path: Path) -> list[tuple[str, str, float]]:
    """mmkb numeric triples (validated by the KG loader), attributes shortened to their last URI part."""
    from data_prep.kg.fb15k237 import read_numeric_triples as read_full

    return [(mid, attr.rsplit("/", 1)[-1], value) for mid, attr, value in read_full(path)]
