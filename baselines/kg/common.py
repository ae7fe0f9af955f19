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

from benchmark.algorithm import Algorithm, Broadcast
from benchmark.comm import Payload
from benchmark.errors import ConfigError
from baselines.kg.fusions import KG_FUSIONS, build_fusion, fusion_payload
from baselines.kg.imputers import (HIDE_SAMPLERS, KG_IMPUTERS, RECON_NETS, ImputerOptions, KGImputer, build_imputer, hyper_modal,
                                   split_blocks)
from benchmark.kge import DECODERS, build_decoder
from benchmark.training import LocalLoop, LoopLog, shuffled_batches
from benchmark.kg_client import KGClientData

# the split paradigm is a model (one decoder per modality), not a KG_FUSIONS entry
SPLIT = "split"

# a local-loss term: (model, client) -> scalar added to every batch's KGE loss
Regularizer = Callable[["KGEClient", KGClientData], Tensor]


def _mix(*parts: int) -> int:
    """A deterministic 62-bit seed from integers (seed, client id, round...)."""
    h = 1469598103934665603
    for p in parts:
        h = ((h ^ (int(p) & 0xFFFFFFFFFFFF)) * 1099511628211) % (1 << 62)
    return h


def _standardize(x: Tensor) -> Tensor:
    """Scale each feature row to unit RMS: encoders differ wildly in scale (unit-norm
    MiniLM rows have entries ~0.05, z-scored numeric codes ~1), and a per-row rule needs
    no statistics from other entities or clients."""
    return x / x.pow(2).mean(dim=1, keepdim=True).sqrt().clamp_min(1e-6)


# ``algorithm.proj_norm``: how the projected modality blocks W_m x_m are bounded (KGEClient)
PROJ_NORMS = ("rms", "none")


def bound_rows(x: Tensor, rms: float) -> Tensor:
    """Each row of ``x`` rescaled to RMS ``rms``, the bound of ``KGEClient.modality_blocks``
    (``_standardize`` times a constant). A zero row stays zero, and the gradient stays finite
    there: the squared RMS is floored before the square root."""
    return x * (rms / x.pow(2).mean(dim=1, keepdim=True).clamp_min(1e-12).sqrt())


