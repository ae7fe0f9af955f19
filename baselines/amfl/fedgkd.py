"""FedGKD* for AMFL (FedMBridge Appendix B.1.2; Yao et al., 2023): clients distill locally
from an ensemble of historical models kept in a server buffer.

Original FedGKD keeps the last few *global* models as teachers of local training. AMFL has
no global model, so, as the appendix adjusts it:

* Buffer: each round the server adds s = 10 of the round's uploaded client models (all of
  them when fewer; drawn at random), each with its round and client id, and drops those
  from rounds before r - 3.
* Teachers: every client has a memory budget of s' in [4, 8] teachers (drawn once from its
  own seeded stream and sent at setup, the "request"); the server sends it s' models drawn
  from the buffer (architecture and weights), never its own.
* Local KD: the client trains cross-entropy plus beta = 0.1 times the distillation loss on
  each mini-batch, so the KD gradient enters with step size beta.

The public set (the "*"): the appendix says FedGKD needs none (KD on the local data), while
section 5.1 says both FedDistill and FedGKD "employ a public dataset" and Table 2 stars
FedGKD* for privacy risk. We follow both: the public set is gathered exactly as FedDistill*
gathers it (rho = 5% of the rows of rho = 5% of each modality group's clients, uploaded with
a client's first upload and recorded as declared disclosures), sent with the teachers, and
distilled on together with the batch's own rows; ``public_set: false`` gives the
appendix-only variant (no disclosure).

Paper silent, our choices (as FedDistill*): personal label spaces make logits incomparable,
so the target is the teachers' mean trunk output (matched by mean squared error), and a
teacher meets rows lacking some of its modalities with zeros there. A client keeps its own
model across rounds (nothing overwrites it: FedGKD has no model download besides teachers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from benchmark.amfl.model import AMFLNet
from benchmark.comm import Payload, disclosed
from benchmark.registry import ALGORITHMS
from benchmark.seeding import text_seed
from baselines.amfl.common import (PUBLIC_PREFIX, AMFLAlgorithm, collect_public, imputed, load_weights,
                                   mean_embedding, public_part, public_requests, public_upload, weights_payload)
from baselines.amfl.supernet import SPEC_KEY, model_from_payload, spec_payload

BUDGET_KEY = "teachers.budget"


@dataclass
class FedGKDConfig:
    """Appendix B.1.2's values by default."""

    rho: float = field(default=0.05, metadata={"help": "share of clients per modality group asked for public rows, "
                                                       "and share of their training rows sent", "probability": True})
    buffer_per_round: int = field(default=10, metadata={"help": "uploaded models s added to the server buffer each "
                                                                "round", "min": 1, "max": 100_000})
    memory_rounds: int = field(default=3, metadata={"help": "models from rounds before r - memory_rounds leave the "
                                                            "buffer", "min": 0, "max": 1_000_000})
    teachers_min: int = field(default=4, metadata={"help": "smallest client memory budget s' (teachers sent)",
                                                   "min": 1, "max": 100_000})
    teachers_max: int = field(default=8, metadata={"help": "largest client memory budget s' (teachers sent)",
                                                   "min": 1, "max": 100_000})
    beta: float = field(default=0.1, metadata={"help": "weight (step size) of the distillation loss's gradient",
                                               "positive": True})
    public_set: bool = field(default=True, metadata={"help": "also distill on the starred public set (false: only on "
                                                             "local rows, the appendix's variant)"})


@dataclass
class Stored:
    """One buffered teacher: the round and client it came from, and its weights."""

    rnd: int
    cid: int
    weights: Payload


def teacher_payload(k: int, arch: Payload, weights: Payload) -> Payload:
    """Teacher ``k`` as sent: its architecture and weights under ``t<k>.``."""
    return {f"t{k}.{SPEC_KEY}": arch[SPEC_KEY], **{f"t{k}.{n}": t for n, t in weights.items()}}


def teachers_from(received: Payload, feature_dims: dict[str, int], device: torch.device) -> list[AMFLNet]:
    """The teacher models a payload carries (see :func:`teacher_payload`)."""
    out = []
    k = 0
    while f"t{k}.{SPEC_KEY}" in received:
        part = {n[len(f"t{k}."):]: t for n, t in received.items() if n.startswith(f"t{k}.")}
        model = model_from_payload(part, feature_dims).to(device)
        load_weights(model, part)
        out.append(model)
        k += 1
    return out


