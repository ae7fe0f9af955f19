"""APFL w/ Prune for AMFL (FedMBridge Appendix B.1.3): a personal mixture of a local model and
the client's pruned slice of a global supernet.

Which APFL: the appendix cites Jeong & Hwang (2022), whose Factorized-FL splits each weight
into rank-1 vectors, yet describes its AMFL adjustment in terms of "both global and local
models of APFL", which is Deng et al.'s (2020) adaptive personalized FL. We implement the
latter: client i keeps a local model v_i and a copy w_i of its global model; each local step
trains w_i on its loss and (v_i, alpha_i) on the loss of the personal model
alpha_i v_i + (1 - alpha_i) w_i (w_i taken as fixed there), alpha_i learned and kept in
[0, 1]; the personal model is what is evaluated.

AMFL adjustments: the global model is the HeteroFL supernet (``supernet.py``), a client's
w_i being its slice; aggregation is guided by the clients' supermasks: each round the server
prunes each client's slice by structured magnitude pruning (``pruning.py``: its
smallest-norm units, a share set by the client's network size) and sends it with the mask;
the client trains the pruned w_i (pruned units stay zero) and uploads it, and every supernet
element becomes the size-weighted mean over the clients that hold and kept it.

Where this differs from the paper: its clients run the whole supernet (missing modalities
as zeros) pruned down to their own size; here a client keeps its own architecture, its
slice, and pruning removes units within it. Paper silent: alpha starts at ``alpha`` (0.5),
v_i starts as the first global slice, and one Adam (the run's lr) trains w_i, v_i and alpha_i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.func import functional_call

from benchmark.comm import Payload
from benchmark.registry import ALGORITHMS
from benchmark.seeding import text_seed
from baselines.amfl.common import WEIGHT_PREFIX, AMFLAlgorithm, build_net, load_weights
from baselines.amfl.pruning import (MaskedNet, apply_masks, client_ratio, masks_from_payload, masks_payload,
                                    row_masks)
from baselines.amfl.supernet import Supernet, spec_payload


@dataclass
class APFLConfig:
    """Mixture and pruning options (the paper gives no values)."""

    alpha: float = field(default=0.5, metadata={"help": "initial weight alpha of the local model in the personal "
                                                        "mixture (learned afterwards)", "probability": True})
    prune_ratio: float = field(default=0.3, metadata={
        "help": "share of units pruned each round in the largest client's global slice, smaller ones in "
                "proportion to their size (0 = HeteroFL's fixed slice)", "probability": True})


class Mixture(nn.Module):
    """The personal model alpha v + (1 - alpha) w: ``local``'s architecture run with mixed
    weights; w (``glob``, under its supermask) enters as a constant."""

    def __init__(self, local: nn.Module, glob: MaskedNet, alpha: nn.Parameter) -> None:
        super().__init__()
        self.local = local
        self.glob = glob
        self.alpha = alpha

    @property
    def uses_edges(self) -> bool:
        return bool(getattr(self.local, "uses_edges", False))

    def forward(self, features: dict[str, Tensor], edge_index: Tensor | None = None) -> Tensor:
        a = self.alpha.clamp(0.0, 1.0)
        w = self.glob.weights()
        mixed = {n: a * v + (1 - a) * w[n].detach() for n, v in self.local.named_parameters()}
        return functional_call(self.local, mixed, (features, edge_index))


@ALGORITHMS.register("amfl_apfl")
class APFL(AMFLAlgorithm):
    """APFL w/ Prune (AMFL): a learned mixture of a local model and the client's pruned slice of a global supernet."""

    Config = APFLConfig
    has_setup = True
    upload_keys = (r"arch\.spec", r"w\..+", "num_examples")

    def init_server(self) -> Payload:
        self.supernet: Supernet | None = None
        self.masks: dict[int, dict[str, Tensor]] = {}
        return {}

    # ------------------------------------------------------------------ server
    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        gen = torch.Generator().manual_seed(text_seed(self.ctx.seed, "apfl/init"))
        self.supernet = Supernet.from_uploads(uploads, self.ctx.feature_dims, gen, self.ctx.device)
        sizes = {cid: sum(math.prod(s) for _, s in m.entries.values()) for cid, m in self.supernet.maps.items()}
        self.ratios = {cid: client_ratio(n, max(sizes.values()), self.cfg.prune_ratio) for cid, n in sizes.items()}
        return {cid: self._slice(cid) for cid in uploads}

    def _slice(self, cid: int) -> Payload:
        """Client ``cid``'s slice, pruned; its supermask is kept to guide the next aggregation."""
        assert self.supernet is not None
        w = self.supernet.extract(cid)
        self.masks[cid] = row_masks(w, self.ratios[cid])
        return {**{WEIGHT_PREFIX + n: t for n, t in apply_masks(w, self.masks[cid]).items()},
                **masks_payload(self.masks[cid])}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> dict[int, Payload]:
        assert self.supernet is not None
        self.supernet.average({cid: {n[len(WEIGHT_PREFIX):]: t for n, t in up.items() if n.startswith(WEIGHT_PREFIX)}
                               for cid, up in uploads.items()},
                              {cid: float(up["num_examples"][0]) for cid, up in uploads.items()},
                              {cid: self.masks[cid] for cid in uploads})
        return {cid: self._slice(cid) for cid in self.ctx.client_ids}

    # ------------------------------------------------------------------ client
    def setup_upload(self, client, state: dict) -> Payload:
        return spec_payload(client)

    def setup_receive(self, client, state: dict, payload: Payload) -> None:
        """w_i and v_i start as the first global slice; one Adam for w_i, v_i and alpha_i."""
        model, _ = self.client_model(client, state)
        local = build_net(client, self.ctx.seed, self.ctx.device)
        load_weights(local, payload)
        alpha = nn.Parameter(torch.tensor(self.cfg.alpha, device=self.ctx.device))
        train = self.ctx.run.train
        state.update(local=local, alpha=alpha, first=payload,
                     opt=torch.optim.Adam([{"params": [*model.parameters(), *local.parameters()]},
                                           {"params": [alpha], "weight_decay": 0.0}],
                                          lr=train.lr, weight_decay=train.weight_decay))

    def _personal(self, client, state: dict, received: Payload) -> Mixture:
        """The personal mixture over w_i = the received (pruned) global slice."""
        model, _ = self.client_model(client, state)
        weights = received if received else state["first"]
        load_weights(model, weights)
        return Mixture(state["local"], MaskedNet(model, masks_from_payload(weights)), state["alpha"])

    def client_update(self, client, state: dict, received: Payload, rnd: int) -> Payload:
        personal = self._personal(client, state, received)
        task = self.ctx.task
        self.local_train(personal, state["opt"], client, rnd,
                         extra=lambda idx: task.batch_loss(personal.glob, client, idx))
        with torch.no_grad():
            state["alpha"].clamp_(0.0, 1.0)
        return {**{WEIGHT_PREFIX + n: t.detach().clone() for n, t in personal.glob.weights().items()},
                "num_examples": torch.tensor([float(client.num_train)], device=self.ctx.device)}

    def evaluate(self, client, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        return self.ctx.task.evaluate(self._personal(client, state, received), client)
