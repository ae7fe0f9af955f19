"""Graph partitioners: split one graph's nodes among simulated clients.

Every partitioner turns a node -> client assignment into a :class:`PartitionResult` with
the helpers below, so that client id lists, cut-edge counts and input checks mean the
same thing for all of them.
"""

from __future__ import annotations

import numpy as np
import torch

from benchmark.errors import ConfigError
from benchmark.federation import ClientIndex, GraphDataset, PartitionResult


def check_num_clients(name: str, num_nodes: int, num_clients: int) -> None:
    """A partition needs at least one client and at least one node per client."""
    if num_clients < 1:
        raise ConfigError(f"partition '{name}': num_clients must be >= 1, got {num_clients}")
    if num_clients > num_nodes:
        raise ConfigError(
            f"partition '{name}': num_clients ({num_clients}) exceeds the number of nodes ({num_nodes})"
        )


def owner_array(clients: list[ClientIndex], num_nodes: int) -> np.ndarray:
    """Client id of every node (-1 for nodes that no client holds)."""
    owner = np.full(num_nodes, -1, dtype=np.int64)
    for cid, c in enumerate(clients):
        owner[c.node_ids.numpy()] = cid
    return owner


def cut_edges(edge_index: torch.Tensor, owner: np.ndarray) -> int:
    """Undirected edges whose two ends are not held by the same client (or not held at all)."""
    ei = edge_index.numpy()
    src, dst = ei[0], ei[1]
    upper = src < dst
    a, b = owner[src[upper]], owner[dst[upper]]
    return int(np.count_nonzero((a != b) | (a < 0)))


def result_from_owner(dataset: GraphDataset, owner: np.ndarray, num_clients: int, info: dict) -> PartitionResult:
    """Build a :class:`PartitionResult` from a node -> client array; every client must be non-empty."""
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner[owner >= 0], minlength=num_clients)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ConfigError(
            f"partition left {empty.size} of {num_clients} clients without nodes; use fewer clients"
        )
    start = int(np.count_nonzero(owner < 0))
    clients = []
    for n_c in counts:
        ids = np.sort(order[start : start + n_c])
        clients.append(ClientIndex(node_ids=torch.from_numpy(ids.astype(np.int64))))
        start += n_c
    dropped_nodes = int(np.count_nonzero(owner < 0))
    return PartitionResult(
        clients=clients,
        dropped_edges=cut_edges(dataset.edge_index, owner),
        dropped_nodes=dropped_nodes,
        info=info,
    )
