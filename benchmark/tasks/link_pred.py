"""Link prediction: score node pairs from node embeddings; AUC and AP on held-out edges.

Edge split. Each client's own undirected edges are split by the task itself, from a seed
made of the task seed and the client id, so every algorithm and every round sees the same
split without a change to the federated artifact: ``test_frac`` and ``val_frac`` of the
edges are held out for evaluation, the rest are training edges. Message passing only ever
uses training edges (never a validation or test edge: they are what is predicted). During
training, ``supervision_frac`` of the training edges are also removed from the message
graph and serve as the positive targets, so that the model learns to predict edges it
cannot see, which is the situation at evaluation time (the "disjoint" split of PyG's
``RandomLinkSplit``); at evaluation the message graph holds all training edges.

Scores (``decoder``). ``cosine`` (the default since protocol 3): the cosine of the two nodes'
outputs, each centred on the mean output over the client's nodes, divided by ``temperature``.
A score is then bounded by 1 / temperature whatever the model's output scale, so every method
starts near the loss of a constant score: a plain dot product on LayerNorm outputs (FedMPO's
refinement) started with logits near +-embed_dim and a round-0 loss ten times that of a
constant score, and the saturated sigmoid left its link prediction unable to learn (issue 54).
Centring removes the component every node shares (the LayerNorm bias, a graph-wide mean), which
carries no information about which pair is an edge. ``dot``: the raw dot product (protocol 2,
kept for comparison). The head projects the GNN embeddings to ``embed_dim``. Losses: ``bce`` (positives vs uniformly sampled negatives), or
``bce_bpr_margin`` (FedMPO: BCE + 0.5 BPR + 0.3 margin ranking with margin 0.1, on sigmoid
probabilities). ``hard_negatives`` keeps, per positive, the highest-scoring of
``hard_pool`` sampled candidates, or (``hard_pool_min`` > 0, FedMPO's "hard negative pool":
scale 4, at least 256) the ``num_negatives`` highest-scoring nodes of one pool of
``max(hard_pool_min, hard_pool x num_negatives)`` nodes drawn per step for all positives.
A hard negative is never the head itself nor one of its known training edges; the shared pool
concentrates every head's negatives on the same few top nodes, and on TikTok it taught every
method to rank held-out edges below random pairs, so the FedMPO suites use per-positive
candidates (issue 26).
Evaluation negatives are fixed per (seed, client, split),
one per positive edge, and are never an edge of the client's graph. The pooled view (the
centralized references) is split as the union of the clients' splits (``_pooled_split``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.errors import ConfigError
from benchmark.federation import ClientData
from benchmark.metrics import average_precision, roc_auc, score_spread
from benchmark.registry import TASKS
from benchmark.seeding import seeded_rng
from benchmark.tasks.base import SPLITS, SPREAD, Task

LOSSES = ("bce", "bce_bpr_margin")
DECODERS = ("cosine", "dot")


def task_rng(seed: int, cid: int, salt: str) -> np.random.Generator:
    """A generator per (task seed, client, purpose): independent streams, stable across runs."""
    return seeded_rng(seed, int(cid) + 1, salt)


@dataclass
class EdgeSplit:
    """One client's link-prediction split (local node indices; positives as [2, P], one direction)."""

    train_message: Tensor     # [2, *] both directions: the message graph during training
    eval_message: Tensor      # [2, *] both directions: all training edges (message graph at evaluation)
    positives: dict[str, Tensor]   # split -> [2, P]; "train" = training supervision edges
    negatives: dict[str, Tensor]   # split -> [2, P] fixed evaluation negatives (empty when not asked for)


def _both(e: Tensor) -> Tensor:
    return torch.cat([e, e.flip(0)], dim=1)


