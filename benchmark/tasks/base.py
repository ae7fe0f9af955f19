"""The Task contract: what a model is trained to do and how it is scored on one client."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from torch import Tensor, nn

from benchmark.federation import ClientData
from benchmark.metrics import client_weighted_scores
from benchmark.state_codec import state_class

SPLITS = ("train", "val", "test")
#: the metric every built-in task reports beside its own: the standard deviation of what its
#: metrics rank (0 = every score equal, a collapsed model; ``benchmark/guard.py``)
SPREAD = "spread"


@state_class  # a task's settings travel in an algorithm's context (subclasses inherit the mark)
class Task(ABC):
    """Loss and evaluation for one task; stateless apart from its config."""

    primary_metric: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]
    # True when the client's own edges are what is predicted (an algorithm must not add edges
    # to the client's graph, and must read only ``known_edges`` outside the task's forward passes)
    holds_out_edges: ClassVar[bool] = False
    #: True when the task classifies graph nodes from their labels (``client.y``): what an
    #: algorithm with a label-only part (a classifier head, label prototypes, a majority
    #: class) asks, instead of testing the task's class
    classifies_nodes: ClassVar[bool] = False
    #: True when the task scores (query modality, gallery modality) pairs of one node
    #: (retrieval, matching): what an algorithm whose model has two views asks
    paired: ClassVar[bool] = False
    #: True when the task scores by where each query's true item ranks in a gallery (MRR,
    #: Recall@k): a reference that scores at random gives the expected rank instead
    ranks_gallery: ClassVar[bool] = False
    #: bumped when what the task trains or scores changes, so a record made before the change
    #: carries another protocol hash and is never averaged with one made after it
    protocol_version: ClassVar[int] = 1
    #: the shared options a tuner searches for every method on this task (their ranges are
    #: declared beside them, as ``tune`` metadata in benchmark/config.py); a method adds its own
    tuned_options: ClassVar[tuple[str, ...]] = ("train.lr", "train.weight_decay", "train.local_epochs",
                                                 "model.hidden", "model.dropout")

    @classmethod
    def protocol_marks(cls, cfg: dict) -> dict[str, object]:
        """What a change to how some of this task's configs train adds to their protocol hash
        (``cfg``: the run's ``task`` section). Empty by default, and for every config a change
        did not touch, so only the records it affects go stale; ``protocol_version`` is for a
        change to all of them."""
        return {}

    def __init__(self, cfg: object | None = None) -> None:
        self.cfg = cfg

    @abstractmethod
    def out_dim(self, num_classes: int) -> int:
        """Size of the model head for this task."""

    @abstractmethod
    def loss(self, model: nn.Module, client: ClientData) -> Tensor:
        """Training loss on the client's training split."""

    @abstractmethod
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        """{split: {metric: value, 'n': split size}} for val and test (and train)."""

    def aggregate(self, per_client: dict[int, dict[str, dict[str, float]]], split: str) -> dict[str, float]:
        """One split's scores over every client: by default each metric's mean weighted by the
        clients' split sizes; a task whose metric does not average (pooled macro-F1) overrides it."""
        return client_weighted_scores(per_client, split)

    # What an algorithm may see of a client beyond the task's own loss. Algorithms that make
    # extra forward passes, exchange graph statistics or summarize nodes ask the task, so a
    # task that holds part of the client out (link prediction's val/test edges) hides it
    # from every algorithm in one place.

    def training_view(self, client: ClientData) -> ClientData:
        """The client as a training-time forward pass may see it."""
        return client

    def known_edges(self, client: ClientData) -> Tensor:
        """The client's own edges (local ids, both directions) an algorithm may read in a setup
        exchange or a statistic it uploads."""
        return client.edge_index

    def training_nodes(self, client: ClientData) -> Tensor:
        """Boolean mask of the nodes the task trains on (whose summaries an algorithm may use)."""
        return client.train_mask
