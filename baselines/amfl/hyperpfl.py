"""HyperPFL w/ Prune (pFedHN, Shamsian et al., 2021) over the AMFL supernet (FedMBridge
Appendix B.1.3).

The original hypernetwork serves clients of one architecture; the paper's extension lets it
generate the whole *supernet* (``supernet.py``) from a client's 16-dimensional embedding,
with an MLP of widths [128, 128, 16, 30, *] (* = supernet parameters), and each client
takes its sub-network. Rounds follow pFedHN: the server generates client i's supernet,
sends its slice, the client trains and returns Delta theta_i, and the server updates the
hypernetwork and c_i by the chain rule through the slice (as FedMBridge's server does;
the same optimizer options).

Pruning ("+ Pruning", ``pruning.py``): each round the server prunes every client's
generated slice by structured magnitude pruning (its smallest-norm units, a share set by the
client's network size, ``prune_ratio`` for the largest) and sends the pruned weights with
their supermask (``m.*``); the client trains the pruned network (pruned units stay zero)
and is evaluated on it, and its Delta theta_i is zero on them, so they get no hypernetwork
gradient from it. ``prune_ratio: 0`` is the fixed-slice variant (no mask is sent).

Where this differs from the paper: the paper's clients run the whole supernet (missing
modalities as zeros) pruned down to their own size; here a client keeps its own
architecture, its slice of the supernet (HeteroFL's mask), and pruning removes units
within it. Paper silent: the last hidden layer is normalized (no parameters) and
each generated tensor is scaled by 1/sqrt(fan_in), as FedMBridge's generator does, so both
hypernetworks start from a standard initialization's scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from benchmark.comm import Payload
from benchmark.registry import ALGORITHMS
from benchmark.seeding import text_seed
from baselines.amfl.common import LOCAL_OPTIMIZERS, WEIGHT_PREFIX, AMFLAlgorithm, load_weights
from baselines.amfl.pruning import (MaskedNet, apply_masks, client_ratio, masks_from_payload, masks_payload,
                                    row_masks)
from baselines.amfl.supernet import Supernet, fan_in, spec_payload

OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


@dataclass
class HyperPFLConfig:
    """Hypernetwork and optimizer options (Appendix B.1.3 for the widths)."""

    task_dim: int = field(default=16, metadata={"help": "client embedding size (Appendix B.1.3: 16)", "min": 1, "max": 65_536})
    widths: list[int] = field(default_factory=lambda: [128, 128, 16, 30], metadata={
        "help": "hidden widths of the hypernetwork MLP (Appendix B.1.3)", "min": 1, "max": 65_536})
    server_lr: float = field(default=0.001, metadata={"help": "hypernetwork learning rate", "positive": True})
    server_optimizer: str = field(default="adam", metadata={"help": "sgd or adam on the chain-rule gradient",
                                                            "choices": tuple(OPTIMIZERS)})
    local_optimizer: str = field(default="sgd", metadata={"help": "clients' optimizer: sgd or adam",
                                                          "choices": tuple(LOCAL_OPTIMIZERS)})
    prune_ratio: float = field(default=0.3, metadata={
        "help": "share of units pruned each round in the largest client's network, smaller ones in proportion "
                "to their size (paper: no number; 0 = fixed slice, no pruning)", "probability": True})


class SupernetHN(nn.Module):
    """c_i -> every supernet tensor (flat output cut by the supernet's keys)."""

    def __init__(self, num_clients: int, task_dim: int, widths: list[int], shapes: dict[str, tuple[int, ...]]) -> None:
        super().__init__()
        self.tasks = nn.Embedding(num_clients, task_dim)
        layers: list[nn.Module] = []
        dims = [task_dim, *widths]
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        layers.insert(len(layers) - 1, nn.LayerNorm(dims[-1], elementwise_affine=False))
        self.body = nn.Sequential(*layers)
        self.shapes = dict(shapes)
        total = sum(math.prod(s) for s in shapes.values())
        self.out = nn.Linear(dims[-1], total)
        nn.init.normal_(self.out.weight, std=math.sqrt(2.0 / dims[-1]))
        nn.init.zeros_(self.out.bias)
        scale = [torch.full((math.prod(s),), 1.0 / math.sqrt(max(fan_in(key, self.shapes), 1)))
                 for key, s in self.shapes.items()]
        self.register_buffer("scale", torch.cat(scale))

    def phi(self) -> list[nn.Parameter]:
        return [*self.body.parameters(), *self.out.parameters()]

    def forward(self, index: int) -> dict[str, Tensor]:
        flat = self.out(self.body(self.tasks.weight[index:index + 1]))[0] * self.scale
        out, i = {}, 0
        for key, s in self.shapes.items():
            n = math.prod(s)
            out[key] = flat[i:i + n].view(s)
            i += n
        return out


@ALGORITHMS.register("amfl_hyperpfl")
class HyperPFL(AMFLAlgorithm):
    """HyperPFL w/ Prune (AMFL): a pFedHN hypernetwork generates each supernet; clients train their pruned slice."""

    Config = HyperPFLConfig
    has_setup = True
    upload_keys = (r"arch\.spec", r"d\..+")

    def init_server(self) -> Payload:
        self.index = {cid: i for i, cid in enumerate(self.ctx.client_ids)}
        self.supernet: Supernet | None = None
        return {}


    def setup_upload(self, client, state: dict) -> Payload:
        return spec_payload(client)

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        gen = torch.Generator().manual_seed(text_seed(self.ctx.seed, "hyperpfl/shapes"))
        self.supernet = Supernet.from_uploads(uploads, self.ctx.feature_dims, gen, self.ctx.device)
        c = self.cfg
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(text_seed(self.ctx.seed, "hyperpfl/init"))
            self.hn = SupernetHN(len(self.ctx.client_ids), c.task_dim, list(c.widths),
                                 {k: tuple(t.shape) for k, t in self.supernet.tensors.items()}).to(self.ctx.device)
        sizes = {cid: sum(math.prod(s) for _, s in m.entries.values()) for cid, m in self.supernet.maps.items()}
        self.ratios = {cid: client_ratio(n, max(sizes.values()), c.prune_ratio) for cid, n in sizes.items()}
        self.opt = OPTIMIZERS[c.server_optimizer]([{"params": self.hn.phi()},
                                                  {"params": [self.hn.tasks.weight]}], lr=c.server_lr)
        return {cid: self._slice(cid) for cid in uploads}

    def setup_receive(self, client, state: dict, payload: Payload) -> None:
        state["first"] = payload

    @torch.no_grad()
    def _slice(self, cid: int) -> Payload:
        """Client ``cid``'s generated slice, pruned, with its supermask."""
        assert self.supernet is not None
        theta = self.supernet.extract(cid, self.hn(self.index[cid]))
        masks = row_masks(theta, self.ratios[cid])
        return {**{WEIGHT_PREFIX + n: t for n, t in apply_masks(theta, masks).items()}, **masks_payload(masks)}

    def _net(self, client, state: dict, weights: Payload) -> MaskedNet:
        """The client's model holding ``weights``, run under their supermask."""
        model, _ = self.client_model(client, state)
        load_weights(model, weights)
        return MaskedNet(model, masks_from_payload(weights))

    def client_update(self, client, state: dict, received: Payload, rnd: int) -> Payload:
        weights = received if received else state["first"]
        net = self._net(client, state, weights)
        self.local_train(net, state["opt"], client, rnd)
        return {"d." + n: p.detach() - weights[WEIGHT_PREFIX + n] for n, p in net.weights().items()}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        """Chain rule through each client's slice: phi averaged over the round's clients, c_i its own."""
        assert self.supernet is not None
        self.opt.zero_grad(set_to_none=True)
        n = len(uploads)
        for cid, up in uploads.items():
            theta = self.supernet.extract(cid, self.hn(self.index[cid]))
            surrogate = -sum((theta[k] * up["d." + k]).sum() for k in theta)
            (surrogate / n).backward()
        if self.hn.tasks.weight.grad is not None:
            self.hn.tasks.weight.grad.mul_(n)
        self.opt.step()
        return {cid: self._slice(cid) for cid in self.ctx.client_ids}

    def evaluate(self, client, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        weights = received if received else state.get("first")
        if not weights:
            return self.ctx.task.evaluate(self.client_model(client, state)[0], client)
        return self.ctx.task.evaluate(self._net(client, state, weights), client)
