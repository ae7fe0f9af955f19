"""Missing-modality maskers: simulated availability, stacked on the dataset's natural one.

A masker returns ``available [N, M]`` (True = present) = the dataset's own availability
AND the simulated one, so data that is missing in the source stays missing whatever the
masker does. Two protocols come from the papers: node-level (every node loses each
modality independently, FedMPO / FedMGS LP) and client-level (a fraction of the clients
lose one whole modality, FedMGS NC / retrieval), and FedMPO's combination of both.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field

import numpy as np
import torch

from benchmark.errors import ConfigError, closest
from benchmark.federation import GraphDataset, PartitionResult
from data_prep.component_kinds import GraphMasker
from benchmark.registry import MASKERS
from benchmark.seeding import seeded_rng
from data_prep.partition import owner_array


def _modality_index(dataset: GraphDataset, name: str, where: str) -> int:
    """Column of a modality name; an unknown name lists the dataset's modalities."""
    mods = dataset.modalities
    if name not in mods:
        raise ConfigError(
            f"{where}: dataset '{dataset.name}' has no modality '{name}'{closest(name, mods)}; "
            f"it has: {', '.join(mods)}"
        )
    return mods.index(name)


def _natural(dataset: GraphDataset) -> torch.Tensor:
    return dataset.available.clone().bool()


