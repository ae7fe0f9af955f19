"""Shared machinery of the tasks that pair two modalities of the same node (retrieval, matching).

Design: the shared multimodal model computes two *views* of every node, one that sees only
the query modality (the other modalities are set to zero and marked unavailable) and one
that sees only the gallery modality. Both go through the same encoders, fusion, GNN and
head, so these tasks train exactly the parameters that every algorithm already shares and
aggregates, with no task-specific module to federate. A node takes part only where both
of its modalities are really available (a zero-filled missing modality is no pair).

What a score measures. Encoded through the same GNN over the same graph, both views of a
node carry its neighbourhood, so a model can match a node's two views by where the node sits
without any cross-modal content (``missing.content: shuffle`` showed it: on TikTok most
methods kept their scores with every modality shuffled across nodes). Under
``gallery_view: content`` the gallery view is each node's own gallery row with no message
passing, while the query view keeps the graph, where neighbours' query-modality content
carries real signal, plus the node's own query row encoded without the graph (a residual,
so its own content is not drowned by its neighbours'). With shuffled content the gallery row is then independent of
everything the query view sees, so any score above chance is content. ``content`` is the
default; ``graph`` (both views over the graph) is kept for comparison with the records made
before it. Content is weaker than position: on a 600-node synthetic graph at the
generator's default noise FedAvg's content-only retrieval MRR is 0.10-0.13 against 0.106 at
random, so the tests that hold methods to a floor use less feature noise and a SAGE
backbone, whose root weight keeps a node's own query row (``tests/test_multimodal_fl.py``).

Held-out data. The pairs these tasks score are the validation and test nodes' (query,
gallery) modality pairs, so those rows are what training must never see: not in the task's
own loss (the GNN would pass a test node's gallery row to its training neighbours, and the
contrastive loss would align it with the query row passed the same way), and not in an
algorithm's extra forward pass, reconstruction target or fitted statistic either.
``training_view`` hides them (rows zeroed, ``available`` False) for every validation and
test node, query and gallery alike; the loss runs on that view, and an algorithm that reads
a client beyond the task's loss reads ``task.training_view(client)``. Evaluation sees the
whole client. The nodes themselves, their edges and their other modalities stay: the graph
is transductive, only the pairs are held out. ``tests/test_heldout_leak.py`` checks that
changing those rows leaves every upload and weight of every algorithm bit-identical.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.errors import ConfigError
from benchmark.federation import ClientData
from benchmark.tasks.base import Task

GALLERY_VIEWS = ("content", "graph")
QUERY_PREFERENCE = ("image", "visual")
_HOLDS_OUT_PAIRS = "_holds_out_pairs"  # set on a training view, so a second call returns it unchanged
GALLERY_PREFERENCE = ("text", "acoustic")


def _pick(modalities: list[str], wanted: str | None, preference: tuple[str, ...], exclude: str | None,
          role: str) -> str:
    if wanted is not None:
        if wanted not in modalities:
            raise ConfigError(f"task.{role} '{wanted}' is not a modality of this dataset ({', '.join(modalities)})")
        return wanted
    for m in (*preference, *modalities):
        if m in modalities and m != exclude:
            return m
    raise ConfigError(f"task needs two modalities, the dataset has: {', '.join(modalities)}")


class PairedModalityTask(Task):
    """Base of tasks on (query modality, gallery modality) pairs of one node."""

    paired = True

    # 2: the loss runs on training_view (val/test pairs held out); version 1 trained on them.
    # 3: features standardized on training rows (dataset.normalize), both views centred,
    #    the query view keeps the node's own content under gallery_view: content
    protocol_version = 3

    def __init__(self, cfg: object | None = None) -> None:
        super().__init__(cfg if cfg is not None else self.Config())  # type: ignore[attr-defined]

    def out_dim(self, num_classes: int) -> int:
        return self.cfg.embed_dim

    def modalities(self, client: ClientData) -> tuple[int, int]:
        """Column indices of the query and gallery modalities (defaults: image-like query, text-like gallery)."""
        mods = client.modalities
        if len(mods) < 2:
            raise ConfigError(f"task needs two modalities, the dataset has: {', '.join(mods)}")
        q = _pick(mods, self.cfg.query, QUERY_PREFERENCE, None, "query")
        g = _pick(mods, self.cfg.gallery, GALLERY_PREFERENCE, q, "gallery")
        if q == g:
            raise ConfigError(f"task.query and task.gallery must differ, both are '{q}'")
        return mods.index(q), mods.index(g)

    @staticmethod
    def only(client: ClientData, keep: int) -> ClientData:
        """The client as seen through one modality: the others zeroed and marked unavailable."""
        features = {m: (x if j == keep else torch.zeros_like(x)) for j, (m, x) in enumerate(client.features.items())}
        available = torch.zeros_like(client.available)
        available[:, keep] = client.available[:, keep]
        return dataclasses.replace(client, features=features, available=available)

    def views(self, model: nn.Module, client: ClientData) -> tuple[Tensor, Tensor, Tensor]:
        """Centred, L2-normalized query and gallery embeddings [n, d], and the mask of nodes holding both modalities.

        Each view is centred on its mean over the client's nodes before the cosine (over
        every node: centring on the holders of the modality only scored 0.64 instead of
        0.76 matching AUC on the synthetic test federation): otherwise the component common to all nodes dominates every
        score, and both losses sit at a trivial point (every score equal) from which
        the gradient does not lead away. Under ``gallery_view: content`` the query view
        adds the node's own query row encoded without message passing (``own_content``)
        to its graph encoding, so the node's own content is not drowned by its neighbours'
        (about 1/(degree+1) of a GCN's output otherwise).
        """
        qi, gi = self.modalities(client)
        query = self.only(client, qi)
        zq = model(query)
        if self.content_gallery:
            zq = zq + model(self.without_edges(query))
        zg = model(self.gallery_client(client, gi))
        zq, zg = zq - zq.mean(0, keepdim=True), zg - zg.mean(0, keepdim=True)
        zq, zg = F.normalize(zq, dim=-1), F.normalize(zg, dim=-1)
        both = client.available[:, qi] & client.available[:, gi]
        return zq, zg, both

    @staticmethod
    def without_edges(client: ClientData) -> ClientData:
        """The client with no edges: every node encoded from its own rows only."""
        return dataclasses.replace(client, edge_index=client.edge_index[:, :0])

    def gallery_client(self, client: ClientData, gi: int) -> ClientData:
        """What the gallery view encodes: the gallery modality alone and, under
        ``gallery_view: content``, no edges (each node from its own row; see the module docstring)."""
        view = self.only(client, gi)
        return self.without_edges(view) if self.content_gallery else view

    @property
    def content_gallery(self) -> bool:
        """True when the gallery view is content only (no message passing)."""
        return getattr(self.cfg, "gallery_view", "content") == "content"

    def held_out_nodes(self, client: ClientData) -> Tensor:
        """The nodes whose (query, gallery) pair the task scores: validation and test nodes."""
        return client.val_mask | client.test_mask

    def training_view(self, client: ClientData) -> ClientData:
        """The client without the held-out pairs: the query and gallery rows of every
        validation/test node zeroed and marked unavailable (see the module docstring).

        Idempotent: the view of a view is that view itself (the same object), so an
        algorithm may pass its training view to the task's loss. Built without reading a
        device value back (the loss calls it at every step).
        """
        if getattr(client, _HOLDS_OUT_PAIRS, False):
            return client
        held = self.held_out_nodes(client)
        features = dict(client.features)
        available = client.available.clone()
        for j in self.modalities(client):
            m = client.modalities[j]
            features[m] = features[m].masked_fill(held.unsqueeze(1), 0.0)
            available[:, j] &= ~held
        view = dataclasses.replace(client, features=features, available=available)
        setattr(view, _HOLDS_OUT_PAIRS, True)
        return view

    def training_nodes(self, client: ClientData) -> Tensor:
        """Training nodes holding both modalities (the pairs the loss trains on)."""
        qi, gi = self.modalities(client)
        return client.train_mask & client.available[:, qi] & client.available[:, gi]

    @staticmethod
    def zero_loss(z: Tensor) -> Tensor:
        """A zero loss that still has a graph (a client without training pairs)."""
        return z.sum() * 0.0