class KGEClient(nn.Module):
    """One client's KGE model: structural entity table + decoder (local relations) and,
    when ``feature_dims`` is given, per-modality projections and a fusion.

    Fused entity vector: ``fusion(S, {m: W_m x_m})`` with a fusion of ``KG_FUSIONS``
    (default ``weighted``: ``a_0 S + sum_m a_m W_m x_m``, ``a = softmax(fusion.logits)``).
    An imputer (``attach_imputer``, ``algorithm.imputer``) completes the missing modality
    blocks of ``[S || W_m x_m]`` before the fusion; its parameters are never uploaded.
    Every modality block is bounded to the structural scale (``modality_blocks``).
    """

    # ``algorithm.proj_norm`` (``PROJ_NORMS``); the algorithm sets it on every model it builds
    proj_norm: str = "rms"

    def __init__(self, num_entities: int, num_relations: int, task_cfg: Any, seed: int,
                 feature_dims: dict[str, int] | None = None, fusion: str = "weighted") -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.decoder = build_decoder(task_cfg.decoder, max(num_relations, 1), task_cfg.dim, task_cfg.gamma)
        gen = torch.Generator().manual_seed(seed)
        self.entity = nn.Parameter(self.decoder.init_entities(num_entities, gen))
        self.fusion_name = fusion
        self.proj = nn.ModuleDict()
        self.fusion: nn.Module | None = None
        if feature_dims:
            d = self.decoder.entity_dim
            for m, dm in feature_dims.items():
                lin = nn.Linear(dm, d)
                self.proj[m] = lin
            init_projections(self.proj, self.decoder.embedding_range, gen)
            self.fusion = build_fusion(fusion, self.entity.shape[1], list(feature_dims), _mix(seed, 29))
        self.imputer: KGImputer | None = None  # set by attach_imputer; never uploaded

    @property
    def multimodal(self) -> bool:
        return len(self.proj) > 0

    def modality_blocks(self, client: KGClientData) -> tuple[Tensor, dict[str, Tensor]]:
        """``(S [n_ent, d], {m: W_m x_m [n_ent, d]})``: what a fusion combines (and what the
        split paradigm scores one by one, ``baselines/kg/split.py``).

        Cost: projection, imputation and fusion run over the whole entity table at every
        training batch, on purpose. Restricting them to the rows a batch touches would save
        nothing at the paper's setting: 1,024 queries x 256 uniform negatives draw 262,144
        candidates, so a client with n entities leaves about ``n * exp(-262144 / n)`` rows
        untouched (none for FB15K-237 clients of a few thousand entities); and it would
        change the numbers (HidE's noise draws and L_DI's mean run over the table). Imputing
        once per local epoch instead would train the KGE loss on stale imputations that no
        longer depend on the current S, W_m and imputer, while the seed trains
        ``L_KGC + lambda L_DI`` jointly at every step (Eq. 12). Evaluation computes the table
        once per scoring (``KGCompletion.evaluate``), not per query batch.

        Bound (``proj_norm: rms``, the default): every projected row is rescaled to the fixed
        RMS ``r = embedding_range / sqrt(3)``, that of the structural rows' uniform
        initialization (and about that of a projected row at ``init_projections``). Why: the
        fused vector is invariant to trading a projection's scale against its fusion weight,
        and nothing else fixes that scale, so Adam at the rows' learning rate grows the dense
        ``W_m`` without limit (issue 27, FB15K-237 Fed3 without pre-training: the client
        view's text block RMS 3.6 -> ~280, its fusion weight -> 0, validation MRR 0.325 ->
        0.149). At a fixed ``r`` a modality's share is the fusion's alone (weights, gates,
        MLP), for every fusion, the split scorers and the imputers: ``H = [S || V_m ...]``
        holds the bounded blocks (they are L_DI's targets), and the rows an imputer fills are
        rescaled after it (observed rows are already at ``r``). A config constant, not the
        current structural RMS: no table statistic, no gradient into S, deterministic, per
        row, identical in both views, nothing from other clients. Not taken: a separate
        learning rate for ``W_m`` only slows the growth; a cap at ``r`` keeps the
        scale/weight trade below it and held validation MRR less well on the tiny KG. A
        zero-filled missing feature (``missing.fill: zeros``) projects to the bias alone,
        i.e. one shared "missing" vector of norm ``r``. ``proj_norm: none``: the unbounded
        blocks of earlier records."""
        projected = {m: lin(_standardize(client.features[m])) for m, lin in self.proj.items()}
        bounded = self.proj_norm != "none"
        if bounded:
            rms = self.decoder.embedding_range / 3 ** 0.5
            projected = {m: bound_rows(v, rms) for m, v in projected.items()}
        if self.imputer is None:
            return self.entity, projected
        # imputation on the hyper-modal matrix H = [S || W_m x_m ...] (baselines/kg/imputers.py)
        order = list(self.proj)
        H, M = hyper_modal(self.entity, projected, client.available, order, client.modalities)
        imputed = split_blocks(self.imputer(H, M), order, self.entity.shape[1])
        if bounded:
            imputed = {m: bound_rows(v, rms) for m, v in imputed.items()}
        return self.entity, imputed

    def attach_imputer(self, name: str, opts: ImputerOptions, seed: int) -> None:
        """Give the model a missing-modality imputer of ``KG_IMPUTERS`` (none: nothing)."""
        if self.multimodal:
            width = self.entity.shape[1] * (1 + len(self.proj))
            self.imputer = build_imputer(name, width, self.entity.shape[1], opts, seed)

    def pop_imputer_loss(self) -> Tensor | None:
        """The imputer's L_DI of the last training forward (once), or None."""
        return None if self.imputer is None else self.imputer.pop_loss()

    def entity_vectors(self, client: KGClientData) -> Tensor:
        """``[n_ent, d]``: the structural table, or its fusion with projected features."""
        if not self.multimodal:
            return self.entity
        assert self.fusion is not None
        structure, projected = self.modality_blocks(client)
        return self.fusion(structure, projected)

    # ---------------------------------------------------------------- payloads
    def shared_payload(self) -> Payload:
        """What a federated client uploads (never the decoder)."""
        out: Payload = {"entity": self.entity.detach().clone()}
        for m, lin in self.proj.items():
            out[f"proj.{m}.weight"] = lin.weight.detach().clone()
            out[f"proj.{m}.bias"] = lin.bias.detach().clone()
        if self.fusion is not None:
            out.update(fusion_payload(self.fusion))
        return out

    @torch.no_grad()
    def load_shared(self, payload: Payload) -> None:
        """Copy received global parameters in place (optimizer references stay valid)."""
        if "entity" in payload:
            self.entity.copy_(payload["entity"])
        for m, lin in self.proj.items():
            if f"proj.{m}.weight" in payload:
                lin.weight.copy_(payload[f"proj.{m}.weight"])
                lin.bias.copy_(payload[f"proj.{m}.bias"])
        if self.fusion is not None:
            for n, p in self.fusion.named_parameters():
                if f"fusion.{n}" in payload:
                    p.copy_(payload[f"fusion.{n}"])


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


def init_projections(proj: nn.ModuleDict, embedding_range: float, gen: torch.Generator) -> None:
    """Uniform weights in ``+-range / sqrt(d_in)``, zero bias: a projected (unit-RMS) feature
    then starts on the scale of the structural rows (uniform in ``+-range``), so neither
    part swamps the other at the start of training."""
    with torch.no_grad():
        for lin in proj.values():
            a = embedding_range / lin.weight.shape[1] ** 0.5
            lin.weight.copy_(torch.empty_like(lin.weight).uniform_(-a, a, generator=gen))
            lin.bias.zero_()


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
        lambda_di: float = field(default=1.0, metadata={"help": "weight lambda of the imputer's masked loss L_DI in the local loss (the seed gives no value)", "min": 0})
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
            from baselines.kg.split import SplitKGEClient  # here: split.py imports this module

            cls = SplitKGEClient
        model = cls(client.num_entities, client.num_relations, self.task_cfg,
                    _mix(self.ctx.seed, client.cid, 17), dims, self.fusion)
        model.proj_norm = str(getattr(self.cfg, "proj_norm", KGEClient.proj_norm))
        if dims and self.imputer != "none":
            model.attach_imputer(self.imputer, self.cfg.imputer_options(), _mix(self.ctx.seed, client.cid, 31))
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
        return torch.Generator(device=self.ctx.device).manual_seed(_mix(self.ctx.seed, client.cid, rnd, 101))

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
        gen = torch.Generator().manual_seed(_mix(self.ctx.seed, 3))
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
                fusion = build_fusion(self.fusion, width, list(self.ctx.feature_dims), _mix(self.ctx.seed, 5))
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