@MASKERS.register("none")
class NoMissing(GraphMasker):
    """No simulated missingness: only what is missing in the data itself."""

    @dataclass
    class Config:
        """The identity masker has no options."""

    def __init__(self, cfg: Config | None = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed
        self.info: dict = {}

    def apply(self, dataset: GraphDataset, partition: PartitionResult) -> torch.Tensor:
        self.info = {"method": "none"}
        return _natural(dataset)


@MASKERS.register("node_level")
class NodeLevelMissing(GraphMasker):
    """Every node loses each modality at the given rate (an exact share within each client).

    Within every client exactly ``round(rate * n_c)`` nodes lose modality m, chosen at random
    and independently per modality, so clients are equally incomplete and the global rate
    is hit without sampling noise. With ``keep_one`` a node that would lose every modality
    gets one of its naturally present modalities back (chosen at random); this lowers the
    effective per-modality rate a little, and does nothing on single-modality datasets.
    """

    @dataclass
    class Config:
        rate: float = field(default=0.0, metadata={"help": "share of nodes missing each modality, in [0, 1]", "probability": True})
        rates: dict[str, float] = field(
            default_factory=dict, metadata={"help": "per-modality rates overriding rate, e.g. {image: 0.5}", "probability": True}
        )
        keep_one: bool = field(
            default=False, metadata={"help": "give a node that would lose all modalities one of them back"}
        )

        def __post_init__(self) -> None:
            self.rates = {str(m): float(r) for m, r in self.rates.items()}

    def __init__(self, cfg: Config | None = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed
        self.info: dict = {}

    def rate_of(self, dataset: GraphDataset) -> list[float]:
        """The rate of every modality of the dataset, in column order."""
        for m in self.cfg.rates:
            _modality_index(dataset, m, "missing.rates")
        return [self.cfg.rates.get(m, self.cfg.rate) for m in dataset.modalities]

    def apply(self, dataset: GraphDataset, partition: PartitionResult) -> torch.Tensor:
        rates = self.rate_of(dataset)
        n, m_count = dataset.num_nodes, len(dataset.modalities)
        rng = seeded_rng(self.seed, "missing/node_level")
        owner = owner_array(partition.clients, n)
        group_sizes = np.bincount(owner + 1, minlength=len(partition.clients) + 1)  # group 0: no client
        group_start = np.concatenate([[0], np.cumsum(group_sizes)[:-1]])
        sim = np.ones((n, m_count), dtype=np.bool_)
        for j, rate in enumerate(rates):
            order = np.lexsort((rng.random(n), owner))  # by client, random inside each client
            rank = np.empty(n, dtype=np.int64)
            rank[order] = np.arange(n) - group_start[owner[order] + 1]
            quota = np.round(rate * group_sizes).astype(np.int64)
            sim[:, j] = rank >= quota[owner + 1]
        avail = _natural(dataset) & torch.from_numpy(sim)
        restored = 0
        if self.cfg.keep_one and m_count > 1:
            natural = _natural(dataset).numpy()
            lost_all = ~avail.numpy().any(1) & natural.any(1)
            idx = np.flatnonzero(lost_all)
            if idx.size:
                # pick uniformly among each node's naturally present modalities
                score = rng.random((idx.size, m_count)) * natural[idx]
                pick = score.argmax(1)
                avail[torch.from_numpy(idx), torch.from_numpy(pick)] = True
                restored = int(idx.size)
        self.info = {
            "method": "node_level",
            "rates": dict(zip(dataset.modalities, rates)),
            "restored": restored,
        }
        return avail


@MASKERS.register("client_level")
class ClientLevelMissing(GraphMasker):
    """round(rate * K) random clients each lose one whole modality (chosen per client).

    Halves round up (rho 0.3 / 0.5 / 0.7 of 5 clients = 2 / 3 / 4 clients): Python's round
    sends halves to the even number, which made 0.3 and 0.5 of 5 clients both 2, the same
    artifact under two column labels.
    """

    @dataclass
    class Config:
        rate: float = field(default=0.0, metadata={"help": "share of clients that lose one modality, in [0, 1]", "probability": True})
        modality: str | None = field(
            default=None, metadata={"help": "the modality those clients lose (default: random per client)"}
        )

    def __init__(self, cfg: Config | None = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed
        self.info: dict = {}

    def apply(self, dataset: GraphDataset, partition: PartitionResult) -> torch.Tensor:
        mods = dataset.modalities
        forced = None if self.cfg.modality is None else _modality_index(dataset, self.cfg.modality, "missing.modality")
        k = len(partition.clients)
        rng = seeded_rng(self.seed, "missing/client_level")
        chosen = np.sort(rng.choice(k, size=min(k, math.floor(self.cfg.rate * k + 0.5 + 1e-9)), replace=False))
        avail = _natural(dataset)
        lost: dict[int, str] = {}
        for cid in chosen.tolist():
            j = forced if forced is not None else int(rng.integers(len(mods)))
            avail[partition.clients[cid].node_ids, j] = False
            lost[cid] = mods[j]
        self.info = {"method": "client_level", "rate": self.cfg.rate, "lost": lost}
        return avail


@MASKERS.register("client_and_node_level")
class ClientAndNodeLevelMissing(GraphMasker):
    """FedMPO's protocol: client-level and node-level missingness together (§5, "both
    client-level and node-level modality missingness are simulated").

    ``client_rate`` of the clients each lose one whole modality (``client_level``), and on top
    every client's nodes lose each modality at ``rate`` (``node_level``); a node is available
    for a modality only where both keep it. The paper gives one missing rate (30% by
    default) and does not split it between the two, so ``client_rate`` defaults to ``rate``.
    The two draws use their own seeded streams, so the node-level part is the same artifact
    as ``node_level`` at that rate, and the client-level part the same as ``client_level``.
    """

    @dataclass
    class Config:
        rate: float = field(default=0.0, metadata={"help": "share of each client's nodes missing each modality, in [0, 1]", "probability": True})
        client_rate: float | None = field(
            default=None, metadata={"help": "share of clients that lose one whole modality (default: rate)", "probability": True})
        modality: str | None = field(
            default=None, metadata={"help": "the modality those clients lose (default: random per client)"})
        keep_one: bool = field(
            default=False, metadata={"help": "node-level part: give a node that would lose all modalities one of them back"})

    def __init__(self, cfg: Config | None = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed
        self.info: dict = {}

    def apply(self, dataset: GraphDataset, partition: PartitionResult) -> torch.Tensor:
        c = self.cfg
        client_rate = c.rate if c.client_rate is None else c.client_rate
        by_client = ClientLevelMissing(ClientLevelMissing.Config(rate=client_rate, modality=c.modality), self.seed)
        by_node = NodeLevelMissing(NodeLevelMissing.Config(rate=c.rate, keep_one=c.keep_one), self.seed)
        avail = by_client.apply(dataset, partition) & by_node.apply(dataset, partition)
        self.info = {"method": "client_and_node_level", "client_level": by_client.info, "node_level": by_node.info}
        return avail
