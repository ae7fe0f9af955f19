"""FedMGS (Wu et al., CIKM 2026): client/server protocol of Alg. 1 and the local objective of Eq. 10."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.algorithm import AlgoContext, ModelAlgorithm, load_model_payload, model_payload, \
    weighted_average
from benchmark.comm import Payload
from benchmark.config import ModelConfig
from benchmark.errors import ConfigError
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS
from benchmark.seeding import chain_seed
from benchmark.training import LocalLoop, LoopLog
from methods.fedmgs.model import FedMGSNet, Forward, Switches
from methods.fedmgs.prototypes import Bank, assign_to_bank, client_estimates, init_bank_from_local_clusters, \
    refresh_bank, spherical_kmeans

TASK_READOUT = {"node_cls": "class", "link_pred": "link", "retrieval": "modality", "matching": "modality"}


@dataclass
class FedMGSConfig:
    lambda_rec: float = field(default=0.5, metadata={
        "help": "weight of L_rec, reconstruction of z^m on complete nodes (Eq. 10; the paper gives no number)", "min": 0,
        "tune": {"low": 0.0, "high": 1.0}})
    lambda_proto: float = field(default=1.0, metadata={
        "help": "weight of L_proto, alignment of s_i with class prototypes (Eq. 10; node classification only)", "min": 0,
        "tune": {"low": 0.0, "high": 2.0}})
    use_avail_enc: bool = field(default=True, metadata={
        "help": "availability-aware encoding (Sec. 4.2); false = Table 4 'w/o Avail_Graph Encoding'"})
    use_proto_synth: bool = field(default=True, metadata={
        "help": "prototype query pi in the synthesizer (Sec. 4.3); false = Table 4 'w/o Proto_Latent Synthesis'"})
    use_rel_fusion: bool = field(default=True, metadata={
        "help": "reliability-calibrated fusion (Sec. 4.4); false = Table 4 'w/o Reliab_Semantic Fusion'"})
    proto_tau: float | None = field(default=None, metadata={
        "help": "temperature tau_p of L_proto; null = sqrt(d) as the paper (d = model.hidden)", "positive": True})
    query_tau: float = field(default=0.1, metadata={
        "help": "temperature of the soft anchor estimate q_i of unlabeled nodes (our choice; the paper gives none)", "positive": True})
    num_anchors: int = field(default=8, metadata={
        "help": "semantic anchors (federated k-means clusters) for tasks without classes", "min": 2, "max": 100_000})
    kmeans_iters: int = field(default=10, metadata={"help": "Lloyd iterations of the anchor k-means", "min": 0, "max": 10_000})
    beta_init: float = field(default=1.0, metadata={
        "help": "initial value of the learnable spread scale beta_m (Eq. 7)", "positive": True})
    eps: float = field(default=1e-6, metadata={"help": "epsilon of Eqs. 2 and 3", "positive": True})
    readout_graph: bool = field(default=True, metadata={
        "help": "g_cls / g_link propagate r_i over the local graph (one conv) before their linear map (our reading "
                "of Secs. 4.4 and 6.2); false = per-node heads"})
    rec_stop_grad: bool = field(default=True, metadata={
        "help": "L_rec does not backpropagate into its target z (our choice: otherwise the encoders shrink z)"})
    weighting: str = field(default="task_size", metadata={
        "help": "parameter averaging weights: task_size (|T_k|, Eq. 1) or uniform", "choices": ("task_size", "uniform")})


class _ModalityReadout(nn.Module):
    """Serves precomputed e_i^m to the retrieval / matching tasks, one modality per view.

    Those tasks ask the model for a query-only and a gallery-only view of the client
    (``PairedModalityTask.only``); FedMGS's readout is e_i^m = phi_m(f_i^m) (Eq. 9) from one
    pass over the whole client, so this adapter returns the column of the modality the
    view kept. Reusing the tasks' own loss and evaluation keeps the protocol (pairs,
    negatives, centering, metrics) identical to every other algorithm's. For nodes holding
    both modalities f_i^m = z_i^m, so a query embedding never sees the node's gallery item.
    """

    def __init__(self, e: Tensor, client: ClientData) -> None:
        super().__init__()
        self.e, self.features = e, client.features

    def forward(self, view: ClientData) -> Tensor:
        kept = [j for j, m in enumerate(self.features) if view.features[m] is self.features[m]]
        if len(kept) != 1:  # not a view made by ``only``: fall back on availability
            kept = [j for j in range(view.available.shape[1]) if bool(view.available[:, j].any())]
        if len(kept) != 1:  # the kept modality is absent on this client: no pair uses it
            return self.e[:, 0] * 0.0
        return self.e[:, kept[0]]


@ALGORITHMS.register("fedmgs")
class FedMGS(ModelAlgorithm):
    """FedMGS: availability-gated graph encoding, prototype-guided latent synthesis, reliability-calibrated fusion.

    Alg. 1: the server broadcasts theta, the prototype banks P_bar^m and spreads Delta_m;
    each client trains E epochs on L_task + lambda_rec L_rec + lambda_proto L_proto (Eq. 10)
    and uploads theta, observed-only prototype estimates p_{k,c}^m with counts n_{k,c}^m
    (Eq. 3) and |T_k|; the server averages theta weighted by |T_k| (Eq. 1), refreshes the
    banks (Eq. 3) and recomputes Delta_m (Eq. 6). The global model is evaluated.

    Choices where the paper is open (all in one place):

    * e_m = Linear + LayerNorm: Eq. 7 mixes z_hat (trained towards z) with h^g, a LayerNorm
      output, so z is put at the same scale (with ReLU encoders the mix is off-scale and
      reliability fusion hurt link prediction in our runs). A GNN layer is a conv
      (``model.backbone``) with ReLU on hidden layers, then LayerNorm (Eq. 2); psi_syn and
      psi_conf are 2-layer MLPs of width d; phi_fuse is Linear + ReLU; phi_m is linear.
      ``model.fusion`` and ``model.mask_missing`` do not apply (FedMGS has its own).
    * Heads: the paper leaves g_cls and g_link open; it cites GNN link-prediction readouts and
      says the synthesized latents stay discriminative "after graph propagation", so by
      default (``readout_graph``) both pass r over one conv (ReLU) before a linear map (class
      logits; for links an embedding whose dot products the task scores). With
      ``readout_graph=false`` they are per-node linear maps of r_i, and a node whose
      modalities are all observed then never uses the graph (f = z, Eq. 8): on the small
      synthetic node-classification cell that cost about 8 points of accuracy.
    * L_rec does not backpropagate into its target z (``rec_stop_grad``): otherwise the
      encoders shrink z to make reconstruction easy (its norm fell ~10x in 12 rounds and
      link prediction learned less). The loss weights are not given in the text (Fig. 3 only):
      lambda_rec 0.5 and lambda_proto 1.0 are our defaults.
    * u_i^m = [z^m' || h^g || pi^m || 0]: the zero block is d wide (the target modality's
      own slot, always empty); with more than two modalities z^m' is the mean of the
      other observed ones.
    * q_i: one-hot label for labeled training nodes (node classification); every other node
      uses the model's class estimate softmax(cos(s_i, p_bar_c) / query_tau), the prototype
      classifier that L_proto trains. It comes before synthesis, so it needs no second pass;
      tau_p = sqrt(d) would make it nearly uniform, hence the separate temperature.
    * Tasks without classes (link prediction, retrieval, matching) use ``num_anchors``
      semantic anchors found by federated spherical k-means on s_i (see ``prototypes.py``);
      L_proto is off there, as the paper says it needs class supervision.
    * Prototypes and L_rec use training nodes only (all nodes for link prediction, whose
      split is over edges), so no validation/test label or test image-text pair is ever
      read. L_proto and the softmax of q cover valid anchors only (count > 0); p_bar_c is
      the mean over the modalities that have a valid entry; Delta_m uses the population
      variance. An anchor no sampled client observed keeps its previous bank entry.
    * Ablations (Table 4): ``use_avail_enc=false``: z^m = e_m(x^m) for every modality (fill
      values included) and s_i is their plain mean, so absent modalities enter message
      passing; ``use_proto_synth=false``: pi^m = 0 (no prototype guidance; the synthesizer
      still sees z^m' and h^g, and prototypes still feed L_proto and Delta_m);
      ``use_rel_fusion=false``: f^m = z_hat^m for a missing modality (no eta, no graph mix).
    * Retrieval and matching score e^v, e^t (Eq. 9) with the tasks' own losses (InfoNCE,
      pairwise BCE) and evaluation, on nodes that hold both modalities. As Eq. 9 is written,
      e_i^m = phi_m(z_i^m) for such a node: these embeddings use no graph (unlike the GNN
      views the tasks give shared-model baselines), and they never see the other modality.
      So FedMGS retrieves by content alone. (Records made before features were standardized
      (``dataset.normalize``) found every TikTok score at chance; that was the shared
      model collapsing on raw non-negative rows, not the data: with standardized rows, 5
      Louvain clients, 10 rounds of 4 epochs, dropout 0.2, seed 0, FedMGS reaches TikTok R@5 0.060
      against a chance of about 0.019, and matching AUC 0.646.)
      Training (local objective, prototypes) reads the task's training view, where the
      validation/test nodes' query and gallery rows are hidden (``training_client``).
    """

    Config = FedMGSConfig
    tasks = tuple(TASK_READOUT)
    upload_keys = (r"model\..+", "num_examples", r"proto\..+", r"proto_count\..+")

    def __init__(self, cfg: FedMGSConfig, ctx: AlgoContext) -> None:
        super().__init__(cfg, ctx)
        self.task_name = getattr(type(ctx.task), "registry_name", "") or ctx.run.task.name
        if self.task_name not in TASK_READOUT:
            raise ConfigError(f"fedmgs is defined for {', '.join(TASK_READOUT)}, not '{self.task_name}'")
        self.readout = TASK_READOUT[self.task_name]
        self.labeled = self.task_name == "node_cls"
        self.num_anchors = ctx.num_classes if self.labeled else cfg.num_anchors
        hidden = ctx.run.model.hidden
        self.proto_tau = cfg.proto_tau if cfg.proto_tau is not None else math.sqrt(hidden)
        self.switches = Switches(cfg.use_avail_enc, cfg.use_proto_synth, cfg.use_rel_fusion)

    # ------------------------------------------------------------------ model
    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        ctx, cfg = self.ctx, self.cfg
        net = FedMGSNet(ctx.feature_dims, model_cfg or ctx.run.model, self.readout,
                        ctx.task.out_dim(ctx.num_classes), self.switches, self.labeled, cfg.eps, cfg.query_tau,
                        cfg.beta_init, readout_graph=cfg.readout_graph)
        return net.to(ctx.device)

    def _own_nodes(self, client: ClientData) -> Tensor:
        """Nodes whose data may feed prototypes and L_rec (see the class docstring)."""
        if self.task_name == "link_pred":
            return torch.ones_like(client.train_mask)
        return client.train_mask

    def training_client(self, client: ClientData) -> ClientData:
        """What training reads of the client on retrieval and matching: the task's training
        view, where the validation/test nodes' query and gallery rows are hidden (so they feed
        no forward pass, L_rec, synthesis or prototype). Node classification and link
        prediction use the client (link prediction's own loss builds its training graph)."""
        return self.ctx.task.training_view(client) if self.readout == "modality" else client

    def task_size(self, client: ClientData, state: dict) -> float:
        """|T_k^xi| of Eq. 1: training nodes, training edges, or training nodes holding both paired modalities."""
        if "task_size" not in state:
            task = self.ctx.task
            if self.task_name == "link_pred":
                size = task.split(client, with_negatives=False).positives["train"].shape[1]
            elif self.readout == "modality":
                qi, gi = task.modalities(client)
                size = int((client.train_mask & client.available[:, qi] & client.available[:, gi]).sum())
            else:
                size = client.num_train
            state["task_size"] = float(size)
        return state["task_size"]

    # ------------------------------------------------------------------ losses (Eq. 10)
    def task_loss(self, model: FedMGSNet, client: ClientData) -> tuple[Tensor, Forward]:
        task = self.ctx.task
        if self.readout == "link":  # the task builds its training message graph; the pass is cached
            loss = task.loss(model, client)
            fw, model.last = model.last, None
            return loss, fw
        fw = model.run(client)
        if self.readout == "class":
            return F.cross_entropy(fw.out[client.train_mask], client.y[client.train_mask]), fw
        return task.loss(_ModalityReadout(fw.out, client), client), fw

    def rec_loss(self, fw: Forward, client: ClientData) -> Tensor:
        """L_rec = 1/(|B||M|) sum_{i in B} sum_m ||z_hat_i^m - z_i^m||^2 over complete nodes B."""
        complete = self._own_nodes(client) & client.available.all(1)
        if not bool(complete.any()):
            return fw.z_hat.sum() * 0.0
        target = fw.z[complete].detach() if self.cfg.rec_stop_grad else fw.z[complete]
        return (fw.z_hat[complete] - target).pow(2).sum(-1).mean()

    def proto_loss(self, fw: Forward, client: ClientData, bank: Bank | None) -> Tensor:
        """L_proto: cross-entropy of sim(s_i, p_bar_c) / tau_p over valid classes, labeled training nodes."""
        zero = fw.s.sum() * 0.0
        if not self.labeled or bank is None or bank.is_empty:
            return zero
        fused, ok = bank.fused()
        nodes = client.train_mask & ok[client.y]
        if int(ok.sum()) < 2 or not bool(nodes.any()):
            return zero
        logits = F.normalize(fw.s[nodes], dim=-1) @ F.normalize(fused, dim=-1).T / self.proto_tau
        return F.cross_entropy(logits.masked_fill(~ok.unsqueeze(0), float("-inf")), client.y[nodes])

    def objective(self, model: FedMGSNet, client: ClientData) -> Tensor:
        loss, fw = self.task_loss(model, client)
        cfg = self.cfg
        if cfg.lambda_rec > 0:
            loss = loss + cfg.lambda_rec * self.rec_loss(fw, client)
        if cfg.lambda_proto > 0:
            loss = loss + cfg.lambda_proto * self.proto_loss(fw, client, model.bank)
        return loss

    def train_local(self, model: FedMGSNet, opt: torch.optim.Optimizer, client: ClientData) -> LoopLog:
        """Full-batch local epochs of ``objective`` through the core loop."""
        model.train()
        return LocalLoop.from_train(self.ctx.run.train).run(lambda: self.objective(model, client), opt,
                                                            model.parameters(), cid=client.cid)

    # ------------------------------------------------------------------ prototypes (Eq. 3, client side)
    def _generator(self, *salt: int) -> torch.Generator:
        return torch.Generator().manual_seed(chain_seed(self.ctx.seed, *salt))

    @torch.no_grad()
    def client_prototypes(self, model: FedMGSNet, client: ClientData, rnd: int) -> Payload:
        """Observed-only p_{k,c}^m and n_{k,c}^m after local training (eval mode)."""
        was = model.training
        model.eval()
        _, enc, _, s = model.initial(client)
        model.train(was)
        nodes = self._own_nodes(client)
        bank = model.bank
        if self.labeled:
            anchor = client.y
        elif bank is None or bank.is_empty:  # first round: local clusters, aligned by the server
            anchor = torch.zeros(client.num_nodes, dtype=torch.long, device=s.device)
            if bool(nodes.any()):
                _, labels = spherical_kmeans(s[nodes], self.num_anchors, self._generator(client.cid, rnd),
                                             iters=self.cfg.kmeans_iters)
                anchor[nodes] = labels
        else:
            anchor = assign_to_bank(s, bank)
        protos, counts = client_estimates(enc, client.available, anchor, nodes, self.num_anchors)
        out: Payload = {}
        for j, m in enumerate(self.ctx.modalities):
            out[f"proto.{m}"] = protos[j]
            out[f"proto_count.{m}"] = counts[j]
        return out

    # ------------------------------------------------------------------ protocol
    def _bank(self, payload: Payload) -> Bank:
        return Bank.from_payload(payload, self.ctx.modalities)

    def init_server(self) -> Payload:
        self.global_model = self.build_model()
        self.bank = Bank.empty(len(self.ctx.modalities), self.num_anchors, self.ctx.run.model.hidden, self.ctx.device)
        return {**model_payload(self.global_model), **self.bank.to_payload(self.ctx.modalities)}

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        load_model_payload(model, received)
        model.bank = self._bank(received)
        seen = self.training_client(client)
        self.train_local(model, opt, seen)
        protos = self.client_prototypes(model, seen, rnd)
        size = torch.tensor([self.task_size(client, state)], device=self.ctx.device)
        return {**model_payload(model), "num_examples": size, **protos}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        cids = sorted(uploads)
        ups = [uploads[c] for c in cids]
        weights = [float(u["num_examples"]) if self.cfg.weighting == "task_size" else 1.0 for u in ups]
        avg = weighted_average(ups, weights, [k for k in ups[0] if k.startswith("model.")])
        load_model_payload(self.global_model, avg)
        mods = self.ctx.modalities
        protos = torch.stack([torch.stack([u[f"proto.{m}"] for m in mods]) for u in ups])          # [K, M, A, d]
        counts = torch.stack([torch.stack([u[f"proto_count.{m}"] for m in mods]) for u in ups])    # [K, M, A]
        if not self.labeled and self.bank.is_empty:
            self.bank = init_bank_from_local_clusters(protos, counts, self.num_anchors, self.cfg.eps,
                                                      self._generator(-1, rnd), self.cfg.kmeans_iters)
        else:
            self.bank = refresh_bank(self.bank, protos, counts, self.cfg.eps)
        return {**avg, **self.bank.to_payload(mods)}

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model = self.received_model(received)
        model.bank = self._bank(received)
        if self.readout != "modality":
            scores = self.ctx.task.evaluate(model, client)
            model.last = None
            return scores
        was = model.training
        model.eval()
        with torch.no_grad():
            e = model.run(client).out
        model.train(was)
        return self.ctx.task.evaluate(_ModalityReadout(e, client), client)
