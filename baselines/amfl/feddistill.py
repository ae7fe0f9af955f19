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
APFL).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from benchmark.comm import Payload, disclosed
from benchmark.registry import ALGORITHMS
from baselines.amfl.common import AMFLAlgorithm, stream_seed
from baselines.amfl.supernet import model_from_payload, spec_payload


@dataclass
class FedDistillConfig:
    """Appendix B.1.2's values by default."""

    rho: float = field(default=0.05, metadata={"help": "share of clients per modality group asked for public rows, "
                                                       "and share of their training rows sent", "probability": True})
    teachers: int = field(default=10, metadata={"help": "teachers s per student", "min": 1})
    beta: float = field(default=0.1, metadata={"help": "step size of the distillation gradient", "positive": True})


def _load(model: torch.nn.Module, payload: Payload) -> None:
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(payload["w." + n])


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
        groups: dict[tuple[str, ...], list[int]] = {}
        for cid, up in uploads.items():
            mods = model_from_payload(up, self.ctx.feature_dims).spec.modalities
            groups.setdefault(tuple(sorted(mods)), []).append(cid)
        rng = np.random.default_rng(stream_seed(self.ctx.seed, "feddistill/public"))
        asked: set[int] = set()
        for key in sorted(groups):
            members = sorted(groups[key])
            k = max(1, math.ceil(self.cfg.rho * len(members)))
            asked |= set(rng.choice(members, size=k, replace=False).tolist())
        return {cid: {"public.request": torch.tensor([cid in asked], dtype=torch.bool)} for cid in uploads}

    def setup_receive(self, client, state: dict, payload: Payload) -> None:
        state["public_request"] = bool(payload["public.request"].item())

    # ------------------------------------------------------------------ rounds
    def client_update(self, client, state: dict, received: Payload, rnd: int) -> Payload:
        model, opt = self.client_model(client, state)
        if received:
            _load(model, received)
        self.local_train(model, opt, client, rnd)
        up: Payload = {"w." + n: p.detach().clone() for n, p in model.named_parameters()}
        if state.pop("public_request", False):
            rows = client.split_index("train")
            k = max(1, math.ceil(self.cfg.rho * rows.numel()))
            pick = np.sort(np.random.default_rng(stream_seed(self.ctx.seed, "feddistill/rows", client.cid))
                           .choice(rows.numel(), k, replace=False))
            idx = rows[torch.from_numpy(pick).to(rows.device)]
            up.update({f"public.{m}": x[idx].clone() for m, x in client.features.items()})
        return up

    def _public_inputs(self, modalities: tuple[str, ...]) -> dict[str, Tensor]:
        """Every public sample as a model of these modalities sees it (absent ones as zeros)."""
        out = {}
        for m in modalities:
            d = self.ctx.feature_dims[m]
            out[m] = torch.cat([p[m] if m in p else torch.zeros(next(iter(p.values())).shape[0], d,
                                                                 device=self.ctx.device) for p in self.public])
        return out

    def _model(self, cid: int, weights: Payload) -> torch.nn.Module:
        model = model_from_payload(self.archs[cid], self.ctx.feature_dims).to(self.ctx.device)
        _load(model, weights)
        return model

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        for cid in sorted(uploads):
            pub = {k[len("public."):]: t for k, t in uploads[cid].items() if k.startswith("public.")}
            if pub:
                self.public.append(pub)
        weights = {cid: {k: t for k, t in up.items() if k.startswith("w.")} for cid, up in uploads.items()}
        rng = np.random.default_rng(stream_seed(self.ctx.seed, "feddistill/teachers", rnd))
        for cid in sorted(uploads):
            others = [c for c in sorted(uploads) if c != cid]
            if not self.public or not others:
                self.pending[cid] = weights[cid]
                continue
            teachers = rng.choice(others, size=min(self.cfg.teachers, len(others)), replace=False).tolist()
            student = self._model(cid, weights[cid])
            x = self._public_inputs(student.spec.modalities)
            with torch.no_grad():
                embeds = []
                for t in teachers:
                    teacher = self._model(t, weights[t]).eval()
                    embeds.append(teacher.embed(self._public_inputs(teacher.spec.modalities)))
                target = torch.stack(embeds).mean(0)
            loss = torch.nn.functional.mse_loss(student.embed(x), target)
            # the personal head is not distilled (the target is the trunk's output): no gradient there
            grads = torch.autograd.grad(loss, list(student.parameters()), allow_unused=True)
            with torch.no_grad():
                for p, g in zip(student.parameters(), grads):
                    if g is not None:
                        p.sub_(self.cfg.beta * g)
            self.pending[cid] = {"w." + n: p.detach().clone() for n, p in student.named_parameters()}
        return {cid: self.pending.get(cid, {}) for cid in self.ctx.client_ids}

    def evaluate(self, client, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        model, _ = self.client_model(client, state)
        if received:
            _load(model, received)
        return self.ctx.task.evaluate(model, client)
