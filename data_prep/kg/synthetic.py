"""A small synthetic multimodal KG with learnable structure, for tests and smoke runs.

Why not random triples: a KGE model must be able to *learn* something in a test, and
multimodal features must carry signal about the structure, otherwise fusion and
imputation code cannot be checked for doing anything. So:

- each entity has a type and a latent vector ``z = type centre + noise``;
- "typed" relations map a head type to a tail type and link each head to the tail
  entities nearest to a relation-specific linear map of its latent (learnable);
- relation patterns RotatE is known to capture are planted explicitly: a *symmetric*
  relation (pairs linked both ways), an *inverse* pair (r2 holds exactly the reversed
  triples of r1) and a *composition* (r3 = r1 followed by r2 along typed paths);
- every entity gets a random number of items per modality, each item being
  ``W_m z + noise`` with a modality-specific random projection ``W_m``, so that item means
  recover a noisy view of the latent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from benchmark.errors import ConfigError
from benchmark.registry import DATASETS
from data_prep.kg.dataset import KGDataset


def make_synthetic_kg(
    num_entities: int = 300,
    num_types: int = 4,
    num_typed_relations: int = 8,
    links_per_head: int = 2,
    latent_dim: int = 8,
    modality_dims: dict[str, int] | None = None,
    items_per_entity: tuple[int, int] = (1, 4),
    item_noise: float = 0.3,
    missing_rate: float = 0.1,
    split: tuple[float, float, float] = (0.8, 0.1, 0.1),
    seed: int = 0,
) -> KGDataset:
    """Generate the KG described in the module docstring.

    ``items_per_entity`` is an inclusive (min, max) range per modality; ``missing_rate`` is
    the fraction of entities given no items in a modality (natural missingness).
    """
    if num_entities < 2 * num_types or num_types < 2:
        raise ConfigError("synthetic_kg needs num_types >= 2 and num_entities >= 2 * num_types")
    if items_per_entity[0] < 1 or items_per_entity[1] < items_per_entity[0]:
        raise ConfigError(f"items_per_entity must be (min >= 1, max >= min), got {items_per_entity}")
    if abs(sum(split) - 1.0) > 1e-6:
        raise ConfigError(f"split must sum to 1, got {split}")
    modality_dims = modality_dims or {"text": 32, "image": 16}
    rng = np.random.default_rng(seed)

    types = np.arange(num_entities) % num_types
    rng.shuffle(types)
    centres = rng.standard_normal((num_types, latent_dim)) * 2.0
    z = centres[types] + 0.7 * rng.standard_normal((num_entities, latent_dim))
    members = [np.nonzero(types == k)[0] for k in range(num_types)]

    triples: set[tuple[int, int, int]] = set()
    relations: list[str] = []

    def typed_links(src: int, dst: int, fraction: float = 0.6) -> list[tuple[int, int]]:
        m = rng.standard_normal((latent_dim, latent_dim)) / np.sqrt(latent_dim)
        heads = members[src][rng.random(len(members[src])) < fraction]
        tails = members[dst]
        proj = z[heads] @ m
        d = ((proj[:, None, :] - z[tails][None, :, :]) ** 2).sum(-1)
        pairs = []
        for i, h in enumerate(heads):
            for j in np.argsort(d[i])[:links_per_head]:
                if tails[j] != h:
                    pairs.append((int(h), int(tails[j])))
        return pairs

    typed: list[tuple[int, int, list[tuple[int, int]]]] = []
    for k in range(num_typed_relations):
        src, dst = int(rng.integers(num_types)), int(rng.integers(num_types))
        rel = len(relations)
        relations.append(f"typed_{k}_{src}to{dst}")
        pairs = typed_links(src, dst)
        typed.append((src, dst, pairs))
        triples.update((h, rel, t) for h, t in pairs)

    # symmetric: within one type, pairs linked both ways
    rel_sym = len(relations)
    relations.append("symmetric")
    for h, t in typed_links(0, 0, fraction=0.4):
        triples.add((h, rel_sym, t))
        triples.add((t, rel_sym, h))

    # inverse pair: r_inv holds exactly the reversed triples of the first typed relation
    rel_inv = len(relations)
    relations.append("inverse_of_typed_0")
    for h, t in typed[0][2]:
        triples.add((t, rel_inv, h))

    # composition: a relation from src of typed_a to dst of typed_b through typed_a's tail
    a = next((i for i in range(len(typed)) if any(typed[j][0] == typed[i][1] for j in range(len(typed)))), None)
    if a is not None:
        b = next(j for j in range(len(typed)) if typed[j][0] == typed[a][1])
        rel_comp = len(relations)
        relations.append(f"compose_typed_{a}_typed_{b}")
        nxt: dict[int, list[int]] = {}
        for h, t in typed[b][2]:
            nxt.setdefault(h, []).append(t)
        for h, mid in typed[a][2]:
            for t in nxt.get(mid, [])[:1]:
                if t != h:
                    triples.add((h, rel_comp, t))

    arr = np.array(sorted(triples), dtype=np.int64)
    perm = rng.permutation(len(arr))
    n_train = int(round(split[0] * len(arr)))
    n_valid = int(round(split[1] * len(arr)))
    parts = np.split(arr[perm], [n_train, n_train + n_valid])

    item_feats: dict[str, torch.Tensor] = {}
    item_entity: dict[str, torch.Tensor] = {}
    for m, dim in modality_dims.items():
        w = rng.standard_normal((latent_dim, dim)) / np.sqrt(latent_dim)
        counts = rng.integers(items_per_entity[0], items_per_entity[1] + 1, size=num_entities)
        counts[rng.random(num_entities) < missing_rate] = 0
        owner = np.repeat(np.arange(num_entities), counts)
        x = z[owner] @ w + item_noise * rng.standard_normal((len(owner), dim))
        item_feats[m] = torch.from_numpy(x.astype(np.float32))
        item_entity[m] = torch.from_numpy(owner.astype(np.int64))

    return KGDataset(
        name="synthetic_kg",
        entities=[f"e{i}" for i in range(num_entities)],
        relations=relations,
        train=torch.from_numpy(parts[0]),
        valid=torch.from_numpy(parts[1]),
        test=torch.from_numpy(parts[2]),
        item_feats=item_feats,
        item_entity=item_entity,
        entity_names=[f"type{types[i]}_e{i}" for i in range(num_entities)],
        meta={"entity_type": torch.from_numpy(types.astype(np.int64)), "seed": seed},
    )


@DATASETS.register("synthetic_kg")
class SyntheticKG:
    """Small synthetic multimodal KG (typed, symmetric, inverse and composed relations; item features from entity latents)."""

    @dataclass
    class Config:
        num_entities: int = field(default=300, metadata={"help": "number of entities", "min": 4, "max": 50_000_000})
        num_types: int = field(default=4, metadata={"help": "entity types (latent clusters)", "min": 2, "max": 100_000})
        num_typed_relations: int = field(default=8, metadata={"help": "relations linking a head type to a tail type", "min": 1, "max": 100_000})
        links_per_head: int = field(default=2, metadata={"help": "tails linked per head for each typed relation", "min": 1, "max": 10_000})
        latent_dim: int = field(default=8, metadata={"help": "width of the entity latent", "min": 1, "max": 65_536})
        text_dim: int = field(default=32, metadata={"help": "width of the 'text' items", "min": 1, "max": 65_536})
        image_dim: int = field(default=16, metadata={"help": "width of the 'image' items", "min": 1, "max": 65_536})
        min_items: int = field(default=1, metadata={"help": "fewest items an entity has in a modality", "min": 1, "max": 10_000})
        max_items: int = field(default=4, metadata={"help": "most items an entity has in a modality", "min": 1, "max": 10_000})
        item_noise: float = field(default=0.3, metadata={"help": "std of the per-item noise", "min": 0})
        missing_rate: float = field(default=0.1, metadata={"help": "fraction of entities with no items in a modality", "probability": True})
        seed: int = field(default=0, metadata={"help": "generator seed", "min": 0, "max": 2**32 - 1})

        def __post_init__(self) -> None:
            if self.num_entities < 2 * self.num_types:
                raise ConfigError(f"dataset.num_entities must be >= 2 * num_types ({2 * self.num_types}), "
                                  f"got {self.num_entities}")
            if self.max_items < self.min_items:
                raise ConfigError(f"dataset.max_items must be >= min_items ({self.min_items}), got {self.max_items}")

    def __init__(self, config: "SyntheticKG.Config | None" = None) -> None:
        self.config = config or self.Config()

    def load(self, root: str | None = None) -> KGDataset:
        """``root`` is accepted for a uniform interface and ignored (nothing is read)."""
        c = self.config
        return make_synthetic_kg(
            num_entities=c.num_entities, num_types=c.num_types, num_typed_relations=c.num_typed_relations,
            links_per_head=c.links_per_head, latent_dim=c.latent_dim,
            modality_dims={"text": c.text_dim, "image": c.image_dim},
            items_per_entity=(c.min_items, c.max_items), item_noise=c.item_noise,
            missing_rate=c.missing_rate, seed=c.seed,
        )
