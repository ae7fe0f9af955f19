"""Louvain community partition (the FedSage+ / OpenFGL recipe used by FedMGS)."""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

from benchmark.errors import ConfigError
from benchmark.federation import GraphDataset, PartitionResult
from benchmark.registry import PARTITIONERS
from data_prep.component_kinds import GraphPartitioner
from benchmark.seeding import seeded_rng
from data_prep.partition import check_num_clients, result_from_owner


@PARTITIONERS.register("louvain")
class LouvainPartitioner(GraphPartitioner):
    """Louvain communities dealt to clients largest first; few cut edges, label-skewed clients.

    Communities larger than ``N/K - delta`` are cut into chunks of that size (in BFS order
    inside the community, so that chunks stay connected; the reference code cuts in
    arbitrary order). Chunks are then dealt largest first, round robin over the clients,
    skipping clients that already hold ``N/K`` nodes or would exceed ``N/K + delta``; when
    no client fits, the smallest one takes the chunk. The seed drives Louvain and the order
    in which clients are visited.
    """

    @dataclass
    class Config:
        resolution: float = field(
            default=1.0, metadata={"help": "Louvain resolution (> 0; larger = smaller communities)", "positive": True}
        )
        delta: int = field(default=20, metadata={"help": "allowed client-size slack around N / num_clients", "min": 0, "max": 50_000_000})

    def __init__(self, cfg: Config | None = None, seed: int = 0) -> None:
        self.cfg = cfg if cfg is not None else self.Config()
        self.seed = seed

    def split(self, dataset: GraphDataset, num_clients: int) -> PartitionResult:
        n = dataset.num_nodes
        delta = self.cfg.delta
        check_num_clients("louvain", n, num_clients)
        chunk = int(n / num_clients - delta)
        if chunk < 1:
            raise ConfigError(
                f"partition 'louvain': num_nodes / num_clients = {n / num_clients:.1f} must exceed delta ({delta}); "
                "use fewer clients or a smaller partition.delta"
            )
        communities = louvain_communities(dataset, self.cfg.resolution, self.seed)
        adj = adjacency(dataset)
        groups: list[np.ndarray] = []
        for comm in communities:
            if comm.size > chunk:
                ordered = bfs_order(adj, comm)
                groups.extend(ordered[i : i + chunk] for i in range(0, ordered.size, chunk))
            else:
                groups.append(comm)
        groups.sort(key=lambda g: (-g.size, int(g.min())))

        rng = seeded_rng(self.seed, "partition/louvain")
        visit = rng.permutation(num_clients)
        sizes = np.zeros(num_clients, dtype=np.int64)
        owner = np.empty(n, dtype=np.int64)
        full, limit = n / num_clients, n / num_clients + delta
        ptr = 0
        for g in groups:
            chosen = -1
            for step in range(num_clients):
                cid = int(visit[(ptr + step) % num_clients])
                if sizes[cid] < full and sizes[cid] + g.size <= limit:
                    chosen, ptr = cid, (ptr + step + 1) % num_clients
                    break
            if chosen < 0:
                chosen = int(np.argmin(sizes))
            owner[g] = chosen
            sizes[chosen] += g.size
        info = {
            "method": "louvain",
            "resolution": self.cfg.resolution,
            "delta": delta,
            "communities": len(communities),
            "chunks": len(groups),
        }
        return result_from_owner(dataset, owner, num_clients, info)


def adjacency(dataset: GraphDataset) -> sp.csr_matrix:
    """Symmetric 0/1 adjacency in CSR form."""
    ei = dataset.edge_index.numpy()
    n = dataset.num_nodes
    return sp.csr_matrix((np.ones(ei.shape[1], dtype=np.int8), (ei[0], ei[1])), shape=(n, n))


def louvain_communities(dataset: GraphDataset, resolution: float, seed: int) -> list[np.ndarray]:
    """Louvain communities (networkx), each a sorted id array, largest first."""
    ei = dataset.edge_index.numpy()
    upper = ei[0] < ei[1]
    g = nx.Graph()
    g.add_nodes_from(range(dataset.num_nodes))
    g.add_edges_from(zip(ei[0, upper].tolist(), ei[1, upper].tolist()))
    comms = nx.community.louvain_communities(g, resolution=resolution, seed=seed)
    out = [np.array(sorted(c), dtype=np.int64) for c in comms]
    out.sort(key=lambda c: (-c.size, int(c[0])))
    return out


def louvain_labels(dataset: GraphDataset, resolution: float, seed: int) -> np.ndarray:
    """Community index of every node, as pseudo-labels for unlabeled graphs."""
    labels = np.empty(dataset.num_nodes, dtype=np.int64)
    for i, c in enumerate(louvain_communities(dataset, resolution, seed)):
        labels[c] = i
    return labels


def bfs_order(adj: sp.csr_matrix, nodes: np.ndarray) -> np.ndarray:
    """The given nodes in breadth-first order inside their induced subgraph.

    Each connected piece starts from its highest-degree node, so consecutive chunks of the
    order are connected pieces of the community.
    """
    sub = adj[nodes][:, nodes]
    deg = np.asarray(sub.sum(1)).ravel()
    seen = np.zeros(nodes.size, dtype=np.bool_)
    order: list[np.ndarray] = []
    for start in np.argsort(-deg, kind="stable"):
        if seen[start]:
            continue
        part = breadth_first_order(sub, int(start), directed=False, return_predecessors=False)
        part = part[~seen[part]]
        seen[part] = True
        order.append(part)
    return nodes[np.concatenate(order)]
