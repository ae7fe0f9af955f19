"""The two halves of an algorithm: a server side and a client side that share no object.

An ``Algorithm`` subclass still defines every hook in one class (one file per method), but
the engine never calls server and client hooks on the same instance:

* :class:`ServerSide` owns one instance and exposes only ``init_server``,
  ``setup_aggregate`` and ``aggregate``;
* :class:`ClientSide` owns *another* instance, built from the same config and metadata
  under the same seed, on which ``init_server`` never ran, and exposes only
  ``setup_upload``, ``setup_receive``, ``client_update`` and ``evaluate``.

So a client hook that reaches for server state (``self.global_model`` set by
``init_server``) fails at once, in process as under Flower. A client side keeps no memory
of its own between calls: everything a client remembers lives in its ``state`` dict, which
the in-process engine keeps in memory and a Flower ``ClientApp`` keeps in its context.

Every hook call runs under its own seed, derived from the run seed, the role, the client
and the round (:func:`benchmark.seeding.seed_hook`), so a client draws the same random numbers whether it
runs in this process, in a Ray worker or on another machine, and in whatever order the
clients of a round run.

Every hook's result is checked where it crosses to the engine (:mod:`benchmark.contracts`:
outer types only), so a hook that returns None or a list is one line naming the class, the
hook and what it must return, not an AttributeError in the ledger.
"""

from __future__ import annotations

import inspect
from typing import Any

from benchmark.algorithm import AlgoContext, Algorithm, Broadcast
from benchmark.comm import Payload
from benchmark.contracts import check_broadcast, check_payload, check_replies, check_scores
from benchmark.federation import ClientData
from benchmark.seeding import seed_hook

SERVER_HOOKS = ("init_server", "setup_aggregate", "aggregate")
CLIENT_HOOKS = ("setup_upload", "setup_receive", "client_update", "evaluate")
CONSTRUCT = "construct"


def _build(algo_cls: type[Algorithm], cfg: Any, ctx: AlgoContext) -> Algorithm:
    seed_hook(ctx.seed, CONSTRUCT)  # both halves construct identically (shared init randomness)
    return algo_cls(cfg, ctx)


class ServerSide:
    """The server half of an algorithm: only the server hooks, each under its own seed."""

    def __init__(self, algo_cls: type[Algorithm], cfg: Any, ctx: AlgoContext) -> None:
        self.algo = _build(algo_cls, cfg, ctx)
        self.seed = ctx.seed

    def init_server(self) -> Broadcast:
        seed_hook(self.seed, "server", "init")
        return check_broadcast(type(self.algo), "init_server", self.algo.init_server())

    def setup_aggregate(self, uploads: dict[int, Payload]) -> dict[int, Payload]:
        seed_hook(self.seed, "server", "setup")
        return check_replies(type(self.algo), "setup_aggregate", self.algo.setup_aggregate(uploads), uploads)

    def aggregate(self, uploads: dict[int, Payload], rnd: int) -> Broadcast:
        seed_hook(self.seed, "server", "aggregate", rnd)
        return check_broadcast(type(self.algo), "aggregate", self.algo.aggregate(uploads, rnd))


class ClientSide:
    """The client half of an algorithm: only the client hooks, each under its own seed.

    One instance may serve every client of a process (it keeps no memory: ``state`` does),
    or be built afresh for each message (a Flower ``ClientApp``); both give the same numbers.
    """

    def __init__(self, algo_cls: type[Algorithm], cfg: Any, ctx: AlgoContext) -> None:
        self.algo = _build(algo_cls, cfg, ctx)
        self.seed = ctx.seed
        self._eval_takes_round = "rnd" in inspect.signature(algo_cls.evaluate).parameters

    def setup_upload(self, client: ClientData, state: dict) -> Payload:
        seed_hook(self.seed, "client", "setup_upload", client.cid)
        return check_payload(type(self.algo), "setup_upload", self.algo.setup_upload(client, state))

    def setup_receive(self, client: ClientData, state: dict, payload: Payload) -> None:
        seed_hook(self.seed, "client", "setup_receive", client.cid)
        self.algo.setup_receive(client, state, payload)

    def client_update(self, client: ClientData, state: dict, received: Payload, rnd: int) -> Payload:
        seed_hook(self.seed, "client", "update", client.cid, rnd)
        return check_payload(type(self.algo), "client_update", self.algo.client_update(client, state, received, rnd))

    def evaluate(self, client: ClientData, state: dict, received: Payload, rnd: int) -> dict[str, dict[str, float]]:
        """Scores after round ``rnd``; an ``evaluate`` that takes ``rnd`` is told the round
        (the message's round, which a client knows without any server object)."""
        seed_hook(self.seed, "client", "evaluate", client.cid, rnd)
        if self._eval_takes_round:
            scores = self.algo.evaluate(client, state, received, rnd=rnd)  # type: ignore[call-arg]
        else:
            scores = self.algo.evaluate(client, state, received)
        return check_scores(type(self.algo), "evaluate", scores)


__all__ = ["CLIENT_HOOKS", "ClientSide", "SERVER_HOOKS", "ServerSide"]
