"""One KG client's model (structural rows, relation decoder, optional modality projections, fusion
and imputer) and the seeds and bounds it is built with; shared by the KG algorithms
(baselines/kg/common.py) and the split paradigm (baselines/kg/split.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from baselines.kg.fusions import build_fusion, fusion_payload
from baselines.kg.imputers import ImputerOptions, KGImputer, build_imputer, hyper_modal, split_blocks
from benchmark.comm import Payload
from benchmark.kg_client import KGClientData
from benchmark.kge import build_decoder
from benchmark.seeding import fnv_seed

# the split paradigm is a model (one decoder per modality), not a KG_FUSIONS entry
SPLIT = "split"


# a local-loss term: (model, client) -> scalar added to every batch's KGE loss
Regularizer = Callable[["KGEClient", KGClientData], Tensor]


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
            self.fusion = build_fusion(fusion, self.entity.shape[1], list(feature_dims), fnv_seed(seed, 29))
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


def init_projections(proj: nn.ModuleDict, embedding_range: float, gen: torch.Generator) -> None:
    """Uniform weights in ``+-range / sqrt(d_in)``, zero bias: a projected (unit-RMS) feature
    then starts on the scale of the structural rows (uniform in ``+-range``), so neither
    part swamps the other at the start of training."""
    with torch.no_grad():
        for lin in proj.values():
            a = embedding_range / lin.weight.shape[1] ** 0.5
            lin.weight.copy_(torch.empty_like(lin.weight).uniform_(-a, a, generator=gen))
            lin.bias.zero_()
