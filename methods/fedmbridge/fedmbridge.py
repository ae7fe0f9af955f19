"""FedMBridge (Algorithm 1): the server's TAHN generates every client's weights from its
architecture graph and task embedding; clients return their multi-step update Delta
theta_i; the server updates c_i, phi1 and phi2 by the chain rule, with SGD.

Rounds in the harness's hooks:

* setup (Algorithm 1, initialization): each client uploads its graph A_i (node features,
  edges, which node owns each parameter tensor and its shape) and receives its first
  theta_i = h(A_i, c_i; phi) (ledger phase "setup").
* ``client_update``: start from the downloaded theta_i, ``train.local_epochs`` epochs of
  mini-batch Adam (Table 5), upload ``delta`` = theta~_i - theta_i only.
* ``aggregate``: ``chain_rule_step`` on the round's deltas, then theta_i for every client
  from the updated TAHN: client i is only ever sent its own theta_i, never another's.
* ``evaluate``: the personal model is the generated theta_i (Eq. 4; ``personal:
  generated``), or the client's weights after its last local training (``personal: local``).

Combined with feature sharing (Table 3, rows 7-8, ``kd_beta`` > 0): the vanilla federated
distillation of FedDistill* (Appendix B.1.2) runs on the server before the TAHN update. The
public set is gathered as FedDistill* gathers it (5% of the training rows of 5% of each
modality group's clients, declared in ``comm.disclosures``); setup then also carries each
client's architecture spec, so that the server can build its model. Each uploaded client is a
student: the server rebuilds theta~_i = theta_i + Delta theta_i, draws up to ``kd_teachers``
of the round's other theta~_j as teachers, and adds one distillation step of size beta to the
update, Delta theta_i <- Delta theta_i - beta grad KD(theta~_i), which the chain rule then
digests. Paper silent on where the KD step enters; this is the reading in which the TAHN is
still the only thing that reaches a client.

Server memory is the TAHN plus one graph and one index layout per client.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from benchmark.amfl.graph import ArchGraph, build_graph, graph_categories, vocab_sizes
from benchmark.amfl.model import flat_params, load_flat
from benchmark.comm import Payload, disclosed
from benchmark.registry import ALGORITHMS
from benchmark.seeding import text_seed
from baselines.amfl.common import (LOCAL_OPTIMIZERS, AMFLAlgorithm, collect_public, distill_grads, public_requests,
                                   public_upload)
from baselines.amfl.supernet import SPEC_KEY, model_from_payload, spec_payload
from methods.fedmbridge.tahn import TAHN, ClientLayout, chain_rule_step


SERVER_OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


@dataclass
class FedMBridgeConfig:
    """TAHN hyperparameters (Table 5 where it gives them).

    Two defaults depart from Table 5 (Adam on the clients, SGD on the server), measured on
    av_digits (12 clients, seed 0, 40 rounds): with local Adam, Delta theta is mostly
    Adam's per-weight sign pattern, which the generator's tangent space barely contains
    (cosine ~0.03 between Delta theta_i and the change of theta_i the server step makes),
    and the generated models stayed at chance (0.25) whatever the server optimizer; with
    local SGD (Delta theta follows the local gradient, as in pFedHN) and Adam on the
    chain-rule gradient they learn (test ACC 0.57 at 15 local epochs). Both of Table 5's
    choices remain available (``local_optimizer: adam``, ``server_optimizer: sgd``).
    """

    gnn_layers: int = field(default=4, metadata={"help": "GNN layers L of the role encoder (Table 3 ablation: 0)",
                                                 "min": 0, "max": 256})
    gnn_widths: list[int] = field(default_factory=lambda: [32, 64, 64, 32], metadata={
        "help": "node feature size per GNN layer (Table 5); the first L are used", "min": 1, "max": 65_536})
    embed_dim: int = field(default=32, metadata={"help": "width of the embedded node features Z^(0)", "min": 1, "max": 65_536})
    task_dim: int = field(default=16, metadata={"help": "task embedding size F (Table 5)", "min": 1, "max": 65_536})
    combine: str = field(default="concat", metadata={"help": "role-task fusion in Eq. 9 (Table 3: concat or sum)",
                                                     "choices": ("concat", "sum")})
    hidden: int = field(default=64, metadata={"help": "hidden width of the node decoder MLP", "min": 1, "max": 65_536})
    decoder: str = field(default="per_layer", metadata={
        "help": "how phi2 outputs a layer (methods/fedmbridge/tahn.py): per_layer (Eq. 9: each layer whole, one output head per layer size) or chunked (chunk values at a time through one shared output layer, for layers too large for a head)",
        "choices": ("per_layer", "chunked")})
    chunk: int = field(default=128, metadata={"help": "weights per decoder output (decoder: chunked)", "min": 1, "max": 65_536})
    max_chunks: int = field(default=1024, metadata={"help": "chunks one node may need (decoder: chunked)", "min": 1, "max": 1_000_000})
    chunk_dim: int = field(default=16, metadata={"help": "width of the chunk-index embedding (decoder: chunked)", "min": 1, "max": 65_536})
    server_lr: float = field(default=0.001, metadata={"help": "TAHN learning rate eta (Table 5, for SGD: 0.005-0.07)",
                                                      "positive": True,
                                                      "tune": {"low": 1e-4, "high": 0.1, "log": True}})
    server_optimizer: str = field(default="adam", metadata={
        "help": "optimizer of the TAHN update: sgd (Table 5) or adam (same chain-rule gradient, preconditioned)",
        "choices": ("sgd", "adam")})
    server_weight_decay: float = field(default=0.0, metadata={
        "help": "weight decay of phi's SGD (Table 5 lists 0.06 without saying for which optimizer)", "min": 0.0})
    local_optimizer: str = field(default="sgd", metadata={
        "help": "clients' optimizer: adam (Table 5) or sgd (Delta theta then follows the local gradient, as in pFedHN)",
        "choices": tuple(LOCAL_OPTIMIZERS)})
    kd_beta: float = field(default=0.0, metadata={
        "help": "step size of the server-side distillation combined with FedMBridge (Table 3 rows 7-8: 0.01, "
                "0.05); 0 turns it off", "min": 0.0})
    kd_teachers: int = field(default=10, metadata={"help": "teachers per student when kd_beta > 0 (Appendix B.1.2: s = 10)",
                                                   "min": 1, "max": 100_000})
    kd_clip: float = field(default=5.0, metadata={
        "help": "largest global norm of the distillation gradient (as FedDistill*'s clip); 0 = unclipped", "min": 0.0})
    kd_rho: float = field(default=0.05, metadata={
        "help": "share of clients per modality group asked for public rows, and share of their rows, when kd_beta > 0",
        "probability": True})
    personal: str = field(default="generated", metadata={
        "help": "evaluated model: generated theta_i (Eq. 4) or local (after the client's last training)",
        "choices": ("generated", "local")})

    def __post_init__(self) -> None:
        from benchmark.errors import ConfigError

        if self.gnn_layers > len(self.gnn_widths):
            raise ConfigError(f"algorithm.gnn_layers ({self.gnn_layers}) exceeds the {len(self.gnn_widths)} "
                              f"gnn_widths given")


@ALGORITHMS.register("fedmbridge")
class FedMBridge(AMFLAlgorithm):
    """FedMBridge: a topology-aware hypernetwork generates each client's weights from its architecture graph (Algorithm 1)."""

    Config = FedMBridgeConfig
    revision = 2  # 2: each layer generated whole (decoder: per_layer) by default, issue 28
    has_setup = True
    upload_keys = (r"arch\.(features|edges|param_node|param_shape|spec)", "delta", disclosed(r"public\..+"))

    def init_server(self) -> Payload:
        c, ctx = self.cfg, self.ctx
        self.index = {cid: i for i, cid in enumerate(ctx.client_ids)}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(text_seed(ctx.seed, "fedmbridge/tahn"))
            self.tahn = TAHN(vocab_sizes(len(ctx.modalities)), len(ctx.client_ids), embed_dim=c.embed_dim,
                             gnn_widths=list(c.gnn_widths[:c.gnn_layers]), task_dim=c.task_dim, combine=c.combine,
                             hidden=c.hidden, chunk=c.chunk, max_chunks=c.max_chunks, chunk_dim=c.chunk_dim,
                             extension=graph_categories(),
                             extension_seed=text_seed(ctx.seed, "fedmbridge/tahn/graph"), decoder=c.decoder,
                             head_seed=text_seed(ctx.seed, "fedmbridge/tahn/heads")).to(ctx.device)
        groups = [{"params": self.tahn.phi(), "weight_decay": c.server_weight_decay},
                  {"params": [self.tahn.tasks.weight], "weight_decay": 0.0}]
        self.opt = SERVER_OPTIMIZERS[c.server_optimizer](groups, lr=c.server_lr)
        self.layouts: dict[int, ClientLayout] = {}
        self.specs: dict[int, Payload] = {}
        self.public: list[dict[str, torch.Tensor]] = []
        return {}

    @property
    def distills(self) -> bool:
        return self.cfg.kd_beta > 0


    # ------------------------------------------------------------------ setup: A_i up, theta_i down
    def setup_upload(self, client, state: dict) -> Payload:
        model, _ = self.client_model(client, state)
        graph = build_graph(model, self.ctx.modalities).payload()
        return {**graph, **spec_payload(client)} if self.distills else graph

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        for cid, up in uploads.items():
            self.layouts[self.index[cid]] = ClientLayout.of(ArchGraph.from_payload(up), self.cfg.chunk,
                                                            self.cfg.max_chunks, self.ctx.device, self.cfg.decoder)
        heads = self.tahn.generator.ensure_heads(set().union(*(lay.sizes for lay in self.layouts.values())))
        if heads:  # per_layer: the heads of the layer sizes the clients have, trained with phi
            self.opt.add_param_group({"params": heads, "weight_decay": self.cfg.server_weight_decay})
        replies = {cid: self._theta(cid) for cid in uploads}
        if self.distills:
            self.specs = {cid: {SPEC_KEY: up[SPEC_KEY]} for cid, up in uploads.items()}
            asked = public_requests(self.specs, self.ctx.feature_dims, self.cfg.kd_rho,
                                    text_seed(self.ctx.seed, "fedmbridge/public"))
            replies = {cid: {**replies[cid], **asked[cid]} for cid in replies}
        return replies

    def setup_receive(self, client, state: dict, payload: Payload) -> None:
        state["theta"] = payload["theta"]
        if "public.request" in payload:
            state["public_request"] = bool(payload["public.request"].item())

    @torch.no_grad()
    def _theta(self, cid: int) -> Payload:
        i = self.index[cid]
        return {"theta": self.tahn(self.layouts[i], i).detach().clone()}

    # ------------------------------------------------------------------ rounds
    def client_update(self, client, state: dict, received: Payload, rnd: int) -> Payload:
        theta = received["theta"] if "theta" in received else state["theta"]
        model, opt = self.client_model(client, state)
        load_flat(model, theta)
        self.local_train(model, opt, client, rnd)
        up: Payload = {"delta": flat_params(model) - theta}
        if state.pop("public_request", False):
            up.update(public_upload(client, self.cfg.kd_rho, text_seed(self.ctx.seed, "fedmbridge/rows", client.cid)))
        return up

    def _trained(self, cid: int, delta: torch.Tensor) -> torch.nn.Module:
        """Client ``cid``'s model at theta~ = theta + Delta theta (theta: what the TAHN sends it now)."""
        model = model_from_payload(self.specs[cid], self.ctx.feature_dims).to(self.ctx.device)
        load_flat(model, self._theta(cid)["theta"] + delta)
        return model

    def distilled(self, deltas: dict[int, torch.Tensor], rnd: int) -> dict[int, torch.Tensor]:
        """Each Delta theta_i plus one distillation step of size kd_beta from the round's other
        clients (as teachers) on the public set; unchanged while there is no public row yet."""
        if not self.public or len(deltas) < 2:
            return deltas
        rng = np.random.default_rng(text_seed(self.ctx.seed, "fedmbridge/teachers", rnd))
        models = {cid: self._trained(cid, d) for cid, d in deltas.items()}
        out = {}
        for cid in sorted(deltas):
            others = [c for c in sorted(deltas) if c != cid]
            teachers = rng.choice(others, size=min(self.cfg.kd_teachers, len(others)), replace=False).tolist()
            grads = distill_grads(models[cid], [models[t] for t in teachers], self.public, self.ctx.feature_dims,
                                  self.ctx.device, max_norm=self.cfg.kd_clip)
            flat = torch.cat([torch.zeros_like(p).reshape(-1) if g is None else g.reshape(-1)
                              for p, g in zip(models[cid].parameters(), grads)])
            out[cid] = deltas[cid] - self.cfg.kd_beta * flat.detach()
        return out

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        by_cid = {cid: up["delta"] for cid, up in uploads.items()}
        if self.distills:
            collect_public(self.public, uploads)
            by_cid = self.distilled(by_cid, rnd)
        deltas = {self.index[cid]: d for cid, d in by_cid.items()}
        if deltas:
            chain_rule_step(self.tahn, self.opt, self.layouts, deltas)
        return {cid: self._theta(cid) for cid in self.ctx.client_ids}

    def evaluate(self, client, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model, _ = self.client_model(client, state)
        if self.cfg.personal == "generated":
            theta = received["theta"] if "theta" in received else state["theta"]
            saved = flat_params(model)
            load_flat(model, theta)
            scores = self.ctx.task.evaluate(model, client)
            load_flat(model, saved)
            return scores
        return self.ctx.task.evaluate(model, client)
