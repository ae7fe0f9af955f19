"""The Algorithm contract's two halves are separable: a client side built without any server
object runs every client hook, for every registered algorithm, and keeps no memory of its own.

The algorithms come from the registry, so a new one is covered without editing this file.
A client hook that reads server state (``self.global_model`` set by ``init_server``) fails
here with an AttributeError; one that remembers something on ``self`` instead of in its
``state`` dict fails the no-memory check, because a Flower ``ClientApp`` builds the client
side afresh for every message and such a memory would be lost there.
"""

from __future__ import annotations

import pytest
import torch

from benchmark import state_codec
from benchmark.engine import Engine
from benchmark.registry import ALGORITHMS, load_plugins
from benchmark.roles import ClientSide, ServerSide
from small_configs import tiny_config

load_plugins()


def _fingerprint(obj: object) -> bytes:
    """Everything an instance holds, serialized: equal bytes, equal contents."""
    return state_codec.pack(vars(obj))


@pytest.mark.parametrize("algo", ALGORITHMS.names())
def test_client_side_runs_without_a_server_object_and_keeps_no_memory(algo, tmp_path_factory):
    cls = ALGORITHMS.get(algo)
    cfg = tiny_config(algo, cls.tasks[0], tmp_path_factory.getbasetemp() / "roles_cache")
    engine = Engine(cfg)
    ctx = engine._context()
    client_side = ClientSide(engine.algo_cls, engine.algo_cfg, ctx)  # no server exists yet
    before = _fingerprint(client_side.algo)
    server = ServerSide(engine.algo_cls, engine.algo_cfg, ctx)
    broadcast = server.init_server()
    server_only = set(vars(server.algo)) - set(vars(client_side.algo))
    trainers = engine.train_clients
    states: dict[int, dict] = {c.cid: {} for c in trainers}
    if cls.has_setup:
        ups = {c.cid: client_side.setup_upload(c, states[c.cid]) for c in trainers}
        replies = server.setup_aggregate(ups)
        for c in trainers:
            client_side.setup_receive(c, states[c.cid], replies[c.cid])
    for rnd in range(2):
        ups = {c.cid: client_side.client_update(c, states[c.cid], Engine._for_client(broadcast, c.cid), rnd)
               for c in trainers}
        broadcast = server.aggregate(ups, rnd)
        for c in engine.clients:
            cid = -1 if cls.centralized else c.cid
            scores = client_side.evaluate(c, states[cid], Engine._for_client(broadcast, cid), rnd)
            assert {"val", "test"} <= set(scores)
    assert not server_only & set(vars(client_side.algo)), "the client side holds server state"
    assert _fingerprint(client_side.algo) == before, (
        f"{algo}: a client hook changed the client-side instance; keep per-client memory in `state`")


def test_a_client_hook_that_reads_server_state_is_caught(tmp_path_factory):
    """The check above can fail: a client side built alone has no ``global_model``."""
    from baselines.basic.fedavg import FedAvg

    class Leaky(FedAvg):
        def evaluate(self, client, state, received):  # noqa: ANN001, ANN201
            return self.ctx.task.evaluate(self.global_model, client)

    cfg = tiny_config("fedavg", "node_cls", tmp_path_factory.getbasetemp() / "roles_cache")
    engine = Engine(cfg)
    side = ClientSide(Leaky, engine.algo_cfg, engine._context())
    with pytest.raises(AttributeError, match="global_model"):
        side.evaluate(engine.clients[0], {}, {}, 0)


def test_a_client_hook_that_remembers_on_self_is_caught(tmp_path_factory):
    from baselines.basic.fedavg import FedAvg

    class Remembers(FedAvg):
        def client_update(self, client, state, received, rnd):  # noqa: ANN001, ANN201
            self.seen = getattr(self, "seen", 0) + 1
            return super().client_update(client, state, received, rnd)

    cfg = tiny_config("fedavg", "node_cls", tmp_path_factory.getbasetemp() / "roles_cache")
    engine = Engine(cfg)
    ctx = engine._context()
    side = ClientSide(Remembers, engine.algo_cfg, ctx)
    before = _fingerprint(side.algo)
    broadcast = ServerSide(Remembers, engine.algo_cfg, ctx).init_server()
    side.client_update(engine.clients[0], {}, broadcast, 0)
    assert _fingerprint(side.algo) != before
