"""The federation of an AMFL run: source -> population -> ``AMFLClientData`` clients.

Cheap and deterministic, so nothing is cached on disk: the population is redrawn from
the run seed (same seed, same clients, architectures, samples and noise). The artifact
hash covers the source's content, the population options, the split and the seed; the
recipe is the same without the seed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from typing import Any

import numpy as np
import torch

from benchmark import registry as R
from benchmark.amfl.client import AMFLClientData
from benchmark.config import RunConfig, component_config
from benchmark.errors import ConfigError
from benchmark.federation import FederatedData
from data_prep.amfl.population import AMFLPopulation, ClientPlan
from data_prep.amfl.source import AMFLSource
from benchmark.seeding import seeded_rng

AMFL_ARTIFACT_VERSION = 1


def _keys(source: AMFLSource, cfg: RunConfig, params: dict[str, Any]) -> tuple[str, str]:
    recipe = {"version": AMFL_ARTIFACT_VERSION, "source": source.fingerprint(), "population": params,
              "num_clients": cfg.partition.num_clients, "split": [cfg.split.train, cfg.split.val, cfg.split.test]}

    def digest(obj: dict[str, Any]) -> str:
        return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]

    return digest({**recipe, "seed": cfg.seed}), digest(recipe)


def make_client(cid: int, plan: ClientPlan, source: AMFLSource, noise: float, seed: int) -> AMFLClientData:
    """One client: its samples in train, val, test order, only its own modalities, its
    labels relabelled 0..C-1, client-seeded feature noise, and the source's edges among its
    own samples only (none for a source without a graph)."""
    ids = torch.from_numpy(np.concatenate([plan.samples[s] for s in ("train", "val", "test")])).long()
    sizes = [len(plan.samples[s]) for s in ("train", "val", "test")]
    gen = torch.Generator().manual_seed(int(seeded_rng(seed, f"amfl/noise/{cid}").integers(2**62)))
    feats = {}
    for m in plan.arch.modalities:
        x = source.features[m][ids]
        feats[m] = x + noise * torch.randn(x.shape, generator=gen) if noise > 0 else x.clone()
    relabel = torch.full((source.num_classes,), -1, dtype=torch.long)
    relabel[torch.tensor(plan.classes)] = torch.arange(len(plan.classes))
    n = int(ids.numel())
    split = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    edges, _ = source.subgraph(ids)
    return AMFLClientData(
        cid=cid, global_ids=ids, features=feats, available=torch.ones(n, len(feats), dtype=torch.bool),
        edge_index=edges, y=relabel[source.y[ids]],
        train_mask=split == 0, val_mask=split == 1, test_mask=split == 2, num_classes=len(plan.classes),
        arch=plan.arch, token_dims={m: source.token_dims.get(m, source.feature_dims[m]) for m in feats})


@R.FEDERATION_BUILDERS.register("amfl")
def build_amfl_federation(cfg: RunConfig, source: AMFLSource, loader: type | None = None) -> FederatedData:
    """Validate the run against the AMFL protocol, draw the population, build the clients."""
    if cfg.partition.name != "amfl_population":
        raise ConfigError(f"dataset '{source.name}' is an AMFL simulation: partition.name must be amfl_population, "
                          f"got '{cfg.partition.name}'")
    if cfg.missing.name != "none":
        raise ConfigError(f"dataset '{source.name}' is an AMFL simulation: a client's modalities are its "
                          f"architecture's, so missing.name must be none, got '{cfg.missing.name}'")
    pop_cfg = component_config(R.PARTITIONERS, cfg.partition, "partition")
    population = AMFLPopulation(pop_cfg, cfg.seed).draw(
        source, cfg.partition.num_clients, (cfg.split.train, cfg.split.val, cfg.split.test))
    clients = [make_client(cid, plan, source, pop_cfg.noise, cfg.seed) for cid, plan in enumerate(population.clients)]
    key, recipe = _keys(source, cfg, dataclasses.asdict(pop_cfg))
    rows = [{"cid": c.cid, "nodes": c.num_nodes, "edges": int(c.edge_index.shape[1] // 2),
             "boundary_edges": source.subgraph(c.global_ids)[1], "train": int(c.train_mask.sum()),
             "val": int(c.val_mask.sum()), "test": int(c.test_mask.sum()),
             "labels": torch.bincount(c.y, minlength=c.num_classes).tolist(),
             "available": {m: 1.0 if m in c.features else 0.0 for m in source.modalities},
             "group": p.group, "arch": p.arch.to_dict(), "classes": p.classes}
            for c, p in zip(clients, population.clients)]
    kept = sum(r["edges"] for r in rows)
    stats = {"clients": rows, "dropped_edges": source.num_edges - kept, "dropped_nodes": 0, "artifact_hash": key,
             "artifact_recipe": recipe, "artifact_reused": False, "partition_info": population.info,
             "missing_info": {"method": "none"}, "dataset": source.name, "num_nodes": source.num_samples,
             "num_edges": source.num_edges, "caption": source.caption,
             "summary": [f"AMFL: {len(clients)} clients, {population.info['architectures']} architectures; "
                         + ", ".join(f"{g}: {n}" for g, n in sorted(Counter(p.group for p in population.clients)
                                                                   .items())),
                         source.caption]}
    return FederatedData(clients=list(clients), modalities=source.modalities, feature_dims=source.feature_dims,
                         num_classes=source.num_classes, artifact_hash=key, num_global_nodes=source.num_samples,
                         pooled=None, stats=stats)
