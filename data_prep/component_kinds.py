"""The small contract each data component implements, one per kind of component and data.

Why: a partitioner or masker is found by name in a registry, so what it must do is written
down here, as in Flower Datasets' one-method ``Partitioner``: a graph partitioner ``split``s a
graph, a graph masker ``apply``s missingness, a KG partitioner ``split``s triples by relation.
Each declares the ``kind`` of data it takes (the ``kind`` of ``GraphDataset``, ``KGDataset``
or ``AMFLSource``); a builder refuses a component of another kind with one line (its
``only_for``), never by calling a method it lacks. Components that only carry options the
KG or AMFL builder reads (``kg_items``, ``amfl_population``) declare their kind the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from torch import Tensor

from benchmark.federation import GraphDataset, PartitionResult
from data_prep.kg.dataset import KGDataset


class GraphPartitioner(ABC):
    """Splits one graph's nodes among ``num_clients`` clients."""

    kind: ClassVar[str] = "graph"

    @abstractmethod
    def split(self, dataset: GraphDataset, num_clients: int) -> PartitionResult:
        """The clients' node lists (every client non-empty) and what the split cut."""


class GraphMasker(ABC):
    """Simulates missing modalities on a partitioned graph."""

    kind: ClassVar[str] = "graph"
    info: dict[str, Any]

    @abstractmethod
    def apply(self, dataset: GraphDataset, partition: PartitionResult) -> Tensor:
        """``[N, M]`` bool availability (True = present), before the data's own gaps are applied."""


class KGPartitioner(ABC):
    """Splits a knowledge graph's triples among ``num_clients`` clients."""

    kind: ClassVar[str] = "kg"

    @abstractmethod
    def split(self, dataset: KGDataset, num_clients: int) -> Any:
        """Each client's relations and train/valid/test triples: a ``KGPartition``, defined
        beside its one implementation (``data_prep/partition/relation_id.py``), which imports this."""


def component_kind(cls: type) -> str:
    """The kind of data a registered component takes; a plug-in without the declaration is
    taken to be a graph component, as every such component was before kinds existed."""
    kind = getattr(cls, "kind", "graph")
    return kind if isinstance(kind, str) else "graph"


__all__ = ["GraphMasker", "GraphPartitioner", "KGPartitioner", "component_kind"]
