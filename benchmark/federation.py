"""What the simulation holds: a multimodal graph, a partition of it, and each client's view.

``GraphDataset`` is what a dataset loader returns. ``ClientIndex`` is what a partitioner
returns for one client. ``ClientData`` is everything one client may touch: the engine gives
an algorithm exactly one ``ClientData`` at a time and nothing else of the raw data.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import torch
from torch import Tensor

from benchmark.errors import BenchmarkError


@dataclass
class GraphDataset:
    """A multimodal graph: per-modality node features, undirected edges, labels, splits.

    ``available`` is the *natural* availability (True = present) that came with the data;
    simulated missingness is stacked on top of it by a masker. ``edge_index`` holds both
    directions of every undirected edge, without self-loops.
    """

    #: which federation builder takes it (``registry.FEDERATION_BUILDERS``)
    kind: ClassVar[str] = "graph"

    name: str
    features: dict[str, Tensor]          # modality -> [N, d_m] float
    edge_index: Tensor                   # [2, E] long
    y: Tensor | None = None              # [N] long, or None for unlabeled graphs
    num_classes: int = 0
    available: Tensor | None = None      # [N, M] bool, natural availability
    train_mask: Tensor | None = None     # [N] bool (global split; partitioners keep it)
    val_mask: Tensor | None = None
    test_mask: Tensor | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.available is None:
            self.available = torch.ones(self.num_nodes, len(self.features), dtype=torch.bool)

    @property
    def modalities(self) -> list[str]:
        return list(self.features)

    @property
    def num_nodes(self) -> int:
        return int(next(iter(self.features.values())).shape[0])

    @property
    def num_edges(self) -> int:
        """Number of undirected edges."""
        return int(self.edge_index.shape[1] // 2)

    @property
    def feature_dims(self) -> dict[str, int]:
        return {m: int(x.shape[1]) for m, x in self.features.items()}

    def fingerprint(self) -> str:
        """Content hash of the dataset (features, edges, labels, availability, splits)."""
        h = hashlib.sha256(self.name.encode())
        for m in sorted(self.features):
            h.update(m.encode())
            h.update(_tensor_bytes(self.features[m]))
        for t in (self.edge_index, self.y, self.available, self.train_mask, self.val_mask, self.test_mask):
            if t is not None:
                h.update(_tensor_bytes(t))
        return h.hexdigest()[:16]


def _tensor_bytes(t: Tensor) -> bytes:
    t = t.detach().cpu().contiguous()
    return str(tuple(t.shape)).encode() + t.numpy().tobytes()


@dataclass
class ClientIndex:
    """One client's share of a partition: the global ids of its nodes (sorted)."""

    node_ids: Tensor                     # [n_c] long, global node ids


@dataclass
class PartitionResult:
    """A partitioner's output: clients plus what the split dropped."""

    clients: list[ClientIndex]
    dropped_edges: int                   # undirected edges whose ends are on different clients
    dropped_nodes: int = 0               # nodes assigned to no client
    info: dict = field(default_factory=dict)


@dataclass
class ClientData:
    """Everything one client holds. Algorithms see nothing else of the raw data.

    ``features`` are already masked: an unavailable modality of a node holds the fill value
    (zeros by default), never the true value. ``available`` says which are real.
    ``boundary_edges`` lists edges from this client's nodes to nodes of other clients as
    (local index, global id of the remote node): the global edge list that FedGCN and
    FedLAP are allowed to know, with no remote features.
    """

    cid: int
    global_ids: Tensor                   # [n] long
    features: dict[str, Tensor]          # modality -> [n, d_m]
    available: Tensor                    # [n, M] bool
    edge_index: Tensor                   # [2, e] local, both directions
    y: Tensor | None
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    num_classes: int
    boundary_edges: Tensor = field(default_factory=lambda: torch.empty(2, 0, dtype=torch.long))
    # The pooled view's clients (empty on a client). A task whose held-out data is drawn per
    # client (link prediction's edge split) splits the pooled view as the union of theirs, so a
    # pooled reference never trains on a client's validation or test edge.
    members: list["ClientData"] = field(default_factory=list)

    @property
    def device(self) -> torch.device:
        """Where the client's tensors live (the engine moves them to the run's device)."""
        return self.global_ids.device

    @property
    def num_nodes(self) -> int:
        return int(self.global_ids.numel())

    @property
    def modalities(self) -> list[str]:
        return list(self.features)

    @property
    def num_train(self) -> int:
        return int(self.train_mask.sum())

    def to(self, device: torch.device | str) -> Self:
        """A copy of the same class with every tensor field, and every tensor in a dict field,
        on ``device``; other fields are shared. The one move for every client type (graph, KG,
        AMFL): a subclass's new tensor fields travel without code of its own."""
        moved: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                moved[f.name] = value.to(device)
            elif isinstance(value, dict):
                moved[f.name] = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in value.items()}
        return dataclasses.replace(self, **moved)


