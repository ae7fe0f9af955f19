"""FedGCN: a one-time server-side neighbour-feature aggregation, then FedAvg."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from baselines.basic.fedavg import FedAvg, FedAvgConfig
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS
from benchmark.seeding import digest_seed


@dataclass
class FedGCNConfig(FedAvgConfig):
    hops: int = field(default=2, metadata={"help": "1: receive aggregates of own nodes; 2: also of remote neighbours", "choices": (1, 2)})
    mask_scale: float = field(default=10.0, metadata={"help": "std of the secure-aggregation masks", "min": 0})


def _pair_seed(seed: int, i: int, j: int) -> int:
    return digest_seed(f"{seed}:{min(i, j)}:{max(i, j)}")


@ALGORITHMS.register("fedgcn")
class FedGCN(FedAvg):
    """FedGCN (Yao et al., 2023): one pre-training exchange of neighbour-feature sums, then FedAvg.

    Setup: every client uploads, per modality, the sum of its own available feature rows
    over (A + I) restricted to its edges (own-own and own-remote), indexed by global node
    id, plus the count of contributions. The sums are protected by zero-sum masks
    (secure aggregation, the paper's privacy option): each upload alone is noise, the
    server's total is exact. The server returns to each client the aggregated rows of its
    own nodes and, with hops=2, of its remote neighbours, which join the client's graph as
    unlabeled nodes. Training is FedAvg on mean-aggregated inputs. Uploads are dense over
    all N nodes (the price of masking without another round); the ledger counts them.

    Availability after the exchange: on node classification a modality counts as present
    wherever some neighbour (or the node) held it, which is how FedGCN fills gaps. On the
    paired tasks (retrieval, matching) the pairs that are trained and scored stay the
    node's *own* observed pairs, as for every other method: counting neighbour-filled
    modalities as pairs would score FedGCN on a different, larger set of pairs, built from
    other nodes' features.

    Caveat on retrieval: both views of a node are averages over the same neighbourhood. Our
    reading (not yet isolated by an experiment) is that once training leaves its collapsed
    start, pairs are matched by graph position rather than by content. On TikTok (small
    scale) one seed of three left it (R@5 0.90; the other two stayed at chance, 0.08), on
    the synthetic graph all three did (0.91-0.93, against 0.67-0.69 for the next methods).
    That was the paired protocol up to version 2. Under ``task.gallery_view: content`` (the
    default since version 3) the gallery view is the node's own gallery row: here the
    client's own row replaces the neighbourhood mean of the gallery modality for its own
    nodes, so only the query view carries FedGCN's aggregated neighbourhood.

    Held-out pairs (retrieval, matching): the sums a client uploads are of the task's
    training view, where the validation/test nodes' query and gallery rows are hidden, so
    no held-out row reaches the server, another client or training. For evaluation each
    client adds its own held-out rows to the aggregates it received, locally (the eval
    view); held-out rows of other clients' nodes never travel, so a boundary neighbour on
    another client contributes only its training-view rows there.

    Link prediction: the sums run over the client's TRAINING edges only (the task's
    ``eval_message``), its boundary edges (cross-client edges are never targets: each client
    predicts its own edges) and self-loops, so no held-out edge enters the exchange. The
    client receives only its own nodes' aggregates, whatever ``hops`` says (1-hop: they
    already hold the remote neighbours' features via the boundary edges), and adds no
    remote node or edge: the task re-splits ``client.edge_index``, so the graph must stay the
    client's own for FedGCN to be scored on the same held-out edges as every other method.
    """

    Config = FedGCNConfig
    tasks = ("node_cls", "link_pred", "retrieval", "matching")
    has_setup = True
    upload_keys = (r"model\..+", "num_examples", r"setup\.(sum|count)\..+", "setup.request")

    def _sums(self, client: ClientData, features: dict[str, Tensor], available: Tensor
              ) -> dict[str, tuple[Tensor, Tensor]]:
        """Per modality, the [N, d] sums of ``features`` rows (where ``available``) over the
        client's (A + I) into global ids, and the [N] counts of contributions."""
        n = self.ctx.num_global_nodes
        dev = client.global_ids.device
        own = self.ctx.task.known_edges(client)  # link prediction: training edges only
        src_local = torch.cat([own[0], client.boundary_edges[0], torch.arange(client.num_nodes, device=dev)])
        dst_global = torch.cat([client.global_ids[own[1]], client.boundary_edges[1], client.global_ids])
        out = {}
        for j, m in enumerate(client.modalities):
            avail = available[:, j]
            x = features[m] * avail.unsqueeze(1).to(features[m].dtype)
            sums = torch.zeros(n, x.shape[1], dtype=torch.float64, device=dev)
            sums.index_add_(0, dst_global, x[src_local].double())
            counts = torch.zeros(n, dtype=torch.float64, device=dev)
            counts.index_add_(0, dst_global, avail[src_local].double())
            out[m] = (sums, counts)
        return out

    def setup_upload(self, client: ClientData, state: dict) -> Payload:
        seen = self.ctx.task.training_view(client)  # paired tasks: no val/test node's pair rows
        up: Payload = {"setup.request": self._rows_for(client)}
        for j, (m, (sums, counts)) in enumerate(self._sums(client, seen.features, seen.available).items()):
            up[f"setup.sum.{m}"] = sums + self._mask(client.cid, sums.shape, j).to(sums.device)
            up[f"setup.count.{m}"] = counts
        return up

    def _mask(self, cid: int, shape: torch.Size, modality_index: int) -> Tensor:
        """This client's secure-aggregation mask r_i - r_next(i) over a ring of the clients.

        The masks telescope to zero in the server's sum, and each client draws two noise
        tensors instead of one per peer (pairwise masks), which keeps the setup cheap.
        """
        ids = sorted(self.ctx.client_ids)
        if len(ids) < 2:
            return torch.zeros(shape, dtype=torch.float64)
        nxt = ids[(ids.index(cid) + 1) % len(ids)]

        def noise(owner: int) -> Tensor:
            g = torch.Generator().manual_seed(_pair_seed(self.ctx.seed * 1009 + modality_index, owner, owner))
            return torch.randn(shape, generator=g, dtype=torch.float64) * self.cfg.mask_scale

        return noise(cid) - noise(nxt)

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        keys = [k for k in next(iter(uploads.values())) if k != "setup.request"]
        total = {k: sum(u[k] for u in uploads.values()) for k in keys}
        replies = {}
        for cid, u in uploads.items():
            rows = u["setup.request"]
            replies[cid] = {"setup.rows": rows, **{k: v[rows] for k, v in total.items()}}
        return replies

    def setup_receive(self, client: ClientData, state: dict, payload: Payload) -> None:
        seen = self.ctx.task.training_view(client)
        state["view"] = self._augmented_view(client, payload, seen.available)
        if not torch.equal(seen.available, client.available):  # evaluation adds the held-out rows, locally
            held = {m: client.features[m] * (client.available[:, j] & ~seen.available[:, j]).unsqueeze(1)
                    for j, m in enumerate(client.modalities)}
            extra = self._sums(client, held, client.available & ~seen.available)
            rows = payload["setup.rows"]
            full = dict(payload)
            for m, (sums, counts) in extra.items():
                full[f"setup.sum.{m}"] = payload[f"setup.sum.{m}"] + sums[rows]
                full[f"setup.count.{m}"] = payload[f"setup.count.{m}"] + counts[rows]
            state["eval_view"] = self._augmented_view(client, full, client.available)

    def _rows_for(self, client: ClientData) -> Tensor:
        """Global ids whose aggregates this client needs: its own, plus remote neighbours for 2 hops.

        Own only on link prediction (see the class docstring).
        """
        rows = client.global_ids
        if self.cfg.hops == 2 and client.boundary_edges.numel() and not self.ctx.task.holds_out_edges:
            rows = torch.cat([rows, torch.unique(client.boundary_edges[1])])
        return rows

    def _augmented_view(self, client: ClientData, payload: Payload, own_available: Tensor) -> ClientData:
        rows = payload["setup.rows"]
        n_own, n_all = client.num_nodes, rows.numel()
        features, avail = {}, []
        for m in client.modalities:
            cnt = payload[f"setup.count.{m}"]
            features[m] = (payload[f"setup.sum.{m}"] / cnt.clamp_min(1).unsqueeze(1)).float()
            avail.append(cnt > 0)
        available = torch.stack(avail, 1)
        task = self.ctx.task
        if task.paired:
            available[:n_own] = own_available  # score the node's own pairs only (see the class docstring)
            if task.content_gallery:  # the gallery view is the node's own row, not its neighbourhood's mean
                gi = task.modalities(client)[1]
                g = client.modalities[gi]
                own = client.features[g] * own_available[:, gi:gi + 1].to(client.features[g].dtype)
                features[g] = torch.cat([own.to(features[g].dtype), features[g][n_own:]])
        edge_index = client.edge_index
        if n_all > n_own:
            pos = {int(g): n_own + i for i, g in enumerate(rows[n_own:].tolist())}
            remote_local = torch.tensor([pos[int(g)] for g in client.boundary_edges[1].tolist()],
                                        dtype=torch.long, device=edge_index.device)
            extra = torch.stack([client.boundary_edges[0], remote_local])
            edge_index = torch.cat([edge_index, extra, extra.flip(0)], dim=1)

        def pad(mask: Tensor) -> Tensor:
            return torch.cat([mask, torch.zeros(n_all - n_own, dtype=torch.bool, device=mask.device)])

        y = None if client.y is None else torch.cat([client.y, torch.zeros(n_all - n_own, dtype=client.y.dtype,
                                                                             device=client.y.device)])
        return ClientData(cid=client.cid, global_ids=rows, features=features, available=available,
                          edge_index=edge_index, y=y, train_mask=pad(client.train_mask),
                          val_mask=pad(client.val_mask), test_mask=pad(client.test_mask),
                          num_classes=client.num_classes)

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        return super().client_update(state["view"], state, received, rnd)

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return super().evaluate(state.get("eval_view", state["view"]), state, received)
