"""MMFedLU (seed App. C.A, after FedLU, Zhu et al. 2023) and the dual-view machinery it
shares with MMFeD3 (``methods/mmfed3``).

Dual view: each client holds two models of its entities that share its relations R^c
(never uploaded):

- the *client view* ``E^c = Phi(S^c, V^c, D^c)``: the client's own structural rows,
  projections and fusion, with the configured imputer filling missing modalities (its
  parameters stay here);
- the *server view* ``E^{s,c} = Phi(S^s, W_v E_v, W_d E_d)``: the received global rows,
  projections and fusion applied to the client's own (incomplete, fill-padded) features.

Both are trained together on the client's triples with the same negatives per query, so
their candidate softmaxes ``p^c`` and ``p^{s,c}`` over {t} + negatives (seed Eq. 1, 9) can
be distilled into each other. Only the server view's parameters are uploaded (entity rows,
projections, fusion); the server aggregates them exactly as MMFedE does.

Evaluation: the client view (the seed's test-time rule, ``argmax p^c(e | h, r; E^c, R^c)``)
on ``val``/``test``; the server view's scores come along under ``val_server`` and
``test_server`` (seed Fig. 5 plots both views' validation MRR per round).

Pre-training (``algorithm.pretrained: fede``): both views start from a FedE run on the same
federation and seed, made outside this run's round budget (``benchmark/stages.py``): S^c
and the local relations are FedE's (seed Sec. IV-A).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from baselines.kg.common import KGAlgorithm
from baselines.kg.kge_client import KGEClient
from benchmark.comm import Payload
from benchmark.kg_client import KGClientData
from benchmark.kge import kge_loss, sample_negatives
from benchmark.registry import ALGORITHMS
from benchmark.seeding import fnv_seed
from benchmark.training import LocalLoop, shuffled_batches

View = tuple[nn.Module, Tensor]
MASKED = -1e4  # logit of a sampled negative equal to the positive: probability exactly 0 in float32


def views_of(model: KGEClient, client: KGClientData) -> list[View]:
    """``(decoder, entity table)`` scorers of a model: its fused table, or one per modality
    for the split paradigm (``entity_views``)."""
    if hasattr(model, "entity_views"):
        return list(model.entity_views(client).values())
    return [(model.decoder, model.entity_vectors(client))]


def candidate_scores(views: list[View], queries: Tensor, neg: Tensor) -> list[tuple[Tensor, Tensor]]:
    """Per view: ``(positive [B], negatives [B, N])`` scores of tail queries ``[B, 3]``."""
    h, r, t = queries[:, 0], queries[:, 1], queries[:, 2]
    out = []
    for dec, ent in views:
        q = dec.query(ent[h], r)
        out.append((dec._score_pairs(q, ent[t]), dec.score_query(q, ent, neg)))
    return out


def candidate_log_probs(scores: list[tuple[Tensor, Tensor]], mask: Tensor) -> Tensor:
    """``[B, 1 + N]`` log-probabilities over {t} + negatives: the softmax of one view, or
    the log of the mean of the views' softmaxes (split). Masked negatives get probability 0."""
    logps = [torch.log_softmax(torch.cat([pos.unsqueeze(1), neg.masked_fill(mask, MASKED)], dim=1), dim=1)
             for pos, neg in scores]
    if len(logps) == 1:
        return logps[0]
    return torch.logsumexp(torch.stack(logps), dim=0) - math.log(len(logps))


def distill_kl(teacher: Tensor, student: Tensor, detach_teacher: bool = True) -> Tensor:
    """Batch mean of ``KL(p_teacher || p_student)`` from log-probabilities; the teacher is a
    constant (Hinton-style distillation) unless ``detach_teacher`` is False."""
    if detach_teacher:
        teacher = teacher.detach()
    return (teacher.exp() * (teacher - student)).sum(dim=1).mean()


def table_of(views: list[View]) -> Tensor:
    """One ``[n_ent, d]`` entity table per model (the mean of a split model's views)."""
    return views[0][1] if len(views) == 1 else torch.stack([ent for _, ent in views]).mean(dim=0)


@dataclass
class DualTerms:
    """What a dual-view algorithm's extra loss may use for one batch."""

    logp_client: Tensor        # [B, 1 + N]
    logp_server: Tensor        # [B, 1 + N]
    client_table: Tensor       # [n_ent, d] E^c (imputed)
    server_table: Tensor       # [n_ent, d] E^{s,c}


