"""What the AMFL algorithms share: building a client's own model from its spec, its
persistent Adam state, mini-batch local training through the core loop, weights as
payloads, and the starred methods' public set and distillation target."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from benchmark.algorithm import Algorithm
from benchmark.amfl.client import AMFLClientData
from benchmark.amfl.model import AMFLNet
from benchmark.seeding import text_seed
from benchmark.training import LocalLoop, LoopLog
from baselines.amfl.supernet import model_from_payload


def build_net(client: AMFLClientData, seed: int, device: torch.device) -> AMFLNet:
    """The client's model, initialized from its own seeded stream (the same whatever
    other clients did before), on ``device``."""
    dims = {m: int(x.shape[1]) for m, x in client.features.items()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(text_seed(seed, "amfl/init", client.cid))
        net = AMFLNet(client.arch, dims, client.token_dims, client.num_classes)
    return net.to(device)


#: the clients' optimizers by name: Adam (Table 5) for every AMFL method; the hypernetwork
#: methods may choose SGD (their ``local_optimizer`` option says why)
LOCAL_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


class AMFLAlgorithm(Algorithm):
    """Base of the AMFL algorithms: personalized, defined for ``amfl_cls``."""

    personalized = True
    tasks = ("amfl_cls",)

    def local_optimizer(self) -> str:
        """The clients' optimizer, a ``LOCAL_OPTIMIZERS`` name: the config's ``local_optimizer``
        where the method has one, else Adam."""
        return str(getattr(self.cfg, "local_optimizer", "adam"))

    def client_model(self, client: AMFLClientData, state: dict) -> tuple[AMFLNet, torch.optim.Optimizer]:
        """The client's persistent model and optimizer (docs/algorithms.md: optimizer
        state survives across rounds), created on first use."""
        if "model" not in state:
            model = build_net(client, self.ctx.seed, self.ctx.device)
            train = self.ctx.run.train
            state["model"] = model
            state["opt"] = LOCAL_OPTIMIZERS[self.local_optimizer()](model.parameters(), lr=train.lr,
                                                                    weight_decay=train.weight_decay)
        return state["model"], state["opt"]

    def local_train(self, model: nn.Module, opt: torch.optim.Optimizer, client: AMFLClientData, rnd: int,
                    penalty: Callable[[], Tensor] | None = None,
                    extra: Callable[[Tensor], Tensor] | None = None) -> LoopLog:
        """``train.local_epochs`` epochs of mini-batches of the client's training rows (a
        fresh seeded order per client and round); ``extra(idx)`` adds a per-batch term."""
        model.train()
        gen = torch.Generator(device=client.device).manual_seed(text_seed(self.ctx.seed, "amfl/batches",
                                                                            client.cid, rnd))
        task = self.ctx.task

        def loss(idx: Tensor) -> Tensor:
            value = task.batch_loss(model, client, idx)
            return value if extra is None else value + extra(idx)

        return LocalLoop.from_train(self.ctx.run.train).run(loss, opt, model.parameters(), cid=client.cid,
                                                            batches=task.batches(client, gen), penalty=penalty)

    def evaluate(self, client: AMFLClientData, state: dict, received: dict) -> dict[str, dict[str, float]]:
        """The client's own model on its own splits."""
        model, _ = self.client_model(client, state)
        return self.ctx.task.evaluate(model, client)


# ---------------------------------------------------------------------- weights as payloads
WEIGHT_PREFIX = "w."


def weights_payload(model: nn.Module, prefix: str = WEIGHT_PREFIX) -> dict[str, Tensor]:
    """Detached copies of a model's parameters under ``prefix``."""
    return {prefix + n: p.detach().clone() for n, p in model.named_parameters()}


