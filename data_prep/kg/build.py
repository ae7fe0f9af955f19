"""Build the federated artifact of a KG run: KG -> relation-id partition -> dealt items ->
availability -> ``KGClientData`` clients (the FedMKGC protocol, docs/protocols.md Track 1).

Same design as the graph builder (``data_prep/build.py``): the seed-dependent decisions
(which triples and entities each client holds, which items it was dealt, which
(entity, modality) features are available) are saved once as a small artifact keyed by a
content hash, so every algorithm of a suite cell sees the same federation. Features are
not stored: they are recomputed from the dataset's items at build time, and an
unavailable feature always holds the fill value, never the true one.

Seeds: the relation shuffle and the 8:1:1 split use ``partition.seed`` (a fixed dataset
such as the paper's FB15K-237-Fed3, whatever the run seed); item dealing, availability and
the random fill use the run seed.

Options: the partition section names ``relation_id``; the missing section names
``kg_items`` (Dirichlet ``alpha`` of the item dealing, ``partitioned``, availability
``rate``); ``missing.fill`` is ``random`` (the paper) or ``zeros``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from benchmark import registry as R
from benchmark.config import RunConfig
from benchmark.errors import ConfigError, warn_rebuild
from benchmark.federation import FederatedData
from benchmark.registry import MASKERS
from data_prep.artifact import (
    artifact_keys,
    artifact_path,
    component_params,
    read_cached,
    resolve_component,
    save_atomic,
)
from data_prep.kg.dataset import KGDataset
from data_prep.kg.federation import KGClientData, make_kg_client
from benchmark.seeding import seeded_rng
from data_prep.partition.dirichlet_items import (
    COVER_MODES,
    build_client_modalities,
    client_item_features,
    cross_client_cosine,
    cross_client_jaccard,
    fill_unavailable,
    text_token_sets,
)
from data_prep.partition.relation_id import KGClient, KGPartition, partition_stats, resolve_seed

KG_ARTIFACT_VERSION = 1
KG_FILLS = ("random", "zeros")
AVAILABILITY_MODES = ("nominal", "effective")


@MASKERS.register("kg_items")
class KGItemMissing:
    """FedMKGC items: Dirichlet(alpha) dealing of each entity's items to its holders, then Bernoulli(rate) availability per (client, entity, modality)."""

    #: the datasets it applies to; the graph builder refuses it with this (the KG builder deals
    #: the items itself, data_prep/kg/build.py), so it has no graph-masker ``apply`` at all
    only_for: ClassVar[str] = ("knowledge-graph datasets (synthetic_kg, fb15k237, fb15k237_small); "
                               "graph datasets take node_level, client_level or none")
    kind: ClassVar[str] = "kg"  # options only: the KG builder deals the items (data_prep/component_kinds.py)

    @dataclass
    class Config:
        alpha: float = field(default=0.1, metadata={"help": "Dirichlet concentration of the per-entity item dealing", "positive": True})
        partitioned: bool = field(default=True, metadata={"help": "deal items (true) or give every holder all of them"})
        rate: float = field(default=0.5, metadata={"help": "availability probability r per (client, entity, modality)", "probability": True})
        cover: str = field(default="every_holder", metadata={
            "help": "every_holder: a holder the Dirichlet draw dealt none of an entity's items gets a copy of one, so "
                    "at r = 1 every client holds each modality the data gives its entities (the paper's 'diverse "
                    "descriptions for the same entity'); dealt: only the dealt items (measured availability 0.32-0.48 "
                    "at r = 1 on FB15K-237 Fed3)", "choices": COVER_MODES})
        modalities: str = field(default="all", metadata={"help": "item modalities the clients get (structure is always "
                                                                 "kept): all, or '+'-joined names such as text+visual; "
                                                                 "'visual' is image, else the numeric stand-in", "pattern": r"[^+]*[^+\s][^+]*(\+[^+]*[^+\s][^+]*)*", "pattern_help": "all or '+'-joined modality names"})
        availability: str = field(default="nominal", metadata={
            "help": "what rate r means: nominal (the paper's reading: P(keep) = r per (client, entity, modality) among "
                    "the entities dealt an item, so the share holding a modality is r x the item-holding rate, "
                    "0.16-0.25 at r = 0.5 on FB15K-237 Fed3 with cover: dealt) or effective (P(keep) = r / holding rate per "
                    "(client, modality), capped at 1, so that share is r wherever the dealing allows it)",
            "choices": AVAILABILITY_MODES})

    def __init__(self, cfg: "KGItemMissing.Config | None" = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed
        self.info: dict = {}



VISUAL_SLOT = ("image", "numeric")  # the paper's visual modality, else its offline stand-in (KG_DATA.md)


def select_modalities(dataset: KGDataset, spec: str) -> KGDataset:
    """The dataset with only the item modalities ``spec`` names (Table IV's S+rD / S+rV
    ablation); ``all`` returns it unchanged. Dropping a modality here, before partition
    and dealing, means no client ever sees it, as if the KG had none."""
    if spec == "all":
        return dataset
    keep: list[str] = []
    for name in (m.strip() for m in spec.split("+")):
        if name == "visual":
            name = next((m for m in VISUAL_SLOT if m in dataset.modalities), name)
        if name not in dataset.modalities:
            raise ConfigError(f"missing.modalities names '{name}', which dataset '{dataset.name}' lacks; "
                              f"it has: {', '.join(dataset.modalities) or '(none)'} (and 'visual' = {'/'.join(VISUAL_SLOT)})")
        if name not in keep:
            keep.append(name)
    return dataclasses.replace(
        dataset, item_feats={m: dataset.item_feats[m] for m in keep},
        item_entity={m: dataset.item_entity[m] for m in keep},
        item_text={m: t for m, t in dataset.item_text.items() if m in keep})


def _kg_keys(dataset: KGDataset, cfg: RunConfig, part_params: dict[str, Any], mask_params: dict[str, Any]) -> tuple[str, str]:
    """(artifact hash, recipe hash without the seed)."""
    return artifact_keys("kg:" + dataset.fingerprint(), cfg, part_params, {**mask_params, "fill": cfg.missing.fill,
                                                    "kg_version": KG_ARTIFACT_VERSION})


def _load_kg_artifact(path: Path, num_clients: int, num_modalities: int) -> dict[str, Any] | None:
    """A cached KG artifact, or None when absent, unreadable or inconsistent."""
    if not path.is_file():
        return None
    try:
        art = read_cached(path)
        ok = (art.get("version") == KG_ARTIFACT_VERSION and art.get("kind") == "kg"
              and len(art["clients"]) == num_clients
              and all(tuple(c["available"].shape) == (c["entities"].numel(), num_modalities) for c in art["clients"]))
    except Exception as e:  # a truncated or foreign file is rebuilt, not trusted
        warn_rebuild(path, f"is unreadable ({type(e).__name__})")
        return None
    return art if ok else None


def _compute_artifact(dataset: KGDataset, cfg: RunConfig, part_cls: type, part_cfg: Any, mask_cfg: Any,
                      key: str, recipe: str) -> dict[str, Any]:
    partition: KGPartition = part_cls(part_cfg).split(dataset, cfg.partition.num_clients)
    mods = build_client_modalities(dataset, partition, alpha=mask_cfg.alpha, partitioned=mask_cfg.partitioned,
                                   rate=mask_cfg.rate, fill="zeros", seed=cfg.seed,
                                   availability=mask_cfg.availability, cover=mask_cfg.cover)
    clients = []
    for c, cm in zip(partition.clients, mods):
        clients.append({"relations": c.relations, "entities": c.entities, "train": c.train, "valid": c.valid,
                        "test": c.test, "available": cm.available, "items": dict(cm.items)})
    return {"version": KG_ARTIFACT_VERSION, "kind": "kg", "hash": key, "recipe": recipe, "clients": clients,
            "partition_info": {k: v for k, v in partition.info.items() if isinstance(v, (int, float, str, list))}}


def assemble_kg(dataset: KGDataset, art: dict[str, Any], cfg: RunConfig, key: str, recipe: str,
                reused: bool = False) -> FederatedData:
    """Clients from a dataset plus an artifact: item means, fill, local ids, statistics."""
    fill = cfg.missing.fill
    mods = dataset.modalities
    clients: list[KGClientData] = []
    natural: dict[str, list[tuple[Tensor, Tensor]]] = {m: [] for m in mods}  # (item mean, has any item) per client
    for cid, c in enumerate(art["clients"]):
        ents = c["entities"].long()
        avail = c["available"].bool()
        gen = torch.Generator().manual_seed(int(seeded_rng(cfg.seed, f"kg_fill/{cid}").integers(2**62)))
        feats = {}
        for j, m in enumerate(mods):
            x, has = client_item_features(dataset.item_feats[m], dataset.item_entity[m], c["items"][m].long(), ents)
            natural[m].append((x, has))
            feats[m] = fill_unavailable(x, avail[:, j], fill, gen)
        clients.append(make_kg_client(cid, ents, c["relations"], (c["train"], c["valid"], c["test"]), feats, avail))
    similarity = cross_client_similarity(dataset, art, natural)
    del natural
    part = KGPartition([KGClient(i, c["relations"], c["entities"], c["train"], c["valid"], c["test"])
                        for i, c in enumerate(art["clients"])], dataset.num_entities, dataset.num_relations)
    rows = [{
        "cid": c.cid, "nodes": c.num_entities, "edges": int(c.train_triples.shape[0]), "relations": c.num_relations,
        "boundary_edges": 0, "train": int(c.train_triples.shape[0]), "val": int(c.valid_triples.shape[0]),
        "test": int(c.test_triples.shape[0]), "labels": [],
        "available": {m: round(float(a), 4) for m, a in zip(mods, c.available.float().mean(0))},
    } for c in clients]
    stats = {
        "clients": rows, "dropped_edges": 0,
        "dropped_nodes": int(dataset.num_entities - torch.unique(torch.cat([c.global_ids for c in clients])).numel()),
        "artifact_hash": key, "artifact_recipe": recipe, "artifact_reused": reused,
        "partition_info": {**art.get("partition_info", {}), **partition_stats(part)},
        "missing_info": {"method": "kg_items", "fill": fill, "similarity": similarity}, "dataset": dataset.name,
        "num_nodes": dataset.num_entities, "num_edges": dataset.num_triples, "num_relations": dataset.num_relations,
    }
    stats["coverage"] = data_coverage(dataset, clients)
    stats["summary"] = table_ii_lines(dataset, stats["partition_info"], similarity)
    pooled = pooled_kg_client(dataset, clients, fill, cfg.seed)
    return FederatedData(clients=list(clients), modalities=mods, feature_dims=dataset.feature_dims, num_classes=0,
                         artifact_hash=key, num_global_nodes=dataset.num_entities, pooled=pooled, stats=stats)


def data_coverage(dataset: KGDataset, clients: list[KGClientData]) -> dict[str, float]:
    """Per modality, the share of all clients' entities that the dataset gives at least one
    item of it: the most a federation can hold, whatever the dealing and the rate (numeric
    attributes cover about 70% of fb15k237_small's entities). A caption divides the measured
    availability by it, so "r = 100%" reads as full availability of what the data has."""
    total = sum(c.num_entities for c in clients)
    out: dict[str, float] = {}
    for m in dataset.modalities:
        has = torch.bincount(dataset.item_entity[m].long(), minlength=dataset.num_entities) > 0
        held = sum(int(has[c.global_ids].sum()) for c in clients)
        out[m] = round(held / total, 4) if total else 0.0
    return out


def cross_client_similarity(dataset: KGDataset, art: dict[str, Any],
                            natural: dict[str, list[tuple[Tensor, Tensor]]]) -> dict[str, dict[str, float]]:
    """Table II's S_m columns, on the dealt items before any availability mask: per modality
    the mean cross-client cosine of the same entity's item-mean features (pairs where both
    clients hold an item; the paper's S_v on ViT features), and for text modalities the
    token Jaccard of the held strings (the paper's S_d). NaN where no pair qualifies."""
    ents = [c["entities"].long() for c in art["clients"]]
    out: dict[str, dict[str, float]] = {}
    for m, per_client in natural.items():
        out[m] = {"cosine": cross_client_cosine(ents, [x for x, _ in per_client], [h for _, h in per_client])}
        if m in dataset.item_text:
            sets = [text_token_sets(dataset.item_text[m], dataset.item_entity[m], c["items"][m].long())
                    for c in art["clients"]]
            out[m]["jaccard"] = cross_client_jaccard(ents, sets)
    return out


def table_ii_lines(dataset: KGDataset, info: dict[str, Any], similarity: dict[str, dict[str, float]]) -> list[str]:
    """The paper's Table II row of this federation (what ``prepare`` prints under the
    client table): mean relations / entities / triples per client, whether every pooled
    triple is used once, and the cross-client feature similarity."""
    used = info.get("total_triples", 0)
    sims = ", ".join(f"{m} {k} {v:.3f}" for m, d in similarity.items() for k, v in d.items())
    return [
        f"Table II ({dataset.name}, {info.get('clients')} clients, relation shuffle seed {info.get('seed')}): "
        f"mean relations {info.get('mean_relations', 0):.1f}, mean entities {info.get('mean_entities', 0):,.1f}, "
        f"mean triples {info.get('mean_triples', 0):,.1f}",
        f"triples used {used:,} of {dataset.num_triples:,} ({'all' if used == dataset.num_triples else 'NOT all'}), "
        f"relations used {info.get('total_relations', 0)} of {dataset.num_relations}",
        f"cross-client similarity of an entity's dealt items (before masking): {sims or 'no modality'}",
    ]


def pooled_kg_client(dataset: KGDataset, clients: list[KGClientData], fill: str, seed: int) -> KGClientData:
    """The centralized view (MMCen): one client (cid -1) holding the union of every client's
    triples, each kept in the split it has on its client (so the bound is tested on exactly
    the federation's test triples), with global entity ids (the union of the clients'
    entities, sorted), global relation ids, and complete, unpartitioned features: the mean
    of *all* items of each entity, available wherever the entity has any item (no item
    dealing, no Bernoulli mask). An entity with no item at all is naturally missing and
    gets the configured fill, as on a client."""
    ents = torch.unique(torch.cat([c.global_ids for c in clients])) if clients else torch.empty(0, dtype=torch.long)
    rels = torch.unique(torch.cat([c.relations for c in clients])) if clients else torch.empty(0, dtype=torch.long)

    def to_global(c: KGClientData, t: Tensor) -> Tensor:
        return torch.stack([c.global_ids[t[:, 0]], c.relations[t[:, 1]], c.global_ids[t[:, 2]]], dim=1)

    empty = torch.empty(0, 3, dtype=torch.long)
    splits = tuple(torch.cat([empty] + [to_global(c, c.split_triples(s)) for c in clients])
                   for s in ("train", "valid", "test"))
    gen = torch.Generator().manual_seed(int(seeded_rng(seed, "kg_fill/pooled").integers(2**62)))
    feats: dict[str, Tensor] = {}
    avail = torch.zeros(len(ents), len(dataset.modalities), dtype=torch.bool)
    for j, m in enumerate(dataset.modalities):
        x, has = dataset.entity_features(m)
        avail[:, j] = has[ents]
        feats[m] = fill_unavailable(x[ents], avail[:, j], fill, gen)
    return make_kg_client(-1, ents, rels, splits, feats, avail)  # type: ignore[arg-type]


@R.FEDERATION_BUILDERS.register("kg")
def build_kg_federation(cfg: RunConfig, dataset: KGDataset | None = None, loader: type | None = None) -> FederatedData:
    """Load (unless given), partition, deal items, mask, and build every KG client (cached)."""
    if cfg.missing.fill not in KG_FILLS:
        raise ConfigError(f"missing.fill must be random or zeros for a KG dataset, got '{cfg.missing.fill}'")
    if dataset is None:
        ds_cls, ds_cfg = resolve_component(R.DATASETS, cfg.dataset, "dataset")
        dataset = ds_cls(ds_cfg).load(cfg.dataset.root)
    if cfg.partition.name != "relation_id":
        raise ConfigError(f"a KG dataset needs partition.name: relation_id, got '{cfg.partition.name}'")
    if cfg.missing.name != "kg_items":
        raise ConfigError(f"a KG dataset needs missing.name: kg_items, got '{cfg.missing.name}'")
    if cfg.missing.content != "keep":
        raise ConfigError("missing.content: shuffle is a control of the graph tasks; KG datasets take keep")
    part_cls, part_cfg = resolve_component(R.PARTITIONERS, cfg.partition, "partition")
    _, mask_cfg = resolve_component(R.MASKERS, cfg.missing, "missing")
    dataset = select_modalities(dataset, mask_cfg.modalities)
    if getattr(part_cfg, "seed", 0) is None:  # the dataset's canonical relation shuffle, hashed as the number it is
        part_cfg = dataclasses.replace(part_cfg, seed=resolve_seed(None, dataset.name))
    mask_params = component_params(mask_cfg)
    for key, default in (("modalities", "all"), ("availability", "nominal"), ("cover", "dealt")):
        if mask_params.get(key) == default:  # the older protocol's values leave its artifact hashes unchanged
            del mask_params[key]
    key, recipe = _kg_keys(dataset, cfg, component_params(part_cfg), mask_params)
    path = artifact_path(cfg, key)
    art = _load_kg_artifact(path, cfg.partition.num_clients, len(dataset.modalities))
    reused = art is not None
    if art is None:
        art = _compute_artifact(dataset, cfg, part_cls, part_cfg, mask_cfg, key, recipe)
        save_atomic(art, path)
    return assemble_kg(dataset, art, cfg, key, recipe, reused)