class DualViewKG(KGAlgorithm):
    """Base of MMFedLU and MMFeD3 (see the module docstring); subclasses give ``distill``."""

    federated = True
    has_setup = True
    multimodal = True
    revision = 2  # 2: projected modality rows bounded to the structural scale (proj_norm: rms), HidE's cheaper forward (issue 27)
    personalized = True
    upload_keys = ("entity_ids", "entity", "num_train", r"proj\..+\.(weight|bias)", r"fusion\..+")

    @dataclass
    class Config(KGAlgorithm.Config):
        sync_client: bool = field(default=False, metadata={"help": "reload the client view's rows/projections/fusion from the global ones every round (else the client view is a persistent local model)"})

    # ---------------------------------------------------------------- the two views
    def views(self, client: KGClientData, state: dict) -> tuple[KGEClient, KGEClient]:
        """``(client view, server view)``, created on first use; the server view shares the
        client view's decoder(s), i.e. the local relations R^c, and has no imputer."""
        cm = self.client_model(client, state)
        if "server" not in state:
            sm = type(cm)(client.num_entities, client.num_relations, self.task_cfg,
                          fnv_seed(self.ctx.seed, client.cid, 17), self.ctx.feature_dims, self.fusion)
            sm.decoder = cm.decoder
            sm.proj_norm = cm.proj_norm
            if hasattr(cm, "view_decoders"):
                sm.view_decoders = cm.view_decoders
            if "warm_start" in state:  # both views start from the pre-training stage's rows
                with torch.no_grad():
                    sm.entity.copy_(state["warm_start"]["entity"])
            state["server"] = sm.to(self.ctx.device)
        return cm, state["server"]

    def _load(self, client: KGClientData, state: dict, payload: Payload) -> tuple[KGEClient, KGEClient]:
        cm, sm = self.views(client, state)
        if payload:
            sm.load_shared(payload)
            if self.cfg.sync_client:
                cm.load_shared(payload)
        return cm, sm

    def setup_receive(self, client: KGClientData, state: dict, payload: Payload) -> None:
        """Both views start from the global initialization."""
        cm, sm = self.views(client, state)
        cm.load_shared(payload)
        sm.load_shared(payload)

    def dual_optimizer(self, cm: KGEClient, sm: KGEClient, state: dict) -> torch.optim.Optimizer:
        """One persistent Adam over both views' parameters (shared relations counted once)."""
        if "opt" not in state:
            params = {id(p): p for p in [*cm.parameters(), *sm.parameters()] if p.requires_grad}
            state["opt"] = torch.optim.Adam(list(params.values()), lr=self.ctx.run.train.lr)
        return state["opt"]

    # ---------------------------------------------------------------- the loss
    def kgc_loss(self, scores: list[tuple[Tensor, Tensor]], mask: Tensor, logp: Tensor) -> Tensor:
        """Seed Eq. 2: the task's KGE loss; for several views (split) the NLL of the mean
        probability under softmax cross-entropy, else the mean of the views' losses."""
        cfg = self.task_cfg
        if len(scores) == 1:
            return kge_loss(cfg.loss, scores[0][0], scores[0][1], mask, cfg.temperature)
        if cfg.loss == "softmax_ce":
            return -logp[:, 0].mean()
        return torch.stack([kge_loss(cfg.loss, p, n, mask, cfg.temperature) for p, n in scores]).mean()

    @abstractmethod
    def distill(self, terms: DualTerms, state: dict, rnd: int) -> dict[str, Tensor]:
        """The algorithm's extra loss terms by name (already weighted)."""

    def batch_loss(self, client: KGClientData, cm: KGEClient, sm: KGEClient, queries: Tensor,
                   gen: torch.Generator, state: dict, rnd: int) -> tuple[Tensor, dict[str, Tensor]]:
        """L_KGC(client view) + L_KGC(server view) + lambda L_DI + the algorithm's terms."""
        t = queries[:, 2]
        # drawn on the generator's device (a CPU generator gives the numbers it always gave)
        neg = sample_negatives(len(queries), self.task_cfg.num_negatives, client.num_entities, False, gen,
                               queries.device)
        mask = neg == t.unsqueeze(1)
        s_views = views_of(sm, client)
        s_scores = candidate_scores(s_views, queries, neg)
        s_logp = candidate_log_probs(s_scores, mask)
        c_views = views_of(cm, client)
        c_scores = candidate_scores(c_views, queries, neg)
        c_logp = candidate_log_probs(c_scores, mask)
        loss = self.kgc_loss(c_scores, mask, c_logp) + self.kgc_loss(s_scores, mask, s_logp)
        imputation = cm.pop_imputer_loss()
        if imputation is not None:
            loss = loss + self.lambda_di * imputation
        extra = self.distill(DualTerms(c_logp, s_logp, table_of(c_views), table_of(s_views)), state, rnd)
        for value in extra.values():
            loss = loss + value
        return loss, {k: v.detach() for k, v in extra.items()}  # tensors: reading them would sync the device

    # ---------------------------------------------------------------- hooks
    def client_update(self, client: KGClientData, state: dict, received: Payload, rnd: int) -> Payload:
        cm, sm = self._load(client, state, received)
        opt = self.dual_optimizer(cm, sm, state)
        gen = self.batch_generator(client, rnd)
        trace = state.setdefault("trace", [])  # per round: the terms at its first batch (in the client's state)
        first = [True]

        def loss_fn(batch: Tensor) -> Tensor:
            loss, terms = self.batch_loss(client, cm, sm, batch, gen, state, rnd)
            if first[0]:  # the distillation terms of the round's first batch (a trace for tests and figures)
                trace.append({k: float(v) for k, v in terms.items()})
                first[0] = False
            return loss

        cm.train()
        sm.train()
        batches = shuffled_batches(self.ctx.task.train_queries(client), self.task_cfg.batch_size, gen)
        LocalLoop.from_train(self.ctx.run.train).run(loss_fn, opt, opt.param_groups[0]["params"], cid=client.cid,
                                                     batches=batches)
        self.after_round(client, cm, sm, state, rnd)
        return {**sm.shared_payload(), "num_train": torch.tensor([float(client.num_train)], device=sm.entity.device)}

    def after_round(self, client: KGClientData, cm: KGEClient, sm: KGEClient, state: dict, rnd: int) -> None:
        """Called after the round's local training (MMFedLU's gating reads validation here)."""

    def evaluate(self, client: KGClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        """The client view on val/test (also under ``val_client`` / ``test_client``); the
        server view (global parameters received, local relations) under ``val_server`` /
        ``test_server``, so FL rows can be compared on either view."""
        cm, sm = self._load(client, state, received)
        out = self.ctx.task.evaluate(cm, client)
        server = self.ctx.task.evaluate(sm, client)
        out["val_server"], out["test_server"] = server["val"], server["test"]
        out["val_client"], out["test_client"] = out["val"], out["test"]
        return out


@ALGORITHMS.register("mmfedlu")
class MMFedLU(DualViewKG):
    """MMFedLU: persistent local model + global copy; L_KGC + L^{s,c}_KGC + mu KL(p^c || p^{s,c}) (seed's plain objective; FedLU's validation gating optional).

    Plain objective (default, the seed's baseline): ``mu * KL(p^c || p^{s,c})`` minimized
    w.r.t. both views (no stop-gradient: the seed writes one KL term of the joint objective),
    so knowledge flows both ways through one term.

    ``gating: true`` follows the FedLU code instead: two directed, teacher-detached terms,
    global->local ``KL(p^{s,c} || p^c)`` (trains the client view) switched on for good once
    ``round >= wait_rounds`` or validation stalls, and local->global ``KL(p^c || p^{s,c})``
    (trains the server view) on while validation stalls. Stall: the client view's MRR on the
    client's own validation split did not improve at the last round. FedLU measures the
    stall on the federation-weighted validation MRR; a client here sees only its own, which
    needs no extra communication.
    """

    @dataclass
    class Config(DualViewKG.Config):
        mu: float = field(default=0.01, metadata={"help": "weight of the logit distillation (FedLU code's dist_mu 1e-2; the seed gives none)", "min": 0, "tune": {"low": 1e-3, "high": 1.0, "log": True}})
        gating: bool = field(default=False, metadata={"help": "FedLU's validation-gated directed distillation instead of the seed's plain KL term"})
        wait_rounds: int = field(default=10, metadata={"help": "gating: round from which global->local distillation is always on (FedLU wait_iter)", "min": 0, "max": 1_000_000})

    def distill(self, terms: DualTerms, state: dict, rnd: int) -> dict[str, Tensor]:
        mu = float(self.cfg.mu)
        if not self.cfg.gating:
            return {"kl": mu * distill_kl(terms.logp_client, terms.logp_server, detach_teacher=False)}
        out: dict[str, Tensor] = {}
        stalled = state.get("bad", 0) > 0
        if stalled or rnd >= self.cfg.wait_rounds:
            state["g2l"] = True
        if state.get("g2l", False):
            out["kl_g2l"] = mu * distill_kl(terms.logp_server, terms.logp_client)
        if stalled:
            out["kl_l2g"] = mu * distill_kl(terms.logp_client, terms.logp_server)
        return out

    def after_round(self, client: KGClientData, cm: KGEClient, sm: KGEClient, state: dict, rnd: int) -> None:
        """Gating: score the client view on the client's validation split; count stalls."""
        if not self.cfg.gating:
            return
        mrr = self.ctx.task.evaluate(cm, client)["val"]["mrr"]
        if mrr > state.get("best_val", -1.0):
            state["best_val"], state["bad"] = mrr, 0
        else:
            state["bad"] = state.get("bad", 0) + 1
