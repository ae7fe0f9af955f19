"""FedMPO: missing-modality robust federated multimodal graph learning (Zhang et al., 2026)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from benchmark.algorithm import AlgoContext, ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.config import ModelConfig
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS
from methods.fedmpo.aggregation import reliability_weights, size_weights
from methods.fedmpo.config import FedMPOConfig
from methods.fedmpo.model import AuxTerms, FedMPONet


@ALGORITHMS.register("fedmpo")
class FedMPO(ModelAlgorithm):
    """FedMPO: topology-aware generation, missing-aware MoE fusion, reliability-aware aggregation.

    Follows Sec. 3 and App. B of the paper; defaults from Tables 6, 7 and 9. Local objective
    (Eq. 13): L_task + lambda_rec L_rec + lambda_align L_align + lambda_route L_route. The
    server averages every model parameter (generator, fusion, GNN, head) with weights
    omega_k proportional to |V_k| exp(-eta_u u_k - eta_e e_k - eta_rho rho_k) (Eq. 14), from
    three scalar statistics each client uploads. Evaluation uses the global model.

    Ablations (Fig. 3): ``use_agmg=false`` drops the generator (hidden modalities stay the
    zero vector, no L_rec, no ``model.generator.*`` parameters); ``use_moe=false`` replaces
    the uncertainty head, router, experts and fallback with the mean of the modality vectors
    (no L_route, u = 0); ``use_align=false`` drops L_align and W_al; ``use_relagg=false``
    aggregates by size only and uploads no reliability statistics.

    Choices where the paper is silent or ambiguous:

    * Masking rate of observed modalities for reconstruction: ``mask_rate`` 0.2, redrawn at
      every local step, never hiding a node's last visible modality. Validation/test never
      mask (r_tilde = r).
    * a_ij = 1/sqrt(deg_i deg_j) (the "degree-aware normalization" of Eq. 2); a modality no
      neighbour shows has a zero anchor (Table 7: no missing tokens).
    * GNN_theta is the run's ``model.backbone`` (GCN by default), shared across modality
      channels; ``missing_skip`` (0.35) is a residual between its input (imputed features)
      and its output for every row. Pool in h_{i,\\m} is the mean over the other modalities;
      h_str (structure representation of Eq. 36) is the mean of the graph-encoded channels.
    * The context bank holds the node's own visible non-target modalities plus all visible
      modalities of ``bank_neighbors`` (8) sampled neighbours; evaluation samples from a
      fixed stream so scores are reproducible.
    * gamma_t: Eq. 5 writes min(1, t/T_w); Table 7 gives "interpolation bounds [0.55, 0.78]".
      We map the ramp into those bounds: gamma_t = 0.55 + 0.23 min(1, t/30).
    * NormErr (Eq. 28) = ||z_hat - z||^2 / (2(||z_hat||^2 + ||z||^2)) in [0, 1]; the uploaded
      reconstruction error e_k is its mean over masked slots (scale-free, so eta_e = 1 means
      the same on every dataset); u_k is the mean uncertainty over generated slots. Both come
      from the forward pass of the last local epoch, which only sees training edges (link
      prediction's message graph) and no labels; rho_k is the share of naturally missing
      (node, modality) slots. Test labels and test edges never enter any of them.
    * Uncertainty clamp 0.12 (Table 7) caps u in the fusion penalty exp(-u) only; router,
      fallback and calibration use the unclamped u. lambda_bal (Eq. 33) is not given: 1.0.
    * alpha_fb = sigmoid(softplus(w1) rho_i + softplus(w2) u_i + b): non-negative slopes so
      it "increases with missing ratio or uncertainty" as the text says; b starts at 2
      (alpha_fb ~ 0.88) because App. C.6.2 describes early rounds leaning on the structural
      fallback. Experts are Linear + ReLU; phi_m is linear, psi_m Linear + ReLU.
    * ``model.dropout`` (the shared backbone's input dropout) acts on phi_m's output and
      between GNN layers; the reconstruction target is the embedding without dropout.
    * Link prediction's paper loss (BCE + 0.5 BPR + 0.3 margin 0.1, hard negatives) is a task
      option (``task.loss: bce_bpr_margin``, ``task.hard_negatives: true``), shared with the
      baselines as Table 9 says task-level settings are. For retrieval, whose task trains
      single-modality views, L_rec / L_align / L_route come from one extra forward pass on
      the client's full view (a single-modality view has nothing to mask and reconstruct).
    * Held-out data: that extra pass, like every forward pass of training, runs on the
      task's training view (``task.training_view``). On retrieval the query and gallery
      modalities of the validation/test nodes are hidden there (unavailable, zero rows), so
      they are never reconstruction targets, alignment partners, generator evidence or
      context-bank tokens, and the generator never learns a held-out node's query -> gallery
      map: the paper's L_rec / L_align "over the client's nodes" read as over the nodes whose
      modalities the task does not hold out (as link prediction's message graph already held
      out its val/test edges). Checked by ``tests/test_heldout_leak.py``.
    * Table 6's 10 "warmup rounds ... for stable early optimization" are not described
      further; we read them as a linear learning-rate warmup (``warmup_rounds``: round t trains
      at lr x min(1, (t + 1) / 10)), separate from the attention warmup T_w = 30. Table 9's auxiliary classification weight for retrieval (0.2, "when
      used") is not used: retrieval here trains without labels.
    """

    Config = FedMPOConfig
    tasks = ("node_cls", "link_pred", "retrieval")
    upload_keys = (r"model\..+", "num_examples", r"rel\.(uncertainty|rec_error|missing_ratio)")

    def __init__(self, cfg: FedMPOConfig, ctx: AlgoContext) -> None:
        super().__init__(cfg, ctx)
        self.lambda_rec, self.lambda_align, self.lambda_route = cfg.lambdas(ctx.run.task.name)
        self.last_weights: dict[int, float] = {}

    def build_model(self, model_cfg: ModelConfig | None = None) -> nn.Module:
        ctx = self.ctx
        model = FedMPONet(ctx.feature_dims, ctx.task.out_dim(ctx.num_classes), model_cfg or ctx.run.model, self.cfg)
        return model.to(ctx.device)

    def client_model(self, state: dict) -> tuple[nn.Module, torch.optim.Optimizer]:
        """As ModelAlgorithm's, with the multi-tensor Adam: FedMPO has many small parameters."""
        if "model" not in state:
            train = self.ctx.run.train
            state["model"] = model = self.build_model()
            state["opt"] = torch.optim.Adam(model.parameters(), lr=train.lr, weight_decay=train.weight_decay,
                                            foreach=True)
        return state["model"], state["opt"]

    def init_server(self) -> Payload:
        self.global_model = self.build_model()
        return model_payload(self.global_model)

    # ------------------------------------------------------------------ client
    def _objective(self, model: FedMPONet, client: ClientData, stats: dict[str, float]) -> Tensor:
        """lambda-weighted auxiliary terms of the forward pass(es) the task loss just ran."""
        records = model.pop_aux()
        if self.ctx.task.paired or not records:
            records = [model.forward_full(self.ctx.task.training_view(client))[1]]
        k = float(len(records))
        rec = sum(r.rec for r in records) / k
        align = sum(r.align for r in records) / k
        route = sum(r.route for r in records) / k
        stats["uncertainty"] = _ratio(records, "unc_sum", "unc_count")
        stats["rec_error"] = _ratio(records, "err_sum", "err_count")
        return self.lambda_rec * rec + self.lambda_align * align + self.lambda_route * route

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(state)
        for group in opt.param_groups:  # the optimizer warmup (Table 6); the client's Adam moments persist
            group["lr"] = self.ctx.run.train.lr * self.cfg.lr_scale(rnd)
        load_model_payload(model, received)
        model.set_round(rnd)
        model.pop_aux()
        stats: dict[str, float] = {}
        self.local_train(model, opt, client, lambda m: self._objective(m, client, stats))
        size = client.num_nodes if self.cfg.size_weight == "num_nodes" else client.num_train
        up = {**model_payload(model), "num_examples": torch.tensor([float(size)])}
        if self.cfg.use_relagg:
            up["rel.uncertainty"] = torch.tensor([stats["uncertainty"]])
            up["rel.rec_error"] = torch.tensor([stats["rec_error"]])
            up["rel.missing_ratio"] = torch.tensor([1.0 - float(client.available.float().mean())])
        return up

    # ------------------------------------------------------------------ server
    def weights(self, uploads: dict[int, Payload]) -> Tensor:
        """omega_k over the uploading clients (in ``uploads`` order), from sizes and statistics only."""
        ups = list(uploads.values())
        sizes = torch.cat([u["num_examples"].double().flatten() for u in ups])
        if not self.cfg.use_relagg:
            return size_weights(sizes)
        stat = {k: torch.cat([u[f"rel.{k}"].double().flatten() for u in ups])
                for k in ("uncertainty", "rec_error", "missing_ratio")}
        return reliability_weights(sizes, stat["uncertainty"], stat["rec_error"], stat["missing_ratio"],
                                   self.cfg.eta_u, self.cfg.eta_e, self.cfg.eta_rho)

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        w = self.weights(uploads)
        self.last_weights = {cid: float(x) for cid, x in zip(uploads, w)}
        ups = list(uploads.values())
        keys = [k for k in ups[0] if k.startswith("model.")]
        avg = weighted_average(ups, w.tolist(), keys)
        load_model_payload(self.global_model, avg)
        self.global_model.set_round(rnd)
        return avg

    def evaluate(self, client: ClientData, state: dict, received: Payload,
                 rnd: int = 0) -> dict[str, dict[str, float]]:
        """The global model of round ``rnd`` (its gamma_t), rebuilt on the client from the broadcast."""
        model = self.received_model(received)
        model.set_round(rnd)
        return self.ctx.task.evaluate(model, client)


def _ratio(records: list[AuxTerms], num: str, den: str) -> float:
    total = sum(getattr(r, den) for r in records)
    return sum(getattr(r, num) for r in records) / total if total > 0 else 0.0
