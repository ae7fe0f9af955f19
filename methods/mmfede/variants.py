"""MMFedProx and MMFedEC: the seed paper's FL baselines derived from the MMFedE backbone
(docs/algorithms.md, KG track; seed App. C.A). Both keep MMFedE's payloads, server and
evaluation and only add a term to the client's local loss, so their differences from
MMFedE measure that term alone.

Which rows the terms act on: the structural entity rows S^c, the part of the entity
vector that the server aggregates. The seed writes both terms with the imputed fused
embedding E^c-hat; MMFedE has no imputer, and its fused vector differs from S^c only by
the (shared, |T^c|-averaged) projections and fusion, so anchoring S^c is the choice that
constrains exactly what drifts between clients.

Logging: ``state["reg_trace"]`` (the client's own state) holds, per round it trained, the term's value at the
round's first batch (before any local step), so tests and diagnostics can check e.g. that
the proximal term starts every round at zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import Tensor

from baselines.kg.common import KGAlgorithm
from baselines.kg.kge_client import KGEClient, Regularizer
from benchmark.kg_client import KGClientData
from benchmark.registry import ALGORITHMS
from methods.mmfede.mmfede import MMFedE


class _TracedMMFedE(MMFedE):
    """MMFedE with a per-round local-loss term whose first value per round is recorded."""

    def _traced(self, state: dict, term: Regularizer) -> Regularizer:
        """Wrap ``term`` so that its first evaluation this round is appended to the client's
        trace (in its state: a client side keeps no memory of its own)."""
        first = [True]
        trace = state.setdefault("reg_trace", [])

        def wrapped(model: KGEClient, client: KGClientData) -> Tensor:
            value = term(model, client)
            if first[0]:
                trace.append(float(value.detach()))
                first[0] = False
            return value

        return wrapped


@ALGORITHMS.register("mmfedprox")
class MMFedProx(_TracedMMFedE):
    """MMFedProx: MMFedE + mu * mean_e ||S^s_e - S^c_e||^2, a proximal pull of the local entity rows to the round's global rows."""

    @dataclass
    class Config(KGAlgorithm.Config):
        mu: float = field(default=0.01, metadata={"help": "weight of the proximal term (the seed gives none; FedProx's usual 0.01)", "min": 0, "tune": {"low": 1e-4, "high": 1.0, "log": True}})

    def regularizer(self, client: KGClientData, model: KGEClient, state: dict, rnd: int) -> Regularizer | None:
        """Anchor = the global rows just loaded. Mean over entities (squared row norm), so
        mu does not scale with the client's entity count."""
        anchor = model.entity.detach().clone()
        mu = float(self.cfg.mu)

        def prox(m: KGEClient, c: KGClientData) -> Tensor:
            return mu * (m.entity - anchor).pow(2).sum(dim=1).mean()

        return self._traced(state, prox)


@ALGORITHMS.register("mmfedec")
class MMFedEC(_TracedMMFedE):
    """MMFedEC: MMFedE + FedEC's contrastive term, pulling local entity rows toward the global rows and away from last round's local ones."""

    @dataclass
    class Config(KGAlgorithm.Config):
        mu: float = field(default=0.1, metadata={"help": "weight of the contrastive term (FedLU repo: 0.1)", "min": 0, "tune": {"low": 1e-3, "high": 1.0, "log": True}})
        tau: float = field(default=0.2, metadata={"help": "temperature of the contrastive term (FedLU repo: 0.2)", "positive": True})

    def regularizer(self, client: KGClientData, model: KGEClient, state: dict, rnd: int) -> Regularizer | None:
        """``mu * -log(e^{s_g/tau} / (e^{s_g/tau} + e^{s_l/tau}))`` = ``mu * softplus((s_l - s_g)/tau)``,
        s_g = mean cos(S^c, S^s frozen), s_l = mean cos(S^c, S^c of the previous round).
        A client's first round has no previous local rows: the global ones stand in, which
        makes the term the constant mu*log 2 with zero gradient (no pull either way)."""
        glob = model.entity.detach().clone()
        prev = state.get("prev_entity", glob)
        mu, tau = float(self.cfg.mu), float(self.cfg.tau)

        def contrastive(m: KGEClient, c: KGClientData) -> Tensor:
            s_g = F.cosine_similarity(m.entity, glob, dim=1).mean()
            s_l = F.cosine_similarity(m.entity, prev, dim=1).mean()
            return mu * F.softplus((s_l - s_g) / tau)

        return self._traced(state, contrastive)

    def after_local_train(self, client: KGClientData, model: KGEClient, state: dict, rnd: int) -> None:
        """Keep this round's local rows as next round's negative anchor (never uploaded)."""
        state["prev_entity"] = model.entity.detach().clone()