def load_weights(model: nn.Module, payload: dict[str, Tensor], prefix: str = WEIGHT_PREFIX) -> None:
    """Copy the ``prefix`` entries of a payload into the model, in place (keeps optimizer refs)."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(payload[prefix + n])


# ---------------------------------------------------------------------- the starred public set
# FedDistill* and FedGKD* (Appendix B.1.2) both distill on a small public set gathered from
# the clients before training: rho of the clients of every modality combination send rho of
# their training rows. Uploads carrying it are declared with ``disclosed(r"public\..+")``.
PUBLIC_PREFIX = "public."


def public_requests(archs: dict[int, dict[str, Tensor]], feature_dims: dict[str, int], rho: float,
                    seed: int) -> dict[int, dict[str, Tensor]]:
    """Setup replies: ``public.request`` true for rho of each modality group's clients (at
    least one per group), drawn from ``seed``."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for cid, up in archs.items():
        mods = model_from_payload(up, feature_dims).spec.modalities
        groups.setdefault(tuple(sorted(mods)), []).append(cid)
    rng = np.random.default_rng(seed)
    asked: set[int] = set()
    for key in sorted(groups):
        members = sorted(groups[key])
        k = max(1, math.ceil(rho * len(members)))
        asked |= set(rng.choice(members, size=k, replace=False).tolist())
    return {cid: {PUBLIC_PREFIX + "request": torch.tensor([cid in asked], dtype=torch.bool)} for cid in archs}


def public_upload(client: AMFLClientData, rho: float, seed: int) -> dict[str, Tensor]:
    """rho of the client's training rows (at least one), features only, drawn from ``seed``."""
    rows = client.split_index("train")
    k = max(1, math.ceil(rho * rows.numel()))
    pick = np.sort(np.random.default_rng(seed).choice(rows.numel(), k, replace=False))
    idx = rows[torch.from_numpy(pick).to(rows.device)]
    return {PUBLIC_PREFIX + m: x[idx].clone() for m, x in client.features.items()}


def collect_public(into: list[dict[str, Tensor]], uploads: dict[int, dict[str, Tensor]]) -> None:
    """Append the public rows the round's uploads carry to the server's set (client order)."""
    for cid in sorted(uploads):
        part = public_part(uploads[cid])
        if part:
            into.append(part)


def public_part(upload: dict[str, Tensor]) -> dict[str, Tensor]:
    """The public rows of an upload by modality (empty when it carries none)."""
    return {k[len(PUBLIC_PREFIX):]: t for k, t in upload.items()
            if k.startswith(PUBLIC_PREFIX) and k != PUBLIC_PREFIX + "request"}


def imputed(parts: list[dict[str, Tensor]], modalities: tuple[str, ...] | list[str], feature_dims: dict[str, int],
            device: torch.device) -> dict[str, Tensor]:
    """The rows of ``parts`` (each modality -> [n, d_m]) stacked as a model of ``modalities``
    sees them: a modality a part lacks is zeros (the paper's imputation)."""
    out = {}
    for m in modalities:
        out[m] = torch.cat([p[m] if m in p else torch.zeros(next(iter(p.values())).shape[0], feature_dims[m],
                                                              device=device) for p in parts])
    return out


def mean_embedding(teachers: list[AMFLNet], parts: list[dict[str, Tensor]], feature_dims: dict[str, int],
                   device: torch.device) -> Tensor:
    """The teachers' mean trunk output on the rows of ``parts`` (each teacher sees its own
    modalities, absent ones as zeros): the distillation target of both starred methods,
    whose clients' personal label spaces make logits incomparable."""
    with torch.no_grad():
        return torch.stack([t.eval().embed(imputed(parts, t.spec.modalities, feature_dims, device))
                            for t in teachers]).mean(0)


def distill_grads(student: AMFLNet, teachers: list[AMFLNet], parts: list[dict[str, Tensor]],
                  feature_dims: dict[str, int], device: torch.device, max_norm: float = 0.0) -> list[Tensor | None]:
    """The gradient of the starred methods' server-side distillation loss (mean squared error
    between the student's trunk output and the teachers' mean, on the public rows) for each of
    the student's parameters, in ``parameters()`` order; None where the loss does not reach
    (the personal head: the target is the trunk's output).

    ``max_norm`` > 0 scales the whole gradient down to that global norm when it is larger.
    Appendix B.1.2 takes a plain step of size beta; on TikTok graph clients the gradient's norm,
    mostly 0.1-20, reached 3e3-3e10 in a few steps (amfl_graph, FedDistill*, seed 3), whose
    step sent a client weights of norm 5e5 and its next loss to NaN."""
    x = imputed(parts, student.spec.modalities, feature_dims, device)
    target = mean_embedding(teachers, parts, feature_dims, device)
    loss = torch.nn.functional.mse_loss(student.embed(x), target)
    grads = list(torch.autograd.grad(loss, list(student.parameters()), allow_unused=True))
    if max_norm > 0:
        norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads if g is not None]))
        if norm > max_norm:
            grads = [None if g is None else g * (max_norm / norm) for g in grads]
    return grads
