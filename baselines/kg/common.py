"""Shared machinery of the KG-track algorithms (FedE, MMFedE, S-Ind, MMInd).

Why one base class: the four differ only in (a) whether entity vectors fuse modality
features with the structural table, (b) whether anything is exchanged, and (c) whether
Adam is reset each round. Everything else (model construction with per-client seeds,
the local loop over mini-batches of tail queries, the server's per-entity mean over
holders and the |T^c|-weighted mean of shared projections) is written once here, so that
differences in their numbers come from those three choices only.

Payload conventions: a client names its entities to the server by global id once, in the
setup exchange (``entity_ids``), then uploads ``entity`` (its structural rows, aligned
with those ids), ``num_train`` (|T^c|, the aggregation weight) and, for multimodal
methods, the projections ``proj.<modality>.weight|bias`` and the fusion's parameters
``fusion.<name>`` (``fusion.logits`` for the weighted fusion; see ``fusions.py``). The
decoder (relation table) is never uploaded: it is not even a key a payload can carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from baselines.kg.fusions import KG_FUSIONS, build_fusion, fusion_payload
from baselines.kg.imputers import HIDE_SAMPLERS, KG_IMPUTERS, RECON_NETS, ImputerOptions
from baselines.kg.kge_client import PROJ_NORMS, SPLIT, KGEClient, Regularizer, init_projections
from baselines.kg.split import SplitKGEClient
from benchmark.algorithm import Algorithm, Broadcast
from benchmark.comm import Payload
from benchmark.errors import ConfigError
from benchmark.kg_client import KGClientData
from benchmark.kge import DECODERS
from benchmark.seeding import fnv_seed
from benchmark.training import LocalLoop, LoopLog, shuffled_batches


def both_views(task: Any, model: nn.Module, client: KGClientData, load_global: Callable[[], None]) -> dict[str, dict[str, float]]:
    """Scores of the client view (the model as local training left it) and, after
    ``load_global()``, of the server view.

    ``val``/``test`` are the client view, for every federated KG method: MMFeD3 and MMFedLU
    can only be scored there (their client model is personal), so the others are too, and the
    best round is chosen on the view that is reported. The server view stays in the record
    under ``val_server``/``test_server`` (Figure 5 plots both)."""
    local = task.evaluate(model, client)
    load_global()
    server = task.evaluate(model, client)
    return {**local, "val_server": server["val"], "test_server": server["test"],
            "val_client": local["val"], "test_client": local["test"]}


def start_from_stage(model: KGEClient, warm: dict[str, Tensor]) -> None:
    """Copy a pre-training stage's rows and relations (``decoder.*``) into a new client model;
    projections, fusion and imputer keep their own initialization."""
    with torch.no_grad():
        if warm["entity"].shape != model.entity.shape:
            raise ConfigError(f"the pre-training stage's client rows have shape {tuple(warm['entity'].shape)}, "
                              f"this client's model {tuple(model.entity.shape)}")
        model.entity.copy_(warm["entity"])
    model.decoder.load_state_dict({k[len("decoder."):]: v for k, v in warm.items() if k.startswith("decoder.")})


class KGAlgorithm(Algorithm):
    """Base of the KG-track algorithms; subclasses set the three class flags below."""

    tasks: ClassVar[tuple[str, ...]] = ("kg_completion",)
    multimodal: ClassVar[bool] = False      # fuse modality features into entity vectors
    federated: ClassVar[bool] = False       # exchange entity rows (and projections)
    reset_adam: ClassVar[bool] = False      # a fresh Adam every round (FedE)
    # subclasses that set ``federated`` also set ``has_setup = True`` (the engine reads the
    # class attribute): the setup exchange is where a client names its entities

    @dataclass
    class Config:
        fusion: str = field(default="weighted", metadata={"help": "fusion Phi of S, V, D: average, weighted (learnable), concat, gated, or split (one scorer per modality, averaged probabilities)", "choices": lambda: (*KG_FUSIONS.names(), SPLIT)})

        imputer: str = field(default="none", metadata={"help": "missing-modality imputer on H = [S || V || D] (baselines/kg/imputers.py): none, ae, cra, mmin or hide", "choices": KG_IMPUTERS.names})
        lambda_di: float = field(default=1.0, metadata={"help": "weight lambda of the imputer's masked loss L_DI in the local loss (the seed gives no value)", "min": 0, "tune": {"low": 0.0, "high": 2.0}})
        imputer_hidden: list[int] = field(default_factory=list, metadata={"help": "imputer AE widths (three); empty = the paper's [512, 256, 128] scaled to the hyper-modal width (w/3, w/6, w/12)", "min": 1, "max": 65_536})
        imputer_drop: float = field(default=0.3, metadata={"help": "P(hide an observed modality block from the imputer's input in the L_DI forward; still a target): self-supervision for imputing; 0 = the paper's literal objective, which residual nets solve as the identity", "min": 0, "below": 1})
        diffusion_steps: int = field(default=5, metadata={"help": "HidE diffusion steps T (the seed gives none; DiffRec's 5)", "min": 1, "max": 10_000})
        beta_low: float = field(default=5e-4, metadata={"help": "HidE first noise variance beta_1, before scaling by noise_scale (seed: 5e-4)", "positive": True})
        beta_up: float = field(default=5e-2, metadata={"help": "HidE last noise variance beta_T, before scaling by noise_scale (seed: 5e-2)", "positive": True})
        noise_scale: float = field(default=1e-4, metadata={"help": "HidE scale s of both beta bounds (seed: 1e-4, DiffRec convention)", "positive": True})
        recon_net: str = field(default="cra", metadata={"help": "HidE reconstruction network predicting x0 from (x_t, t): cra, ae, mlp or mha", "choices": RECON_NETS})
        hide_sampler: str = field(default="step", metadata={"help": "HidE's imputation at evaluation: step (one reconstruction pass from a seeded step, as in training) or chain (the paper's T-step reverse chain; slower, and on the tiny KG lower, see HidEImputer)", "choices": HIDE_SAMPLERS})
        imputer_heads: int = field(default=4, metadata={"help": "attention heads of HidE's mha reconstruction net", "min": 1, "max": 1_024})
        proj_norm: str = field(default="rms", metadata={"help": "bound on the projected modality blocks W_m x_m (KGEClient.modality_blocks): rms (every row rescaled to the structural rows' initial RMS, embedding_range / sqrt(3), before and after an imputer) or none (unbounded, as records made before issue 27)", "choices": PROJ_NORMS})
        pretrained: str = field(default="none", metadata={"help": "start from a pre-training stage, outside this run's round budget (benchmark/stages.py): none, or fede (a structure-only FedE run on the same federation and seed gives S^c and the local relations, seed Sec. IV-A); cached, so the cells that share it run it once", "choices": ("none", "fede")})
        pretrain_rounds: int = field(default=30, metadata={"help": "rounds of the pre-training stage (algorithm.pretrained); its local epochs, learning rate and batches are the run's (30: structure-only runs on fb15k237_small peak near round 26; the paper states no length)", "min": 1, "max": 1_000_000})

        def __post_init__(self) -> None:
            try:
                self.imputer_options()
            except ConfigError as e:
                raise ConfigError(f"algorithm imputer options: {e}") from None

        def imputer_options(self) -> ImputerOptions:
            return ImputerOptions(hidden=list(self.imputer_hidden), steps=self.diffusion_steps, beta_low=self.beta_low,
                                  beta_up=self.beta_up, noise_scale=self.noise_scale, recon_net=self.recon_net,
                                  heads=self.imputer_heads, drop=self.imputer_drop, sampler=self.hide_sampler)

    def __init__(self, cfg: Any, ctx: Any) -> None:
        super().__init__(cfg, ctx)
        self.task_cfg = ctx.task.cfg
        self.fusion = getattr(cfg, "fusion", "weighted") if cfg is not None else "weighted"
        self.imputer = getattr(cfg, "imputer", "none") if cfg is not None else "none"
        self.lambda_di = float(getattr(cfg, "lambda_di", 0.0)) if cfg is not None else 0.0
        self.pretrained = str(getattr(cfg, "pretrained", "none")) if cfg is not None else "none"
        if self.pretrained != "none" and not self.federated:
            raise ConfigError(f"algorithm.pretrained: {self.pretrained} is a federated pre-training; an isolated or "
                              f"centralized bound exchanges nothing (or trains on the pooled graph), so use none")
        self.warm_table: Tensor | None = None
        self.client_ids_seen: dict[int, Tensor] = {}
        self.table: Tensor | None = None
        self.shared: Payload = {}

    # ---------------------------------------------------------------- client side
    def new_model(self, client: KGClientData) -> KGEClient:
        dims = self.ctx.feature_dims if self.multimodal else None
        cls: type[KGEClient] = KGEClient
        if dims and self.fusion == SPLIT:
            cls = SplitKGEClient
        model = cls(client.num_entities, client.num_relations, self.task_cfg,
                    fnv_seed(self.ctx.seed, client.cid, 17), dims, self.fusion)
        model.proj_norm = str(getattr(self.cfg, "proj_norm", KGEClient.proj_norm))
        if dims and self.imputer != "none":
            model.attach_imputer(self.imputer, self.cfg.imputer_options(), fnv_seed(self.ctx.seed, client.cid, 31))
        return model.to(self.ctx.device)

    def client_model(self, client: KGClientData, state: dict) -> KGEClient:
        if "model" not in state:
            state["model"] = self.new_model(client)
            if "warm_start" in state:
                start_from_stage(state["model"], state["warm_start"])
        return state["model"]

    # ---------------------------------------------------------------- pre-training stage
    def pretraining(self) -> dict[str, Any] | None:
        """``algorithm.pretrained: fede``: a structure-only FedE run of ``pretrain_rounds``
        rounds on this federation and seed, evaluated once at its end (benchmark/stages.py).
        The method then starts from its rows and relations with fresh projections, fusion,
        imputer and optimizer, and spends its own budget on the multimodal model only; no
        mid-run switch rescales anything."""
        if self.pretrained == "none":
            return None
        rounds = int(self.cfg.pretrain_rounds)
        return {"algorithm": {"name": self.pretrained}, "train": {"rounds": rounds, "eval_every": rounds}}

    def export_server(self) -> dict[str, Tensor]:
        return {} if self.table is None else {"entity": self.table}

    def export_client(self, client: KGClientData, state: dict) -> dict[str, Tensor]:
        model = state["model"]
        return {"entity": model.entity.detach(),
                **{f"decoder.{k}": v for k, v in model.decoder.state_dict().items()}}

    def start_from(self, server: dict[str, Tensor]) -> None:
        self.warm_table = server.get("entity")

    def optimizer(self, model: KGEClient, state: dict) -> torch.optim.Optimizer:
        train = self.ctx.run.train
        if self.reset_adam or "opt" not in state:
            params = [p for p in model.parameters() if p.requires_grad]
            state["opt"] = torch.optim.Adam(params, lr=train.lr)
        return state["opt"]

    def batch_generator(self, client: KGClientData, rnd: int) -> torch.Generator:
        """The seeded generator of one client's round (batch order and negatives), on the
        model's device so neither is drawn on the host and copied."""
        return torch.Generator(device=self.ctx.device).manual_seed(fnv_seed(self.ctx.seed, client.cid, rnd, 101))

    def local_train(self, client: KGClientData, model: KGEClient, opt: torch.optim.Optimizer, rnd: int,
                    regularizer: Regularizer | None = None) -> LoopLog:
        """``train.local_epochs`` shuffled passes over the client's tail queries through the
        core loop; a ``regularizer`` (MMFedProx, MMFedEC) is added to every batch's KGE loss."""
        gen = self.batch_generator(client, rnd)
        model.train()
        penalty = None if regularizer is None else (lambda: regularizer(model, client))
        batches = shuffled_batches(self.ctx.task.train_queries(client), self.task_cfg.batch_size, gen)
        return LocalLoop.from_train(self.ctx.run.train).run(self.batch_objective(client, model, gen), opt,
                                                            model.parameters(), cid=client.cid,
                                                            batches=batches, penalty=penalty)

    def batch_objective(self, client: KGClientData, model: KGEClient, gen: torch.Generator) -> Callable[[Tensor], Tensor]:
        """The loss of one batch of tail queries: the task's KGE loss against negatives drawn
        by ``gen``, plus lambda L_DI when an imputer is attached (what ``bench kg`` times too)."""
        task = self.ctx.task

        def loss_fn(batch: Tensor) -> Tensor:
            loss = task.batch_loss(model, client, batch, gen)
            imputation = model.pop_imputer_loss()
            return loss if imputation is None else loss + self.lambda_di * imputation

        return loss_fn

    def regularizer(self, client: KGClientData, model: KGEClient, state: dict, rnd: int) -> Regularizer | None:
        """The extra local-loss term of this round, built after the global rows were
        loaded (so it can freeze them as an anchor); none for the plain methods."""
        return None

    def after_local_train(self, client: KGClientData, model: KGEClient, state: dict, rnd: int) -> None:
        """Called once the round's local training ends (MMFedEC keeps its rows here)."""

    # ---------------------------------------------------------------- hooks
    def init_server(self) -> Broadcast:
        """Federated: the global structural table over all entities (and shared
        projections), created once; clients get their rows in the setup exchange."""
        if not self.federated:
            return {}
        dec_cls = DECODERS.get(self.task_cfg.decoder)
        width = dec_cls.entity_width(self.task_cfg.dim)
        rng = (self.task_cfg.gamma + dec_cls.epsilon) / self.task_cfg.dim
        gen = torch.Generator().manual_seed(fnv_seed(self.ctx.seed, 3))
        self.table = torch.empty(self.ctx.num_global_nodes, width).uniform_(-rng, rng, generator=gen)
        if self.warm_table is not None:  # the pre-training stage's global rows (algorithm.pretrained)
            if self.warm_table.shape != self.table.shape:
                raise ConfigError(f"the pre-training stage's entity table has shape {tuple(self.warm_table.shape)}, "
                                  f"this run needs {tuple(self.table.shape)}")
            self.table = self.warm_table.detach().cpu().clone()
        if self.multimodal:
            proj = nn.ModuleDict({m: nn.Linear(d, width) for m, d in self.ctx.feature_dims.items()})
            init_projections(proj, rng, gen)
            for m, lin in proj.items():
                self.shared[f"proj.{m}.weight"] = lin.weight.detach().clone()
                self.shared[f"proj.{m}.bias"] = lin.bias.detach().clone()
            if self.fusion != SPLIT:  # split has no fusion parameters to share
                fusion = build_fusion(self.fusion, width, list(self.ctx.feature_dims), fnv_seed(self.ctx.seed, 5))
                self.shared.update(fusion_payload(fusion))
        self.table = self.table.to(self.ctx.device)
        self.shared = {k: v.to(self.ctx.device) for k, v in self.shared.items()}
        return {}

    def setup_upload(self, client: KGClientData, state: dict) -> Payload:
        """The existence vector, as the global ids of the client's entities."""
        return {"entity_ids": client.global_ids.clone()}

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        for cid, up in uploads.items():
            self.client_ids_seen[cid] = up["entity_ids"].long()
        return self._replies()

    def setup_receive(self, client: KGClientData, state: dict, payload: Payload) -> None:
        self.client_model(client, state).load_shared(payload)

    def _replies(self) -> dict[int, Payload]:
        assert self.table is not None
        return {cid: {"entity": self.table[ids].clone(), **{k: v.clone() for k, v in self.shared.items()}}
                for cid, ids in self.client_ids_seen.items()}

    def client_update(self, client: KGClientData, state: dict, received: Payload, rnd: int) -> Payload:
        model = self.client_model(client, state)
        if received:
            model.load_shared(received)
        opt = self.optimizer(model, state)
        self.local_train(client, model, opt, rnd, self.regularizer(client, model, state, rnd))
        self.after_local_train(client, model, state, rnd)
        if not self.federated:
            return {}
        return {**model.shared_payload(), "num_train": torch.tensor([float(client.num_train)], device=model.entity.device)}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Broadcast:
        """Entity rows: mean over the clients that uploaded them (rows no participant holds
        keep their value). Projections and fusion: sum_c alpha_c W^c, alpha_c = |T^c| / sum |T|."""
        if not self.federated or not uploads:
            return {}
        assert self.table is not None
        total = torch.zeros_like(self.table)
        count = torch.zeros(self.table.shape[0], device=self.table.device)
        for cid, up in uploads.items():
            ids = self.client_ids_seen[cid]
            total.index_add_(0, ids, up["entity"])
            count.index_add_(0, ids, torch.ones(len(ids), device=count.device))
        held = count > 0
        self.table[held] = total[held] / count[held].unsqueeze(1)
        if self.shared:
            sizes = {cid: float(up["num_train"].sum()) for cid, up in uploads.items()}
            if sum(sizes.values()) <= 0:
                sizes = {cid: 1.0 for cid in sizes}
            denom = sum(sizes.values())
            for k in self.shared:
                self.shared[k] = sum(up[k] * (sizes[cid] / denom) for cid, up in uploads.items())
        return self._replies()

    def evaluate(self, client: KGClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        """Personalized: the client's own model. Federated: the client view on ``val``/``test``
        (the model as the client's local training left it), and both views under their own
        names (``*_client``, and ``*_server``: the global parameters received, entity rows,
        projections, fusion, with the client's local relations); see ``both_views``."""
        model = self.client_model(client, state)
        if not (self.federated and received):
            return self.ctx.task.evaluate(model, client)
        return both_views(self.ctx.task, model, client, lambda: model.load_shared(received))