@dataclass
class FederatedData:
    """The clients of one federated artifact, plus metadata every algorithm may know."""

    clients: list[ClientData]
    modalities: list[str]
    feature_dims: dict[str, int]
    num_classes: int
    artifact_hash: str
    num_global_nodes: int
    pooled: ClientData | None = None     # the whole graph with the same masks (Centralized only)
    stats: dict = field(default_factory=dict)

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    def availability(self) -> dict[str, float]:
        """Share of all clients' nodes (entities) that hold each modality: the availability
        a model actually meets, whatever rate the masker was given (a KG client holds an
        entity's modality only if it was dealt one of its items *and* the Bernoulli draw kept it)."""
        return availability_from_counts(self.modalities, [held_counts(c, self.modalities) for c in self.clients],
                                        [c.num_nodes for c in self.clients])

    def meta(self) -> "FederationMeta":
        """What a server may know of this federation (no client data)."""
        return FederationMeta(modalities=list(self.modalities), feature_dims=dict(self.feature_dims),
                              num_classes=self.num_classes, num_global_nodes=self.num_global_nodes,
                              client_ids=[c.cid for c in self.clients], artifact_hash=self.artifact_hash,
                              artifact_recipe=str(self.stats.get("artifact_recipe", "")),
                              availability=self.availability(), coverage=dict(self.stats.get("coverage", {})))


def held_counts(client: ClientData, modalities: list[str]) -> list[int]:
    """Per federation modality, how many of the client's nodes hold it. Counted by name: a
    client's ``available`` has one column per modality of its own ``features`` (every
    modality on a graph client, only its own subset on an AMFL client)."""
    per_column = [int(v) for v in client.available.sum(0).cpu().tolist()]
    held = dict(zip(client.features, per_column))
    return [held.get(m, 0) for m in modalities]


def availability_from_counts(modalities: list[str], held: list[list[int]], sizes: list[int]) -> dict[str, float]:
    """The federation's availability from each client's held counts and node count, so a
    server that only hears counts from its clients states the same numbers."""
    total = sum(sizes)
    if total == 0:
        return {m: 0.0 for m in modalities}
    return {m: round(sum(float(h[j]) for h in held) / total, 4) for j, m in enumerate(modalities)}


@dataclass
class FederationMeta:
    """The metadata of a federation that the server side and the record need.

    Built from a :class:`FederatedData` in process, or from what the clients report about
    themselves when they run elsewhere (a Flower deployment), so the server never holds
    client data.
    """

    modalities: list[str]
    feature_dims: dict[str, int]
    num_classes: int
    num_global_nodes: int
    client_ids: list[int]
    artifact_hash: str
    artifact_recipe: str
    availability: dict[str, float]
    #: per modality, the share of the clients' nodes the data gives it at all (a KG builder
    #: states it; empty where every node can hold every modality or no one reported it)
    coverage: dict[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------- the builder hook

#: builds a run's federation from its config; ``data_prep.build`` registers the one it has.
#: The core calls it through ``build_federation`` and never imports the data layer itself.
FederationBuilder = Callable[[Any], FederatedData]
_BUILDER: list[FederationBuilder] = []


def register_builder(fn: FederationBuilder) -> FederationBuilder:
    """Decorator: make ``fn(run_config) -> FederatedData`` the federation builder."""
    _BUILDER[:] = [fn]
    return fn


def build_federation(cfg: Any) -> FederatedData:
    """Build (or load from cache) the federation a run config describes, with the builder
    the plugins registered (``data_prep.build.build_federation``)."""
    from benchmark import registry as R

    R.load_plugins()
    if not _BUILDER:
        raise BenchmarkError("no federation builder is registered: the data_prep package did not load")
    return _BUILDER[0](cfg)
