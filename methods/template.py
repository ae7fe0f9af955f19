"""Submission template: a short, complete federated method. Copy this file to start your own.

Trust: ``submit`` imports the submitted file, which runs all of its code as a normal Python
import, with the privileges of the user who runs ``submit`` (it can read, write or delete
anything that user can). Submit only files you trust, and read a file from someone else first.

Submit it (checks, a smoke cell, the suites you name, then the leaderboard)::

    python run_benchmark.py submit methods/template.py --suite demo --scale tiny

What ``submit`` checks, in order, each failure being one line on stderr and exit code 2:

1. the file registers exactly one algorithm (``@ALGORITHMS.register("name")`` below); the
   ``methods`` package import skips this file, so it registers only when submitted;
2. the class fulfils the Algorithm contract (benchmark/algorithm.py): the four hooks
   ``init_server``, ``client_update``, ``aggregate``, ``evaluate``; a docstring; ``tasks``;
   ``upload_keys`` declaring every upload name as a regex; a ``Config`` dataclass (or None);
3. a two-round smoke cell on the tiny synthetic graph with missing modalities runs, and the
   ledger audit finds no raw client data (feature rows, labels, edges) in any upload;
4. every cell of each ``--suite`` runs with this method in place of the suite's algorithms.

Rules of the game: a client sees only its own ``ClientData``; ``state`` is that client's
private memory across rounds; everything sent is a flat ``dict[str, Tensor]`` that passes
through the ledger (bytes per round appear on the leaderboard).

An AMFL method (task ``amfl_cls``, every client with its own architecture) subclasses
``baselines.amfl.common.AMFLAlgorithm`` instead: ``client_model(client, state)`` builds the
client's own model from ``client.arch``, ``local_train(model, opt, client, rnd)`` trains it
on mini-batches, and the smoke cell comes from the AMFL CI suite (fedmbridge_table2, tiny).
``tests/fixtures/submissions/amfl_group_avg.py`` is a complete example.

This method is FedAvg with a server step size: the server moves the global model a fraction
``server_lr`` of the way towards the clients' size-weighted average (1.0 is plain FedAvg).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmark.algorithm import ModelAlgorithm, load_model_payload, model_payload, weighted_average
from benchmark.comm import Payload
from benchmark.federation import ClientData
from benchmark.registry import ALGORITHMS


@dataclass
class TemplateConfig:
    """Hyperparameters, settable from YAML as ``algorithm.server_lr: 0.5``."""

    # Constraints sit beside the default (benchmark/options.py): here 0 < server_lr <= 2.
    # A __post_init__ is only needed for rules that tie several options together.
    server_lr: float = field(default=1.0, metadata={"help": "server step towards the client average (1 = FedAvg)",
                                                    "positive": True, "max": 2.0})


@ALGORITHMS.register("template")
class Template(ModelAlgorithm):
    """Template: FedAvg with a server step size (the submission example in methods/template.py)."""

    Config = TemplateConfig
    tasks = ("node_cls",)                              # tasks this method is defined for
    upload_keys = (r"model\..+", "num_examples")       # every upload name, as regexes (audited)

    def init_server(self) -> Payload:
        """The server's model; its parameters are the first broadcast (one payload for all)."""
        self.global_model = self.build_model()
        return model_payload(self.global_model)

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        """Start from the global model, train locally, send back parameters and the sample count."""
        model, opt = self.client_model(state)          # this client's model and Adam, kept across rounds
        load_model_payload(model, received)
        self.local_train(model, opt, client)
        return {**model_payload(model), "num_examples": self.num_examples(client)}

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Payload:
        """Size-weighted average of the uploads, then a step of ``server_lr`` towards it."""
        ups = list(uploads.values())
        keys = [k for k in ups[0] if k.startswith("model.")]
        avg = weighted_average(ups, [float(u["num_examples"]) for u in ups], keys)
        old = model_payload(self.global_model)
        step = self.cfg.server_lr
        new = {k: old[k] + step * (avg[k] - old[k]) if old[k].dtype.is_floating_point else avg[k] for k in keys}
        load_model_payload(self.global_model, new)
        return new

    def evaluate(self, client: ClientData, state: dict, received: Payload) -> dict[str, dict[str, float]]:
        """The global model on this client's splits (a personalized method would use ``state``).

        Client side: there is no ``self.global_model`` here (that is the server's, built by
        ``init_server``), so the model is rebuilt from the broadcast this client received."""
        return self.ctx.task.evaluate(self.received_model(received), client)
