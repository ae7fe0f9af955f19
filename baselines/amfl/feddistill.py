"""FedDistill* for AMFL (FedMBridge Appendix B.1.2): server-side, client-wise distillation
on a small public set gathered from the clients.

* Public set (the "*": a privacy cost): after the clients' architectures arrive (setup),
  the server asks rho = 5% of the clients of every modality combination (at least one) for
  rho = 5% of their training rows (at least one), features only; each asked client sends
  them with its first upload. Those uploads are declared disclosures: the ledger audit
  records them in every record's ``comm.disclosures`` instead of failing the cell.
* Rounds: sampled clients train locally (cross-entropy) and upload their weights. For each
  of them (the student) the server draws up to s = 10 of the round's other uploads as
  teachers and takes one gradient step of size beta = 0.1 on the distillation loss over the
  public set, then returns the student's weights (kept for the client until it trains again).

Paper silent, our choices: clients have personal label spaces with their own label order,
so the teachers' logits are not comparable with the student's; the distillation target is
therefore the teachers' mean trunk output (the representation before each personal head,
32 wide for every client), matched by mean squared error. A model meets public samples of
other modality combinations with its missing modalities as zeros (as the paper imputes for
APFL). One departure: the distillation gradient is clipped to a global norm of ``clip`` (5)
before the step, as an unclipped step diverged on TikTok graph clients
(``common.distill_grads`` has the numbers); ``clip: 0`` is the paper's plain step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from benchmark.comm import Payload, disclosed
from benchmark.registry import ALGORITHMS
from benchmark.seeding import text_seed
from baselines.amfl.common import (AMFLAlgorithm, collect_public, distill_grads, load_weights, public_requests,
                                   public_upload, weights_payload)
from baselines.amfl.supernet import model_from_payload, spec_payload


@dataclass
class FedDistillConfig:
    """Appendix B.1.2's values by default."""

    rho: float = field(default=0.05, metadata={"help": "share of clients per modality group asked for public rows, "
                                                       "and share of their training rows sent", "probability": True})
    teachers: int = field(default=10, metadata={"help": "teachers s per student", "min": 1, "max": 100_000})
    beta: float = field(default=0.1, metadata={"help": "step size of the distillation gradient", "positive": True})
    clip: float = field(default=5.0, metadata={
        "help": "largest global norm of the distillation gradient before the step (ours, for stability: see "
                "common.distill_grads); 0 = the paper's unclipped step", "min": 0.0})


@ALGORITHMS.register("amfl_feddistill")
class FedDistill(AMFLAlgorithm):
    """FedDistill* (AMFL): server-side client-wise distillation on a public set gathered from 5% of each modality group."""

    Config = FedDistillConfig
    has_setup = True
    upload_keys = (r"arch\.spec", r"w\..+", disclosed(r"public\..+"))

    def init_server(self) -> Payload:
        self.archs: dict[int, Payload] = {}
        self.public: list[dict[str, Tensor]] = []
        self.pending: dict[int, Payload] = {}
        return {}

    # ------------------------------------------------------------------ setup: who gives public rows
    def setup_upload(self, client, state: dict) -> Payload:
        return spec_payload(client)

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        self.archs = dict(uploads)
        return public_requests(uploads, self.ctx.feature_dims, self.cfg.rho,
                               text_seed(self.ctx.seed, "feddistill/public"))

    def setup_receive(self, client, state: dict, payload: Payload) -> None:
        state["public_request"] = bool(payload["public.request"].item())

    # ------------------------------------------------------------------ rounds
    def client_update(self, client, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(client, state)
        if received:
            load_weights(model, received)
        self.local_train(model, opt, client, rnd)
        up: Payload = weights_payload(model)
        if state.pop("public_request", False):
            up.update(public_upload(client, self.cfg.rho, text_seed(self.ctx.seed, "feddistill/rows", client.cid)))
        return up

    def _model(self, cid: int, weights: Payload) -> torch.nn.Module:
        model = model_from_payload(self.archs[cid], self.ctx.feature_dims).to(self.ctx.device)
        load_weights(model, weights)
        return model

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        collect_public(self.public, uploads)
        weights = {cid: {k: t for k, t in up.items() if k.startswith("w.")} for cid, up in uploads.items()}
        rng = np.random.default_rng(text_seed(self.ctx.seed, "feddistill/teachers", rnd))
        for cid in sorted(uploads):
            others = [c for c in sorted(uploads) if c != cid]
            if not self.public or not others:
                self.pending[cid] = weights[cid]
                continue
            teachers = rng.choice(others, size=min(self.cfg.teachers, len(others)), replace=False).tolist()
            student = self._model(cid, weights[cid])
            grads = distill_grads(student, [self._model(t, weights[t]) for t in teachers], self.public,
                                  self.ctx.feature_dims, self.ctx.device, max_norm=self.cfg.clip)
            with torch.no_grad():
                for p, g in zip(student.parameters(), grads):
                    if g is not None:
                        p.sub_(self.cfg.beta * g)
            self.pending[cid] = weights_payload(student)
        return {cid: self.pending.get(cid, {}) for cid in self.ctx.client_ids}

    def evaluate(self, client, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model, _ = self.client_model(client, state)
        if received:
            load_weights(model, received)
        return self.ctx.task.evaluate(model, client)
