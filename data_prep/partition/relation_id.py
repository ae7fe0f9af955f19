"""Relation-ID partition of a KG into clients (FedE / FedMKGC protocol).

Shuffle the relation ids with a seeded RNG and cut them into C (near-)equal groups with
``np.array_split``; client c holds every triple (train, valid and test pooled) whose
relation is in group c. Clients therefore share entities but never relation types, which
is the cross-silo setting of FedE and MMFeD3-HidE (Table II). Each client's triples are
then split 8:1:1 into train/valid/test with a per-client seeded shuffle
(``n_valid = round(0.1 n)``, ``n_test = round(0.1 n)``, the rest train). A client's
entities are every entity of its triples (all three splits: they are what it embeds and
what it ranks as candidates).

By construction the mean number of relations per client is R / C and the mean number of
triples is T / C exactly; the mean number of entities depends on the shuffle.

Table II on FB15K-237 (the paper's FB15K-237-Fed3/5/10), and why the default seed is 2
there. The paper's partition is one draw we cannot recover, so only its statistics can be
matched. Mean relations (79.0 / 47.4 / 23.7) and triples (T / C; the paper's Fed3 value
103,373.0 is one more than 310,116 / 3 = 103,372.0, its Fed5 and Fed10 values are T / C
exactly) hold for any draw. Mean entities were 3.2 / 2.5 / 1.7% above the paper's
12,595.3 / 11,260.4 / 8,340.1 at seed 0. Measured over seeds 0-999 (one shuffle per seed,
cut into 3, 5 and 10 groups): our mean is +1.7 / +0.5 / +2.6% above the paper with a
seed-to-seed spread (sd) of 1.2 / 1.7 / 2.7%, i.e. the paper sits at the 10th / 36th /
17th percentile of draws. Other counting rules (means over seeds 0-199) are not better
supported: entities of the client's train split only: -0.5 / -3.2 / -4.3%, fits Fed3 but
misses Fed5 and Fed10 by about the seed spread; entities of the client's triples that
come from the original FB15K-237 train file (as if the paper had not re-split): +0.3 /
-1.9 / -1.9%; train + valid only: +0.7 / -1.1 / -0.6%, a rule with no rationale;
consecutive relation ids without a shuffle: -19 / -26 / -37%. Rounding cannot matter
(``array_split`` gives exactly 237 / C on average, as the paper's 47.4 and 23.7 do).
Every rule stays within about one seed-spread of the paper, so the gap is the spread of a
single draw rather than a counting rule, and the defensible fix keeps the natural count
(all of a client's entities) and fixes FB15K-237's draw: ``CANONICAL_SEEDS`` gives it
seed 2, the smallest seed whose 3-, 5- and 10-client partitions all lie within 2% of the
paper (12,625.3 / 11,219.0 / 8,376.9 entities: +0.24 / -0.37 / +0.44%; 18% of seeds 0-999
qualify). ``partition.seed`` overrides it; every other dataset defaults to seed 0.
``tests/test_kg_table2.py`` checks these numbers on the real data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from benchmark.errors import ConfigError
from benchmark.registry import PARTITIONERS
from benchmark.seeding import spawned_rngs
from data_prep.component_kinds import KGPartitioner
from data_prep.kg.dataset import KGDataset


@dataclass
class KGClient:
    """One client's share: its relation ids, entities (sorted global ids) and triples
    (global ids) split into train/valid/test."""

    cid: int
    relations: Tensor
    entities: Tensor
    train: Tensor
    valid: Tensor
    test: Tensor

    @property
    def num_triples(self) -> int:
        return int(self.train.shape[0] + self.valid.shape[0] + self.test.shape[0])

    def all_triples(self) -> Tensor:
        return torch.cat([self.train, self.valid, self.test], dim=0)


@dataclass
class KGPartition:
    """A partitioner's output for a KG."""

    clients: list[KGClient]
    num_entities: int
    num_relations: int
    info: dict = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        return len(self.clients)