@ALGORITHMS.register("amfl_fedgkd")
class FedGKD(AMFLAlgorithm):
    """FedGKD* (AMFL): local distillation from buffered historical client models, on local rows and a 5% public set."""

    Config = FedGKDConfig
    has_setup = True
    upload_keys = (r"arch\.spec", r"teachers\.budget", r"w\..+", disclosed(r"public\..+"))

    def init_server(self) -> Payload:
        self.archs: dict[int, Payload] = {}
        self.budgets: dict[int, int] = {}
        self.buffer: list[Stored] = []
        self.public: list[dict[str, Tensor]] = []
        return {}

    # ------------------------------------------------------------------ setup
    def setup_upload(self, client, state: dict) -> Payload:
        rng = np.random.default_rng(text_seed(self.ctx.seed, "fedgkd/budget", client.cid))
        budget = int(rng.integers(self.cfg.teachers_min, max(self.cfg.teachers_min, self.cfg.teachers_max) + 1))
        return {**spec_payload(client), BUDGET_KEY: torch.tensor([budget])}

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        self.archs = {cid: {SPEC_KEY: up[SPEC_KEY]} for cid, up in uploads.items()}
        self.budgets = {cid: int(up[BUDGET_KEY][0]) for cid, up in uploads.items()}
        if not self.cfg.public_set:
            return {cid: {} for cid in uploads}
        return public_requests(self.archs, self.ctx.feature_dims, self.cfg.rho,
                               text_seed(self.ctx.seed, "fedgkd/public"))

    def setup_receive(self, client, state: dict, payload: Payload) -> None:
        state["public_request"] = bool(payload.get(PUBLIC_PREFIX + "request", torch.tensor([False])).item())

    # ------------------------------------------------------------------ rounds
    def _kd_term(self, model: AMFLNet, client, received: Payload):
        """``idx -> beta * KD loss`` on those rows (and the public rows), or None without teachers."""
        teachers = teachers_from(received, self.ctx.feature_dims, self.ctx.device)
        if not teachers:
            return None
        dims, dev = self.ctx.feature_dims, self.ctx.device
        target_own = mean_embedding(teachers, [client.features], dims, dev)
        pub = public_part(received)
        x_pub = {m: pub[m] for m in model.spec.modalities} if pub else None
        target_pub = mean_embedding(teachers, [pub], dims, dev) if pub else None

        def term(idx: Tensor) -> Tensor:
            student = model.embed(client.rows(idx))
            target = target_own[idx]
            if x_pub is not None:
                student = torch.cat([student, model.embed(x_pub)])
                target = torch.cat([target, target_pub])
            return self.cfg.beta * F.mse_loss(student, target)

        return term

    def client_update(self, client, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(client, state)
        self.local_train(model, opt, client, rnd, extra=self._kd_term(model, client, received))
        up: Payload = weights_payload(model)
        if state.pop("public_request", False):
            up.update(public_upload(client, self.cfg.rho, text_seed(self.ctx.seed, "fedgkd/rows", client.cid)))
        return up

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        collect_public(self.public, uploads)
        rng = np.random.default_rng(text_seed(self.ctx.seed, "fedgkd/buffer", rnd))
        ids = sorted(uploads)
        chosen = sorted(rng.choice(ids, size=min(self.cfg.buffer_per_round, len(ids)), replace=False).tolist())
        self.buffer = [s for s in self.buffer if s.rnd >= rnd - self.cfg.memory_rounds]
        self.buffer += [Stored(rnd, cid, {k: t for k, t in uploads[cid].items() if k.startswith("w.")})
                        for cid in chosen]
        public = (imputed(self.public, list(self.ctx.feature_dims), self.ctx.feature_dims, self.ctx.device)
                  if self.public else {})
        return {cid: self._send(cid, rnd, public) for cid in self.ctx.client_ids}

    def _send(self, cid: int, rnd: int, public: dict[str, Tensor]) -> Payload:
        """Client ``cid``'s teachers (its budget's worth, drawn from the others' buffered
        models) and the public set."""
        pool = [s for s in self.buffer if s.cid != cid]
        rng = np.random.default_rng(text_seed(self.ctx.seed, "fedgkd/teachers", rnd, cid))
        pick = sorted(rng.choice(len(pool), size=min(self.budgets[cid], len(pool)), replace=False).tolist())
        out: Payload = {}
        for k, i in enumerate(pick):
            out.update(teacher_payload(k, self.archs[pool[i].cid], pool[i].weights))
        if out:
            out.update({PUBLIC_PREFIX + m: x for m, x in public.items()})
        return out
