"""IID partition: nodes dealt to clients uniformly at random (the no-heterogeneity control)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmark.federation import GraphDataset, PartitionResult
from benchmark.registry import PARTITIONERS
from data_prep.component_kinds import GraphPartitioner
from benchmark.seeding import seeded_rng
from data_prep.partition import check_num_clients, result_from_owner


@PARTITIONERS.register("iid")
class IIDPartitioner(GraphPartitioner):
    """Uniform random split of the nodes into equal-sized clients (sizes differ by at most one)."""

    @dataclass
    class Config:
        """The IID split has no options: only the run seed and the number of clients matter."""

    def __init__(self, cfg: Config | None = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed

    def split(self, dataset: GraphDataset, num_clients: int) -> PartitionResult:
        n = dataset.num_nodes
        check_num_clients("iid", n, num_clients)
        rng = seeded_rng(self.seed, "partition/iid")
        owner = np.empty(n, dtype=np.int64)
        owner[rng.permutation(n)] = np.arange(n) % num_clients
        return result_from_owner(dataset, owner, num_clients, {"method": "iid"})
