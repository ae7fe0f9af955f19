"""FB15K-237 with text and numeric-attribute items (the FedMKGC benchmark's base KG).

Every file has a pinned public source and sha256 (the copies in ``shared/data`` were taken
from exactly these). Files are looked for, in order, in the configured root, in
``$FEDMM_DATA_ROOT`` and in the offline mirror ``<repo>/../shared/data``; each place is
tried as ``<place>/fb15k237/<file>`` and ``<place>/<file>``. With ``download=True`` a
missing file is fetched into the root and verified; nothing ever needs the network when a
copy exists. Every line of every file is validated: a malformed line is a ``DataError``
naming the file and the line number.

Modalities (see ``docs/KG_DATA.md``):

- ``text``: one item per string: the entity name (Wikidata label, else the mid2name
  name), its Wikidata description, and each alias; encoded by ``data_prep.features``.
- ``numeric``: one item per mmkb numeric attribute triple ``(entity, attribute, value)``,
  encoded as ``a_attr + z * b_attr`` where ``a_attr, b_attr`` are fixed random unit-scale
  vectors seeded by the attribute name and ``z`` is the per-attribute z-score of the
  sign-preserving ``log1p`` of the value (clipped to +-5). The name-seeded vectors make an
  attribute's code independent of which other attributes a subset keeps.

No image content of FB15K-237 exists offline; ``load_entity_image_features`` reads image
features in the formats the MMKG community distributes (one tensor per entity as
``.npy``/``.pth`` files, or one dict ``.pth``/``.npz``), for users who have them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from benchmark.errors import DataError, first_line
from benchmark.registry import DATASETS
from benchmark.seeding import name_rng
from data_prep.datasets.sources import (  # noqa: F401 - MIRROR and REPO_ROOT are re-exported
    ENV_ROOT, MIRROR, REPO_ROOT, UNREADABLE, RemoteFile, download_file, file_present, read_text, search_places,
    sha256_file,
)
from data_prep.fb15k237_files import read_mid2name, read_triples_archive, read_wikidata
from data_prep.kg.dataset import KGDataset
from data_prep.safe_npy import load_npy, load_npz

DATASET_DIR = "fb15k237"
# File lookup (root, $FEDMM_DATA_ROOT, the shared mirror), checksums and downloads are the
# graph loaders' own helpers; this module only pins FB15K-237's files.


_GH = "https://raw.githubusercontent.com"
FILES: dict[str, RemoteFile] = {
    f.name: f
    for f in (
        RemoteFile("FB15k-237.tar.gz", f"{_GH}/TimDettmers/ConvE/f3c0eb28/FB15k-237.tar.gz",
                   "311df7930f842a02979eaa7a802484a6afe62303c07f915f1e6edbc30cbe05e8"),
        RemoteFile("FB15k_mid2name.txt", f"{_GH}/yao8839836/kg-bert/0b8f6251/data/FB15k-237/FB15k_mid2name.txt",
                   "4da94b8059a83bc7e08c832f573d34221d38e85030576e332a0d0e9726d13d73"),
        RemoteFile("entity2wikidata.json",
                   f"{_GH}/villmow/datasets_knowledge_embedding/9e392453/FB15k-237/entity2wikidata.json",
                   "80e74bb002fb9ca0ecd3d63879a3a51121db855d312a101917a1ffb6aed2fea9"),
        RemoteFile("FB15K_NumericalTriples.txt", f"{_GH}/mniepert/mmkb/dc1c89ca/FB15K/FB15K_NumericalTriples.txt",
                   "9fd4f2dfe95af2bc4caa6ce1db84641168f42be759217dfbfcf95ca79d5aa0f3"),
        RemoteFile("FB15K_ImageIndex.txt", f"{_GH}/mniepert/mmkb/dc1c89ca/FB15K/FB15K_ImageIndex.txt",
                   "3e7e2be4f8f801d0cfc57ab7fcbb537ffe3d26212f17383c4091c19686f76940"),
    )
}


# --------------------------------------------------------------------------- locating files


def locate(name: str, root: str | Path | None = None, download: bool = False, verify: bool = True) -> Path:
    """Path of a dataset file; a missing file is a DataError listing every place tried."""
    spec = FILES[name]
    tried: list[Path] = []
    for place in search_places(root, download):
        for cand in (place / DATASET_DIR / name, place / name):
            tried.append(cand)
            if file_present(cand):
                if verify:
                    got = sha256_file(cand)
                    if got != spec.sha256:
                        raise DataError(f"{cand}: sha256 {got} does not match the pinned {spec.sha256} (source {spec.url})")
                return cand
    if download:
        if root is None:
            raise DataError(f"cannot download {name}: set the dataset root (dataset.root) to a writable directory")
        return download_file(spec, Path(root) / DATASET_DIR)
    looked = "; ".join(str(p) for p in tried)
    raise DataError(
        f"missing data file {name} (looked in: {looked}); put it in one of those places, "
        f"set {ENV_ROOT}, or enable download (source: {spec.url})"
    )


# --------------------------------------------------------------------------- parsers
# The archive, mid2name and Wikidata readers are data_prep/fb15k237_files.py's, shared with the
# entity-typing loader; only the numeric-attribute reader is this loader's own.


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for no, line in enumerate(text.splitlines(), start=1):
        yield no, line


def read_numeric_triples(path: Path) -> list[tuple[str, str, float]]:
    """mmkb ``mid<TAB><attribute uri><TAB>value`` lines with a finite float value."""
    out: list[tuple[str, str, float]] = []
    text = read_text(path)
    for no, line in _lines(text):
        if not line.strip():
            continue
        parts = line.rstrip("\r").split("\t")
        if len(parts) != 3:
            raise DataError(f"{path}: line {no}: expected 'mid<TAB>attribute<TAB>value', got {line[:80]!r}")
        try:
            value = float(parts[2])
        except ValueError:
            raise DataError(f"{path}: line {no}: value {parts[2]!r} is not a number") from None
        if not math.isfinite(value):
            raise DataError(f"{path}: line {no}: value {parts[2]!r} is not finite")
        attr = parts[1].strip()
        if attr.startswith("<") and attr.endswith(">"):
            attr = attr[1:-1]
        out.append((parts[0].strip(), attr, value))
    return out


# --------------------------------------------------------------------------- items


def text_items(entities: list[str], wikidata: dict[str, dict], mid2name: dict[str, str]) -> tuple[list[str], list[int], list[str]]:
    """(strings, owner entity index, kind) for every entity's name, description and aliases.

    The name is the Wikidata label, else the mid2name name; aliases equal (ignoring case)
    to the name or to an earlier alias are dropped so that an item is never duplicated.
    """
    texts: list[str] = []
    owner: list[int] = []
    kinds: list[str] = []
    for i, mid in enumerate(entities):
        entry = wikidata.get(mid, {})
        name = (entry.get("label") or mid2name.get(mid) or "").strip()
        seen: set[str] = set()
        if name:
            texts.append(name), owner.append(i), kinds.append("name")
            seen.add(name.lower())
        desc = (entry.get("description") or "").strip()
        if desc:
            texts.append(desc), owner.append(i), kinds.append("description")
        for alt in entry.get("alternatives") or []:
            alt = alt.strip()
            if alt and alt.lower() not in seen:
                seen.add(alt.lower())
                texts.append(alt), owner.append(i), kinds.append("alias")
    return texts, owner, kinds


def _name_seeded_vector(name: str, salt: str, dim: int) -> np.ndarray:
    return name_rng(salt, name).standard_normal(dim) / math.sqrt(dim)


def encode_numeric_items(attributes: list[str], values: Iterable[float], dim: int = 64) -> np.ndarray:
    """``a_attr + z * b_attr`` per (attribute, value); see the module docstring for why.

    ``z`` is computed per attribute over the values given here: a z-score of
    ``sign(v) * log1p(|v|)`` (values span from metres to populations and years), clipped to
    +-5; an attribute with a single distinct value gets z = 0.
    """
    vals = np.asarray(list(values), dtype=np.float64)
    if len(attributes) != len(vals):
        raise DataError(f"numeric items: {len(attributes)} attributes for {len(vals)} values")
    out = np.zeros((len(vals), dim), dtype=np.float32)
    if not len(vals):
        return out
    logv = np.sign(vals) * np.log1p(np.abs(vals))
    attr_arr = np.asarray(attributes, dtype=object)
    for attr in sorted(set(attributes)):
        idx = np.nonzero(attr_arr == attr)[0]
        x = logv[idx]
        std = x.std()
        z = (x - x.mean()) / std if std > 1e-12 else np.zeros_like(x)
        z = np.clip(z, -5.0, 5.0)
        a = _name_seeded_vector(attr, "attr", dim)
        b = _name_seeded_vector(attr, "value", dim)
        out[idx] = (a[None, :] + z[:, None] * b[None, :]).astype(np.float32)
    return out


# --------------------------------------------------------------------------- image features

_IMAGE_EXTS = (".npy", ".pth", ".pt")


def _norm_id(s: str) -> str:
    """Match entity ids across spellings: '/m/06rf7', 'm.06rf7', 'm_06rf7' all -> 'm.06rf7'."""
    return s.strip().strip("/").replace("/", ".").replace("_", ".").lower()


def _as_item_matrix(value: object, where: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        arr = value.detach().cpu().float().numpy()
    elif isinstance(value, np.ndarray):
        arr = value.astype(np.float32)
    else:
        raise DataError(f"{where}: expected a tensor or array, got {type(value).__name__}")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[1] == 0:
        raise DataError(f"{where}: expected a feature vector [d] or matrix [k, d], got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise DataError(f"{where}: features hold NaN or inf")
    return arr


def _load_tensor_file(path: Path) -> object:
    if path.suffix == ".npy":
        try:
            return load_npy(path)
        except UNREADABLE as e:
            raise DataError(f"{path}: not a readable .npy array ({e})") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for corrupt or unsafe pickles
        raise DataError(f"{path}: not a readable tensor file ({type(e).__name__}: {first_line(e)})") from None


def load_entity_image_features(path: str | Path, entities: list[str]) -> tuple[Tensor, Tensor, dict]:
    """Read per-entity image features and return them as items.

    ``path`` is a directory of per-entity files (``<entity id>.npy|.pth|.pt``, each a
    vector ``[d]`` or a matrix ``[k, d]`` = k images), or one ``.pth``/``.pt`` file holding
    a dict ``{entity id: tensor}``, or one ``.npz`` whose keys are entity ids. Entity ids
    match across '/', '.' and '_' spellings of Freebase mids. Returns ``(feats [n, d],
    owner [n], info)``; ``info`` counts unmatched ids and entities without features (the
    natural missingness of the visual modality).
    """
    p = Path(path)
    index = {_norm_id(e): i for i, e in enumerate(entities)}
    raw: list[tuple[str, object, str]] = []
    if p.is_dir():
        # an entity's file that is there but unreadable is an error, not an entity without an image
        files = sorted(f for f in p.iterdir() if f.suffix in _IMAGE_EXTS and file_present(f))
        if not files:
            raise DataError(f"{p}: no {'/'.join(_IMAGE_EXTS)} feature files in this directory")
        for f in files:
            raw.append((f.stem, _load_tensor_file(f), str(f)))
    elif p.is_file() and p.suffix == ".npz":
        try:
            with load_npz(p) as z:
                for k in z.files:
                    raw.append((k, z[k], f"{p}[{k}]"))
        except UNREADABLE as e:
            raise DataError(f"{p}: not a readable .npz archive ({type(e).__name__}: {e})") from None
    elif p.is_file() and p.suffix in (".pth", ".pt"):
        obj = _load_tensor_file(p)
        if not isinstance(obj, dict):
            raise DataError(f"{p}: expected a dict {{entity id: tensor}}, got {type(obj).__name__}")
        for k, v in obj.items():
            raw.append((str(k), v, f"{p}[{k}]"))
    elif not p.exists():
        raise DataError(f"image feature path not found: {p}")
    else:
        raise DataError(f"{p}: expected a directory, a .pth/.pt dict file or an .npz archive")

    feats: list[np.ndarray] = []
    owner: list[int] = []
    unmatched = 0
    dim: int | None = None
    for key, value, where in raw:
        ent = index.get(_norm_id(key))
        if ent is None:
            unmatched += 1
            continue
        arr = _as_item_matrix(value, where)
        if dim is None:
            dim = arr.shape[1]
        elif arr.shape[1] != dim:
            raise DataError(f"{where}: feature dimension {arr.shape[1]} differs from the first file's {dim}")
        feats.append(arr)
        owner.extend([ent] * arr.shape[0])
    if dim is None:
        raise DataError(f"{p}: no feature matched any of the {len(entities)} entities (first ids: {', '.join(k for k, _, _ in raw[:3])})")
    x = torch.from_numpy(np.concatenate(feats, axis=0))
    own = torch.tensor(owner, dtype=torch.long)
    covered = int(torch.unique(own).numel())
    info = {"items": int(x.shape[0]), "unmatched_ids": unmatched, "entities_without": len(entities) - covered}
    return x, own, info


# --------------------------------------------------------------------------- the loader


def build_vocab(triples: dict[str, list[tuple[str, str, str]]]) -> tuple[list[str], list[str]]:
    """Sorted entity and relation vocabularies over all splits (order-independent ids)."""
    ents: set[str] = set()
    rels: set[str] = set()
    for rows in triples.values():
        for h, r, t in rows:
            ents.add(h), ents.add(t), rels.add(r)
    return sorted(ents), sorted(rels)


def to_id_tensor(rows: list[tuple[str, str, str]], ent_id: dict[str, int], rel_id: dict[str, int]) -> Tensor:
    arr = np.fromiter(
        (x for h, r, t in rows for x in (ent_id[h], rel_id[r], ent_id[t])), dtype=np.int64, count=3 * len(rows)
    )
    return torch.from_numpy(arr.reshape(-1, 3))


def load_fb15k237(
    root: str | Path | None = None,
    text_encoder: str = "minilm",
    numeric_dim: int = 64,
    image_features: str | Path | None = None,
    cache_dir: str | Path | None = ".cache/fedmm/text",
    download: bool = False,
    verify: bool = True,
) -> KGDataset:
    """Load FB15K-237 with ``text`` and ``numeric`` items (and ``image`` when given).

    ``text_encoder`` is ``minilm``, ``hashing`` or ``none`` (strings kept, no features).
    """
    files = {n: locate(n, root, download=download, verify=verify) for n in
             ("FB15k-237.tar.gz", "FB15k_mid2name.txt", "entity2wikidata.json", "FB15K_NumericalTriples.txt")}
    triples = read_triples_archive(files["FB15k-237.tar.gz"])
    entities, relations = build_vocab(triples)
    ent_id = {e: i for i, e in enumerate(entities)}
    rel_id = {r: i for i, r in enumerate(relations)}
    splits = {s: to_id_tensor(rows, ent_id, rel_id) for s, rows in triples.items()}

    mid2name = read_mid2name(files["FB15k_mid2name.txt"])
    wikidata = read_wikidata(files["entity2wikidata.json"])
    texts, owner, kinds = text_items(entities, wikidata, mid2name)
    names = [(wikidata.get(m, {}).get("label") or mid2name.get(m) or m) for m in entities]

    item_feats: dict[str, Tensor] = {}
    item_entity: dict[str, Tensor] = {}
    item_text: dict[str, list[str]] = {}
    if text_encoder != "none":
        from data_prep.features import encode_texts

        item_feats["text"] = encode_texts(texts, encoder=text_encoder, cache_dir=cache_dir)
        item_entity["text"] = torch.tensor(owner, dtype=torch.long)
        item_text["text"] = texts

    numeric = [(ent_id[m], a, v) for m, a, v in read_numeric_triples(files["FB15K_NumericalTriples.txt"]) if m in ent_id]
    item_feats["numeric"] = torch.from_numpy(encode_numeric_items([a for _, a, _ in numeric], [v for _, _, v in numeric], numeric_dim))
    item_entity["numeric"] = torch.tensor([e for e, _, _ in numeric], dtype=torch.long)

    if image_features is not None:
        x, own, _ = load_entity_image_features(image_features, entities)
        item_feats["image"], item_entity["image"] = x, own

    return KGDataset(
        name="fb15k237",
        entities=entities,
        relations=relations,
        train=splits["train"],
        valid=splits["valid"],
        test=splits["test"],
        item_feats=item_feats,
        item_entity=item_entity,
        item_text=item_text,
        entity_names=names,
        meta={"text_kinds": kinds, "text_encoder": text_encoder, "numeric_dim": numeric_dim,
              "sources": {n: FILES[n].url for n in files}},
    )


@DATASETS.register("fb15k237")
class FB15k237:
    """FB15K-237 (14,541 entities, 237 relations, 310,116 triples) with text and numeric-attribute items."""

    @dataclass
    class Config:
        text_encoder: str = field(default="minilm", metadata={"help": "minilm (384-d), hashing (fast, 256-d) or none", "choices": ("minilm", "hashing", "none")})
        numeric_dim: int = field(default=64, metadata={"help": "width of the encoded numeric-attribute items", "min": 1, "max": 65_536})
        image_features: str | None = field(default=None, metadata={"help": "path to per-entity image features (dir of .npy/.pth, dict .pth, or .npz)"})
        cache_dir: str = field(default=".cache/fedmm/text", metadata={"help": "where encoded text items are cached"})
        download: bool = field(default=False, metadata={"help": "fetch missing files from their pinned public sources"})
        verify: bool = field(default=True, metadata={"help": "check every file's sha256 against the pinned value"})

    def __init__(self, config: "FB15k237.Config | None" = None) -> None:
        self.config = config or self.Config()

    def load(self, root: str | Path | None = None) -> KGDataset:
        c = self.config
        return load_fb15k237(root, text_encoder=c.text_encoder, numeric_dim=c.numeric_dim,
                             image_features=c.image_features, cache_dir=c.cache_dir,
                             download=c.download, verify=c.verify)
