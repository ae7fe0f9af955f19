"""What every AMFL algorithm shares: building a client's own model from its spec, its
persistent Adam state, and mini-batch local training through the core loop."""

from __future__ import annotations

import zlib
from collections.abc import Callable

import torch
from torch import Tensor, nn

from benchmark.algorithm import Algorithm
from benchmark.amfl.client import AMFLClientData
from benchmark.amfl.model import AMFLNet
from benchmark.training import LocalLoop, LoopLog


def stream_seed(seed: int, *parts: object) -> int:
    """A seed for one (run, purpose, client, round...) stream, independent of call order."""
    return zlib.crc32("/".join(map(str, (seed, *parts))).encode()) & 0x7FFFFFFF


def build_net(client: AMFLClientData, seed: int, device: torch.device) -> AMFLNet:
    """The client's model, initialized from its own seeded stream (the same whatever
    other clients did before), on ``device``."""
    dims = {m: int(x.shape[1]) for m, x in client.features.items()}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(stream_seed(seed, "amfl/init", client.cid))
        net = AMFLNet(client.arch, dims, client.token_dims, client.num_classes)
    return net.to(device)


class AMFLAlgorithm(Algorithm):
    """Base of the AMFL algorithms: personalized, defined for ``amfl_cls``."""

    personalized = True
    tasks = ("amfl_cls",)

    def client_model(self, client: AMFLClientData, state: dict) -> tuple[AMFLNet, torch.optim.Optimizer]:
        """The client's persistent model and Adam (rule 0 of ALGORITHMS.md: optimizer state
        survives across rounds), created on first use."""
        if "model" not in state:
            model = build_net(client, self.ctx.seed, self.ctx.device)
            train = self.ctx.run.train
            state["model"] = model
            state["opt"] = torch.optim.Adam(model.parameters(), lr=train.lr, weight_decay=train.weight_decay)
        return state["model"], state["opt"]

    def local_train(self, model: nn.Module, opt: torch.optim.Optimizer, client: AMFLClientData, rnd: int,
                    penalty: Callable[[], Tensor] | None = None,
                    extra: Callable[[Tensor], Tensor] | None = None) -> LoopLog:
        """``train.local_epochs`` epochs of mini-batches of the client's training rows (a
        fresh seeded order per client and round); ``extra(idx)`` adds a per-batch term."""
        model.train()
        gen = torch.Generator(device=client.device).manual_seed(stream_seed(self.ctx.seed, "amfl/batches",
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