def split_triples(triples: np.ndarray, ratios: tuple[float, float, float], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Shuffle and cut into train/valid/test with ``round`` for valid and test."""
    n = len(triples)
    perm = rng.permutation(n)
    n_valid = int(round(ratios[1] * n))
    n_test = int(round(ratios[2] * n))
    n_train = n - n_valid - n_test
    shuffled = triples[perm]
    return shuffled[:n_train], shuffled[n_train:n_train + n_valid], shuffled[n_train + n_valid:]


def relation_id_partition(
    triples: Tensor,
    num_relations: int,
    num_clients: int,
    seed: int = 0,
    ratios: tuple[float, float, float] = (0.8, 0.1, 0.1),
    num_entities: int | None = None,
) -> KGPartition:
    """Partition pooled ``triples`` ``[T, 3]`` by shuffled relation-id groups (see module doc)."""
    if num_clients < 1 or num_clients > num_relations:
        raise ConfigError(f"relation_id partition needs 1 <= num_clients <= {num_relations} relations, got {num_clients}")
    if len(ratios) != 3 or any(r < 0 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
        raise ConfigError(f"relation_id split ratios must be three non-negative numbers summing to 1, got {ratios}")
    arr = triples.cpu().numpy().astype(np.int64)
    rngs = spawned_rngs(seed, num_clients + 1)
    perm = rngs[0].permutation(num_relations)
    groups = np.array_split(perm, num_clients)
    owner = np.empty(num_relations, dtype=np.int64)
    for c, g in enumerate(groups):
        owner[g] = c
    triple_owner = owner[arr[:, 1]]
    order = np.argsort(triple_owner, kind="stable")
    bounds = np.searchsorted(triple_owner[order], np.arange(num_clients + 1))
    clients: list[KGClient] = []
    for c, g in enumerate(groups):
        mine = arr[order[bounds[c]:bounds[c + 1]]]
        tr, va, te = split_triples(mine, ratios, rngs[c + 1])
        ents = np.unique(np.concatenate([mine[:, 0], mine[:, 2]]))
        clients.append(KGClient(
            cid=c,
            relations=torch.from_numpy(np.sort(g)),
            entities=torch.from_numpy(ents),
            train=torch.from_numpy(tr), valid=torch.from_numpy(va), test=torch.from_numpy(te),
        ))
    E = int(num_entities if num_entities is not None else arr[:, [0, 2]].max() + 1)
    return KGPartition(clients, E, num_relations, {"seed": seed, "ratios": list(ratios), "pooled_triples": len(arr)})


def partition_stats(part: KGPartition) -> dict[str, float]:
    """The paper's Table II columns: client count and mean relations / entities / triples
    per client, plus spreads, the share of entities held by more than one client and the
    totals (every pooled triple and relation must be used exactly once)."""
    rel = np.array([len(c.relations) for c in part.clients], dtype=np.float64)
    ent = np.array([len(c.entities) for c in part.clients], dtype=np.float64)
    tri = np.array([c.num_triples for c in part.clients], dtype=np.float64)
    holders = torch.zeros(part.num_entities, dtype=torch.long)
    for c in part.clients:
        holders[c.entities] += 1
    present = holders > 0
    return {
        "clients": part.num_clients,
        "mean_relations": float(rel.mean()),
        "mean_entities": float(ent.mean()),
        "mean_triples": float(tri.mean()),
        "min_entities": float(ent.min()),
        "max_entities": float(ent.max()),
        "min_triples": float(tri.min()),
        "max_triples": float(tri.max()),
        "shared_entity_fraction": float((holders[present] > 1).double().mean()) if bool(present.any()) else 0.0,
        "total_triples": int(tri.sum()),
        "total_relations": int(rel.sum()),
    }


#: the relation shuffle of a dataset when ``partition.seed`` is null (see the module docstring)
CANONICAL_SEEDS: dict[str, int] = {"fb15k237": 2}


def resolve_seed(seed: int | None, dataset_name: str) -> int:
    """The configured seed, or the dataset's canonical one (0 for datasets without one)."""
    return int(seed) if seed is not None else CANONICAL_SEEDS.get(dataset_name, 0)


@PARTITIONERS.register("relation_id")
class RelationIdPartitioner(KGPartitioner):
    """KG partition by shuffled relation-id groups (clients share entities, never relations); 8:1:1 split per client."""

    #: the datasets it applies to; the graph builder refuses it with this
    only_for: ClassVar[str] = ("knowledge-graph datasets (synthetic_kg, fb15k237, fb15k237_small); graph datasets "
                               "take dirichlet_label, iid or louvain")

    @dataclass
    class Config:
        seed: int | None = field(default=None, metadata={"help": "seed of the relation shuffle and of the per-client splits; null = the dataset's canonical draw (fb15k237: 2, matching the paper's Table II; others: 0)", "min": 0, "max": 2**32 - 1})
        train: float = field(default=0.8, metadata={"help": "share of each client's triples for training", "probability": True})
        valid: float = field(default=0.1, metadata={"help": "share for validation", "probability": True})
        test: float = field(default=0.1, metadata={"help": "share for testing", "probability": True})

        def __post_init__(self) -> None:
            if abs(self.train + self.valid + self.test - 1.0) > 1e-6:
                raise ConfigError(f"partition.train + valid + test must sum to 1, got {self.train + self.valid + self.test}")

    def __init__(self, config: "RelationIdPartitioner.Config | None" = None) -> None:
        self.config = config or self.Config()

    def split(self, dataset: KGDataset, num_clients: int) -> KGPartition:
        """Pool the dataset's train/valid/test triples and partition them."""
        c = self.config
        return relation_id_partition(dataset.all_triples(), dataset.num_relations, num_clients,
                                     seed=resolve_seed(c.seed, dataset.name), ratios=(c.train, c.valid, c.test),
                                     num_entities=dataset.num_entities)
