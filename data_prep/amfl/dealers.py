"""Who gets which samples: the two ways ``amfl_population`` deals a client its quota per class.

* ``PoolDealer`` (sources without a graph, the paper's simulations): each class's samples
  in one seeded shuffled pool, dealt in order, so no sample reaches two clients.
* ``GraphDealer`` (sources with a graph, ``data_prep/amfl/graphs.py``; ours, the paper has
  no graph): a client's nodes are grown as connected pieces. From a seeded start node a
  breadth-first search takes free nodes of the client's classes while their quota lasts and
  walks on only through nodes it took, so every piece is connected in the client's induced
  subgraph; when a search runs dry with quota left, a new piece starts at a random free node
  of an open class. Each class's nodes are then shuffled (seeded), so the split into
  train / val / test does not follow the search order. No node reaches two clients.

Both count what was asked of each class, so a population larger than the data is one
error (``shortage``), never a silent reuse.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque

import numpy as np
import scipy.sparse as sp
from torch import Tensor

from benchmark.seeding import seeded_rng


class Dealer(ABC):
    """Bookkeeping shared by the dealers: samples asked and held per class."""

    def __init__(self, y: np.ndarray, num_classes: int) -> None:
        self.y = y
        self.have = np.bincount(y, minlength=num_classes)
        self.need = np.zeros(num_classes, dtype=np.int64)
        self.pieces = 0   # connected pieces started (graph dealer; 0 for pools)

    @abstractmethod
    def deal(self, quotas: list[tuple[int, int]], rng: np.random.Generator) -> list[np.ndarray]:
        """Sample ids for each (class, count) of one client, in the quotas' order (fewer when
        the class ran out: ``shortage`` then reports it)."""

    def shortage(self) -> tuple[int, int, int] | None:
        """(class, samples asked, samples held) of the class short by most, if any is short."""
        short = np.flatnonzero(self.need > self.have)
        if not short.size:
            return None
        k = int(short[np.argmax(self.need[short] - self.have[short])])
        return k, int(self.need[k]), int(self.have[k])


class PoolDealer(Dealer):
    """Per-class seeded pools, dealt in order (see the module docstring)."""

    def __init__(self, y: np.ndarray, num_classes: int, seed: int) -> None:
        super().__init__(y, num_classes)
        self.pools = [seeded_rng(seed, f"amfl/pool/{k}").permutation(np.flatnonzero(y == k))
                      for k in range(num_classes)]
        self.taken = np.zeros(num_classes, dtype=np.int64)

    def deal(self, quotas: list[tuple[int, int]], rng: np.random.Generator) -> list[np.ndarray]:
        out = []
        for k, s in quotas:
            self.need[k] += s
            out.append(self.pools[k][self.taken[k]: self.taken[k] + s])
            self.taken[k] += s
        return out


class GraphDealer(Dealer):
    """Connected pieces of the source graph (see the module docstring)."""

    def __init__(self, y: np.ndarray, num_classes: int, edge_index: Tensor) -> None:
        super().__init__(y, num_classes)
        n = y.size
        ei = edge_index.numpy()
        adj = sp.csr_matrix((np.ones(ei.shape[1], dtype=np.int8), (ei[0], ei[1])), shape=(n, n))
        self.indptr, self.indices = adj.indptr, adj.indices
        self.free = np.ones(n, dtype=np.bool_)

    def deal(self, quotas: list[tuple[int, int]], rng: np.random.Generator) -> list[np.ndarray]:
        left = np.zeros(self.have.size, dtype=np.int64)
        got: dict[int, list[int]] = {k: [] for k, _ in quotas}
        for k, s in quotas:
            self.need[k] += s
            left[k] = s
        while True:
            cand = np.flatnonzero(self.free & (left[self.y] > 0))
            if not cand.size:
                break
            self.pieces += 1
            queue = deque([int(cand[rng.integers(cand.size)])])
            while queue:
                v = queue.popleft()
                k = int(self.y[v])
                if not self.free[v] or left[k] <= 0:
                    continue
                self.free[v] = False
                left[k] -= 1
                got[k].append(v)
                nbrs = self.indices[self.indptr[v]:self.indptr[v + 1]]
                queue.extend(int(u) for u in nbrs[self.free[nbrs] & (left[self.y[nbrs]] > 0)])
        return [rng.permutation(np.asarray(got[k], dtype=np.int64)) for k, _ in quotas]