def undirected_edges(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Each undirected edge once as (min, max), sorted, without self-loops."""
    lo, hi = torch.minimum(edge_index[0], edge_index[1]), torch.maximum(edge_index[0], edge_index[1])
    keep = lo != hi
    key = torch.unique(lo[keep].cpu() * num_nodes + hi[keep].cpu())
    return torch.stack([key // num_nodes, key % num_nodes])


def sample_non_edges(num_nodes: int, count: int, forbidden: Tensor, rng: np.random.Generator) -> Tensor:
    """``count`` distinct node pairs (u < v) that are not in ``forbidden`` (keys u * n + v, u < v)."""
    if count <= 0 or num_nodes < 2:
        return torch.empty(2, 0, dtype=torch.long)
    taken = set(forbidden.tolist())
    out: list[int] = []
    for _ in range(20):
        u = rng.integers(0, num_nodes, size=4 * count + 16)
        v = rng.integers(0, num_nodes, size=4 * count + 16)
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        for k in (lo * num_nodes + hi)[lo != hi].tolist():
            if k not in taken:
                taken.add(k)
                out.append(k)
                if len(out) == count:
                    break
        if len(out) == count:
            break
    key = torch.tensor(out, dtype=torch.long)
    return torch.stack([key // num_nodes, key % num_nodes])


@TASKS.register("link_pred")
class LinkPrediction(Task):
    """Link prediction on each client's own edges (dot-product scores; AUC and AP)."""

    primary_metric = "auc"
    # 2: features standardized on each client's training rows (dataset.normalize)
    # 3: pairs scored by a centred cosine over a temperature by default (``decoder``)
    protocol_version = 3
    metrics = ("auc", "ap")
    holds_out_edges = True

    @classmethod
    def protocol_marks(cls, cfg: dict) -> dict[str, object]:
        """Hard negatives skip the head's known training edges (2; issue 26): records made with
        hard negatives before that go stale, every other link-prediction record stays current."""
        return {"hard_negatives": 2} if cfg.get("hard_negatives") else {}

    @dataclass
    class Config:
        loss: str = field(default="bce", metadata={"help": "bce, or bce_bpr_margin (FedMPO: + 0.5 BPR + 0.3 margin)", "choices": LOSSES})
        bpr_weight: float = field(default=0.5, metadata={"help": "weight of the BPR term in bce_bpr_margin", "min": 0})
        margin_weight: float = field(default=0.3, metadata={"help": "weight of the margin term in bce_bpr_margin", "min": 0})
        margin: float = field(default=0.1, metadata={"help": "margin between positive and negative probabilities", "min": 0})
        num_negatives: int = field(default=1, metadata={"help": "training negatives per positive edge", "min": 1, "max": 10_000})
        hard_negatives: bool = field(
            default=False, metadata={"help": "keep the highest-scoring of hard_pool candidates"})
        hard_pool: int = field(default=5, metadata={"help": "candidates drawn per hard negative", "min": 1, "max": 10_000})
        hard_pool_min: int = field(default=0, metadata={
            "help": "0: each positive draws its own hard_pool x num_negatives candidates; > 0: one pool of "
                    "max(hard_pool_min, hard_pool x num_negatives) nodes per step, shared by every positive "
                    "(FedMPO Table 9: scale 4, min pool 256)", "min": 0, "max": 50_000_000})
        val_frac: float = field(
            default=0.1, metadata={"help": "fraction of each client's edges held out for validation", "min": 0, "below": 1})
        test_frac: float = field(default=0.2, metadata={"help": "fraction of each client's edges held out for test", "min": 0, "below": 1})
        supervision_frac: float = field(
            default=0.0, metadata={"help": "fraction of training edges kept out of message passing as targets "
                                           "(0 = all training edges are both messages and targets)", "min": 0, "below": 1})
        decoder: str = field(default="cosine", metadata={
            "help": "pair score: cosine (centred outputs, over temperature: starts calibrated) or dot (raw dot product)",
            "choices": DECODERS})
        temperature: float = field(default=0.5, metadata={
            "help": "cosine decoder: a pair's logit is its cosine / temperature", "positive": True,
            "tune": {"low": 0.05, "high": 1.0, "log": True}})
        embed_dim: int = field(default=64, metadata={"help": "size of the node embeddings that are scored", "min": 1, "max": 65_536})
        seed: int = field(default=0, metadata={"help": "seed of the per-client edge split and evaluation negatives", "min": 0, "max": 2**32 - 1})

        def __post_init__(self) -> None:
            if not self.val_frac + self.test_frac < 1:
                raise ConfigError(
                    f"task.val_frac + task.test_frac must be in [0, 1), got {self.val_frac} + {self.test_frac}")

    def __init__(self, cfg: Config | None = None) -> None:
        super().__init__(cfg if cfg is not None else self.Config())

    def out_dim(self, num_classes: int) -> int:
        return self.cfg.embed_dim

    # ------------------------------------------------------------------ split
    def split(self, client: ClientData, with_negatives: bool = True) -> EdgeSplit:
        """The client's deterministic edge split (a pure function of its edges, id and the task seed).

        Evaluation negatives are only drawn when asked for: training draws its own each step.
        """
        if client.members:
            return self._pooled_split(client, with_negatives)
        c, n = self.cfg, client.num_nodes
        und = undirected_edges(client.edge_index, n)
        e = und.shape[1]
        perm = torch.from_numpy(task_rng(c.seed, client.cid, "edge-split").permutation(e))
        n_test, n_val = int(round(c.test_frac * e)), int(round(c.val_frac * e))
        test, val, train = und[:, perm[:n_test]], und[:, perm[n_test:n_test + n_val]], und[:, perm[n_test + n_val:]]
        return self._edge_split(client, train, val, test, und[0] * n + und[1], with_negatives)

    def _edge_split(self, client: ClientData, train: Tensor, val: Tensor, test: Tensor, forbidden: Tensor,
                    with_negatives: bool) -> EdgeSplit:
        """The split from its (shuffled) training edges and held-out edges: the first
        ``supervision_frac`` of the training edges are the supervision targets, the rest the
        training message graph; evaluation negatives avoid every ``forbidden`` key."""
        c, n = self.cfg, client.num_nodes
        n_sup = int(round(c.supervision_frac * train.shape[1]))
        sup, msg = (train[:, :n_sup], train[:, n_sup:]) if n_sup > 0 else (train, train)
        negatives = {s: sample_non_edges(n, p.shape[1], forbidden, task_rng(c.seed, client.cid, f"neg/{s}"))
                     for s, p in (("train", sup), ("val", val), ("test", test))} if with_negatives else {}
        dev = client.edge_index.device
        return EdgeSplit(train_message=_both(msg).to(dev), eval_message=_both(train).to(dev),
                         positives={"train": sup.to(dev), "val": val.to(dev), "test": test.to(dev)},
                         negatives={s: t.to(dev) for s, t in negatives.items()})

    def _pooled_split(self, pooled: ClientData, with_negatives: bool) -> EdgeSplit:
        """The pooled view's split: the union of its members' (the clients') splits.

        Validation and test edges are the clients' own, in global ids; every other edge of the
        pooled graph (the clients' training edges and the edges between clients, which no
        client holds out) is a training edge, cut into message and supervision edges from the
        pooled view's own stream. So the pooled reference (``centralized``) trains on no edge
        that any client evaluates on."""
        c, n = self.cfg, pooled.num_nodes
        held: dict[str, list[Tensor]] = {"val": [], "test": []}
        for member in pooled.members:
            sp = self.split(member, with_negatives=False)
            ids = member.global_ids.cpu()
            for s in held:
                pairs = ids[sp.positives[s].cpu()]
                held[s].append(torch.stack([pairs.min(0).values, pairs.max(0).values]) if pairs.numel() else pairs)
        val, test = (torch.cat(held[s], dim=1) if held[s] else torch.empty(2, 0, dtype=torch.long) for s in ("val", "test"))
        und = undirected_edges(pooled.edge_index, n)
        keys = und[0] * n + und[1]
        out = torch.cat([val, test], dim=1)
        train = und[:, ~torch.isin(keys, out[0] * n + out[1])]
        perm = torch.from_numpy(task_rng(c.seed, pooled.cid, "edge-split").permutation(train.shape[1]))
        return self._edge_split(pooled, train[:, perm], val, test, keys, with_negatives)

    @staticmethod
    def view(client: ClientData, message: Tensor) -> ClientData:
        """The client with ``message`` as its graph (features and masks unchanged)."""
        return dataclasses.replace(client, edge_index=message)

    def training_view(self, client: ClientData) -> ClientData:
        """The training message graph: no validation or test edge (nor supervision target)."""
        return self.view(client, self.split(client, with_negatives=False).train_message)

    def known_edges(self, client: ClientData) -> Tensor:
        """All training edges; never a validation or test edge."""
        return self.split(client, with_negatives=False).eval_message

    def training_nodes(self, client: ClientData) -> Tensor:
        """Every node: the targets are edges, and no node label is involved."""
        return torch.ones(client.num_nodes, dtype=torch.bool, device=client.train_mask.device)

    def embed(self, z: Tensor) -> Tensor:
        """The model's outputs as the decoder scores them: with ``cosine``, centred on their mean
        over the forward pass's nodes, unit length and divided by sqrt(temperature), so that the
        dot product of two rows is their cosine / temperature; with ``dot``, unchanged."""
        if self.cfg.decoder == "dot":
            return z
        z = z - z.mean(0, keepdim=True)
        return F.normalize(z, dim=-1) / self.cfg.temperature ** 0.5

    @staticmethod
    def score(z: Tensor, pairs: Tensor) -> Tensor:
        """Dot-product score of every pair of decoder embeddings (``embed``; [2, P] -> [P])."""
        return (z[pairs[0]] * z[pairs[1]]).sum(-1)

    def constant_score_loss(self) -> float:
        """The training loss of a model whose every pair gets one score (the best such score, 0):
        what an uninformed but calibrated start costs (BCE: ln 2 for the positives plus ln 2 for
        the negatives; ``bce_bpr_margin`` adds ln 2 x the BPR weight and margin x its weight)."""
        import math

        c = self.cfg
        loss = 2 * math.log(2)
        if c.loss == "bce_bpr_margin":
            loss += c.bpr_weight * math.log(2) + c.margin_weight * c.margin
        return loss

    # ------------------------------------------------------------------ training
    def _negatives(self, z: Tensor, pos: Tensor, n: int, known: Tensor | None = None) -> Tensor:
        """[P, k] scores of corrupted tails for every positive (uniform, or the hardest of a pool).

        Hard negatives are chosen among candidates that are not a known training edge of the
        head (``known``: keys ``u * n + v`` of the training edges, both directions) nor
        the head itself: the highest-scoring candidates of a trained model are mostly its true
        neighbours, and pushing those down taught the model to rank edges below non-edges
        (training AUC under 0.5 on TikTok; issue 26). Held-out edges are unknown to training
        and stay possible candidates, at their share of the graph. Uniform negatives are drawn
        as before (a true edge among them is a ~degree/n event, not a selected one)."""
        c = self.cfg
        k = c.num_negatives
        draws = k * (c.hard_pool if c.hard_negatives else 1)
        if c.hard_negatives and c.hard_pool_min > 0:
            # one shared pool: a [P, pool] score matrix instead of [P, pool, d] gathered rows
            draws = max(c.hard_pool_min, draws)
            tails = torch.randint(0, n, (draws,), device=z.device)
            scores = z[pos[0]] @ z[tails].T
            tails = tails.unsqueeze(0).expand(pos.shape[1], -1)
        else:
            tails = torch.randint(0, n, (pos.shape[1], draws), device=z.device)
            scores = (z[pos[0]].unsqueeze(1) * z[tails]).sum(-1)
        if c.hard_negatives and draws > k:
            excluded = tails == pos[0].unsqueeze(1)
            if known is not None and known.numel():
                excluded |= torch.isin(pos[0].unsqueeze(1) * n + tails, known)
            ranked = scores.detach().masked_fill(excluded, float("-inf"))
            top = ranked.topk(k, dim=1).indices
            # a head whose every candidate is excluded (not seen in practice) keeps its draw
            scores = scores.gather(1, top)
        return scores

    def loss(self, model: nn.Module, client: ClientData) -> Tensor:
        sp = self.split(client, with_negatives=False)
        z = self.embed(model(self.view(client, sp.train_message)))
        pos = sp.positives["train"]
        if pos.shape[1] == 0:
            return z.sum() * 0.0  # no training edge on this client: a zero loss that still has a graph
        s_pos = self.score(z, pos)
        known = None
        if self.cfg.hard_negatives:
            n = client.num_nodes
            known = sp.eval_message[0] * n + sp.eval_message[1]
        s_neg = self._negatives(z, pos, client.num_nodes, known)
        loss = (F.binary_cross_entropy_with_logits(s_pos, torch.ones_like(s_pos))
                + F.binary_cross_entropy_with_logits(s_neg, torch.zeros_like(s_neg)))
        if self.cfg.loss == "bce_bpr_margin":
            bpr = -F.logsigmoid(s_pos.unsqueeze(1) - s_neg).mean()
            gap = torch.sigmoid(s_pos).unsqueeze(1) - torch.sigmoid(s_neg)
            loss = loss + self.cfg.bpr_weight * bpr + self.cfg.margin_weight * F.relu(self.cfg.margin - gap).mean()
        return loss

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        sp = self.split(client)
        was_training = model.training
        model.eval()
        z = self.embed(model(self.view(client, sp.eval_message)))
        model.train(was_training)
        out: dict[str, dict[str, float]] = {}
        for s in SPLITS:
            pos, neg = sp.positives[s], sp.negatives[s]
            scores = torch.cat([self.score(z, pos), self.score(z, neg)]).cpu()
            labels = torch.cat([torch.ones(pos.shape[1], dtype=torch.long),
                                torch.zeros(neg.shape[1], dtype=torch.long)])
            out[s] = {"auc": roc_auc(scores, labels), "ap": average_precision(scores, labels),
                      SPREAD: score_spread(scores), "n": float(pos.shape[1])}
        return out
