"""Any registered algorithm as a Flower ``ServerApp`` plus ``ClientApp`` (Message API).

Server: the ``ServerApp`` runs the engine's own round loop (``benchmark.engine.Engine``)
with a :class:`FlowerChannel` in place of the in-process clients. The channel asks every
node who it is (one ``query.meta`` message: its client id and the counts the record needs),
then sends one message per sampled client per round, carrying that client's own broadcast
(a personalized algorithm's per-client payload goes only to its client). The engine
records every payload of every message in the ledger, checks every upload, calls
``init_server`` / ``setup_aggregate`` / ``aggregate`` on the server half, and selects and
records exactly as in process.

Client: the ``ClientApp`` holds only its own ``ClientData`` and keeps the client's state in
the Flower context. For each message it builds the client half of the algorithm afresh
(:class:`benchmark.roles.ClientSide`: no server object exists on a node), reads its state,
runs ``client_update`` or ``evaluate``, audits its own upload against its raw data, and
writes the state back. The optional setup exchange is one extra message round
(``train.setup``); its replies ride on each client's next message.

Both ends are built from a :class:`ClientSource` (where a node's data comes from) and a
function that gives the server its config, so the same code serves ``run --backend
flower`` (``benchmark.backends.flower_sim``) and a ``flwr run`` deployment (``deploy/flower``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from benchmark import registry as R
from benchmark.algorithm import AlgoContext, NonFiniteLoss
from benchmark.backends import flower_codec as C
from benchmark.backends.flower_pulls import quick_object_pulls
from benchmark.channel import Channel, Scores, Upload, client_setup_upload, client_train
from benchmark.comm import Payload, RawDataFingerprint
from benchmark.config import RunConfig, build_run_config, component_config
from benchmark.cost import ExchangeTiming
from benchmark.determinism import configure as configure_determinism
from benchmark.errors import BenchmarkError
from benchmark.federation import ClientData, FederationMeta, availability_from_counts, held_counts
from benchmark.precision import apply_matmul_precision
from benchmark.kge.triton_training import select_distance_kernel
from benchmark.roles import ClientSide

if TYPE_CHECKING:
    from benchmark.engine import Engine

#: a node's data: (its ClientData, the dataset's metadata) for a run config and a partition id
ClientSource = Callable[[RunConfig, int], tuple[ClientData, FederationMeta]]
#: receives the finished record (and the ServerApp's context) on the server side
RecordSink = Callable[[dict[str, Any], Context], None]

PARTITION_KEY = "partition-id"
MESSAGE_TIMEOUT_S = 3600.0
NODE_WAIT_S = 120.0
REPLY_POLL_S = 0.05  # how often the ServerApp asks the SuperLink for replies


def _config_json(cfg: RunConfig) -> str:
    return json.dumps(cfg.to_dict(), sort_keys=True)


# =============================================================================== server side
class FlowerChannel(Channel):
    """The engine's clients are Flower nodes; every exchange is one message per client."""

    remote = True

    def __init__(self, grid: Grid, engine: "Engine", num_nodes: int, wait_s: float = NODE_WAIT_S,
                 announce: bool = False) -> None:
        if engine.algo_cls.centralized:
            raise BenchmarkError(f"algorithm '{engine.cfg.algorithm.name}' is a centralized upper bound: it pools "
                                 "every client's data, so it has no federated form to run under Flower")
        self.grid = grid
        self.config = _config_json(engine.cfg)
        self.announce = announce  # a line per round on stdout: what `flwr run --stream` shows
        self.rounds = engine.cfg.train.rounds
        self.device = engine.device
        self.pending: dict[int, Payload] = {}
        self.meta_json: str | None = None  # sent with every message once the nodes have said who they are
        nodes = self._wait_for_nodes(num_nodes, wait_s)
        replies = self._exchange({n: self._message(n, "query.meta", {}) for n in nodes})
        self.node_of: dict[int, int] = {}
        held: dict[int, list[int]] = {}
        sizes: dict[int, int] = {}
        dataset: FederationMeta | None = None
        for node, msg in replies.items():
            ctl = msg.content["fedmm"]
            cid = int(ctl["cid"])  # type: ignore[arg-type]
            if cid in self.node_of:
                raise BenchmarkError(f"two Flower nodes hold client {cid}: give each SuperNode its own {PARTITION_KEY}")
            self.node_of[cid] = node
            held[cid], sizes[cid] = list(ctl["held"]), int(ctl["num_nodes"])  # type: ignore[arg-type]
            dataset = C.meta_from_json(str(ctl["meta"]))
        assert dataset is not None
        ids = sorted(self.node_of)
        self.meta = FederationMeta(
            modalities=dataset.modalities, feature_dims=dataset.feature_dims, num_classes=dataset.num_classes,
            num_global_nodes=dataset.num_global_nodes, client_ids=ids, artifact_hash=dataset.artifact_hash,
            artifact_recipe=dataset.artifact_recipe,
            availability=availability_from_counts(dataset.modalities, [held[c] for c in ids], [sizes[c] for c in ids]))
        self.meta_json = C.meta_to_json(self.meta)
        self.train_ids = self.eval_ids = ids

    # ------------------------------------------------------------------ messaging
    def _wait_for_nodes(self, n: int, wait_s: float) -> list[int]:
        """Every connected node, once at least ``n`` are (each then says which client it holds)."""
        deadline = time.monotonic() + wait_s
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= n:
                return nodes
            if time.monotonic() > deadline:
                raise BenchmarkError(f"only {len(nodes)} of {n} Flower nodes connected within {wait_s:.0f} s: start one "
                                     f"SuperNode per client of the run config (partition.num_clients = {n}), each "
                                     f"with its own {PARTITION_KEY} 0..{n - 1}")
            time.sleep(0.5)

    def _message(self, node: int, kind: str, arrays: dict[str, Payload], rnd: int = -1) -> Message:
        content = RecordDict({"fedmm": C.control(config=self.config, meta=self.meta_json, round=rnd)})
        for key, payload in arrays.items():
            content[key] = C.payload_to_record(payload)
        return Message(content=content, dst_node_id=node, message_type=kind, group_id=str(rnd))

    def _exchange(self, messages: dict[int, Message]) -> dict[int, Message]:
        """Send one message per node and return the replies by node; a client error is a BenchmarkError."""
        replies = self._send_and_receive(list(messages.values()))
        out: dict[int, Message] = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            if reply.has_error():
                raise BenchmarkError(f"Flower node {node} failed: {reply.error.reason}")
            ctl = reply.content["fedmm"]
            if "nonfinite" in ctl:
                raise NonFiniteLoss(str(ctl["nonfinite"]))
            out[node] = reply
        missing = set(messages) - set(out)
        if missing:
            raise BenchmarkError(f"no reply from Flower node(s) {sorted(missing)} within {MESSAGE_TIMEOUT_S:.0f} s")
        return out

    def _send_and_receive(self, messages: list[Message]) -> list[Message]:
        """Flower's ``Grid.send_and_receive``, polling for the replies every ``REPLY_POLL_S``
        instead of every 3 s: on a deployment that sleep was a round's largest cost."""
        waiting = set(self.grid.push_messages(messages))
        deadline = time.monotonic() + MESSAGE_TIMEOUT_S
        replies: list[Message] = []
        while waiting and time.monotonic() < deadline:
            got = list(self.grid.pull_messages(waiting))
            replies.extend(got)
            waiting.difference_update(m.metadata.reply_to_message_id for m in got)
            if waiting:
                time.sleep(REPLY_POLL_S)
        return replies

    def _messages(self, kind: str, sends: dict[int, Payload], rnd: int) -> dict[int, Message]:
        """One encoded message per client (with a pending setup reply)."""
        msgs = {}
        for cid, payload in sends.items():
            arrays = {"payload": payload}
            if cid in self.pending:
                arrays["setup_reply"] = self.pending.pop(cid)
            msgs[cid] = self._message(self.node_of[cid], kind, arrays, rnd)
        return msgs

    def _deliver(self, msgs: dict[int, Message]) -> dict[int, Message]:
        """Send the messages and return each client's reply."""
        by_node = self._exchange({m.metadata.dst_node_id: m for m in msgs.values()})
        return {cid: by_node[self.node_of[cid]] for cid in msgs}

    def _send(self, kind: str, sends: dict[int, Payload], rnd: int) -> dict[int, Message]:
        return self._deliver(self._messages(kind, sends, rnd))

    def _upload(self, msg: Message) -> Upload:
        findings = msg.content["fedmm"].get("findings", [])
        return Upload(C.record_to_payload(msg.content["payload"], self.device), [str(f) for f in findings])  # type: ignore[arg-type, union-attr]

    # ------------------------------------------------------------------ Channel
    def setup_uploads(self, cids: list[int]) -> dict[int, Upload]:
        replies = self._send("train.setup", {cid: {} for cid in cids}, -1)
        return {cid: self._upload(m) for cid, m in replies.items()}

    def setup_replies(self, replies: dict[int, Payload]) -> None:
        self.pending.update(replies)  # delivered with each client's next message

    def train(self, rnd: int, sends: dict[int, Payload]) -> dict[int, Upload]:
        """One message per client; the encoding and decoding are timed apart from the wait for
        the replies (which holds the clients' compute and the messages' transfer)."""
        start = time.perf_counter()
        msgs = self._messages("train", sends, rnd)
        encoded = time.perf_counter()
        replies = self._deliver(msgs)
        received = time.perf_counter()
        ups = {cid: self._upload(m) for cid, m in replies.items()}
        self.last_exchange = ExchangeTiming(encode_s=encoded - start, decode_s=time.perf_counter() - received,
                                            client_s=received - encoded)
        if self.announce:
            print(f"fedmm: round {rnd + 1}/{self.rounds}: {len(ups)} clients trained in "
                  f"{time.perf_counter() - start:.1f} s", flush=True)
        return ups

    def evaluate_announced(self, rnd: int, scores: dict[int, Scores]) -> None:
        if self.announce:
            print(f"fedmm: round {rnd + 1}/{self.rounds}: evaluated on {len(scores)} clients", flush=True)

    def evaluate(self, rnd: int, sends: dict[int, Payload]) -> dict[int, Scores]:
        scores = {cid: C.record_to_scores(m.content["scores"]) for cid, m in self._send("evaluate", sends, rnd).items()}  # type: ignore[arg-type]
        self.evaluate_announced(rnd, scores)
        return scores


def make_server_app(config: Callable[[Context], RunConfig], sink: RecordSink, num_nodes: Callable[[Context], int],
                    progress: bool = False, backend: str = "flower-simulation") -> ServerApp:
    """A ServerApp that runs one cell of ``config(context)`` and hands its record to ``sink``,
    named by ``backend`` (``flower-simulation`` or ``flower-deployment``). A run that raises
    still hands over a failed record with the reason, then raises, so Flower marks it failed
    and a caller reading the sink learns why."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        from benchmark.engine import Engine
        from benchmark.record import failed_record
        from benchmark.results import now_iso

        quick_object_pulls()
        cfg: RunConfig | None = None
        try:
            cfg = config(context)
            n = num_nodes(context)
            announce = backend == "flower-deployment"
            engine = Engine(cfg, channel=lambda eng: FlowerChannel(grid, eng, n, announce=announce), progress=progress)
            record = engine.run(resume=False)
        except Exception as e:
            failed = failed_record(cfg.seed if cfg is not None else 0, f"{type(e).__name__}: {e}",
                                   timestamp=now_iso()).to_dict()
            failed["backend"] = backend
            sink(failed, context)
            raise
        record["backend"] = backend
        sink(record, context)

    return app


# =============================================================================== client side
class _Node:
    """What one node process caches between messages: parsed configs and its loaded data
    (never algorithm state: that lives in the Flower context)."""

    def __init__(self, source: ClientSource, prepare: Callable[[], None] | None = None) -> None:
        self.source = source
        self.prepare = prepare
        self.configs: dict[str, RunConfig] = {}
        self.data: dict[tuple[str, int], tuple[ClientData, FederationMeta, RawDataFingerprint]] = {}

    def config(self, text: str) -> RunConfig:
        if text not in self.configs:
            R.load_plugins()
            if self.prepare is not None:  # e.g. register a submitted method in this node's process
                self.prepare()
            self.configs[text] = build_run_config(json.loads(text))
        return self.configs[text]

    def client(self, cfg: RunConfig, pid: int) -> tuple[ClientData, FederationMeta, RawDataFingerprint]:
        from benchmark.engine import resolve_device

        key = (cfg.hash(), pid)
        if key not in self.data:
            client, meta = self.source(cfg, pid)
            client = client.to(resolve_device(cfg.train.device))
            self.data[key] = (client, meta, RawDataFingerprint(client))
        return self.data[key]


def _client_side(cfg: RunConfig, meta: FederationMeta) -> ClientSide:
    """The client half of the run's algorithm, built from config and metadata alone."""
    from benchmark.engine import resolve_device

    device = resolve_device(cfg.train.device)
    configure_determinism(cfg.train.deterministic)
    apply_matmul_precision(cfg.train.matmul_precision)
    select_distance_kernel(cfg.train.distance_kernel, device)
    task = R.TASKS.get(cfg.task.name)(component_config(R.TASKS, cfg.task, "task"))
    algo_cls = R.ALGORITHMS.get(cfg.algorithm.name)
    ctx = AlgoContext(run=cfg, task=task, modalities=meta.modalities, feature_dims=meta.feature_dims,
                      num_classes=meta.num_classes, num_clients=len(meta.client_ids), client_ids=list(meta.client_ids),
                      num_global_nodes=meta.num_global_nodes, device=device, seed=cfg.seed)
    return ClientSide(algo_cls, component_config(R.ALGORITHMS, cfg.algorithm, "algorithm"), ctx)


def make_client_app(source: ClientSource, prepare: Callable[[], None] | None = None) -> ClientApp:
    """A ClientApp whose node holds the client that ``source`` gives for its ``partition-id``;
    ``prepare`` runs once in each node process before its first message (a module-level
    callable: it travels to the simulation's workers by reference)."""
    app = ClientApp()
    node = _Node(source, prepare)

    def prepare(msg: Message, context: Context) -> tuple[RunConfig, ClientData, RawDataFingerprint, ClientSide, dict]:
        ctl = msg.content["fedmm"]
        cfg = node.config(str(ctl["config"]))
        client, _, raw = node.client(cfg, int(context.node_config[PARTITION_KEY]))
        side = _client_side(cfg, C.meta_from_json(str(ctl["meta"])))
        state = C.load_state(context.state, client.device, client)
        if "setup_reply" in msg.content:
            side.setup_receive(client, state, C.record_to_payload(msg.content["setup_reply"], client.device))  # type: ignore[arg-type]
        return cfg, client, raw, side, state

    def reply(msg: Message, context: Context, state: dict, client: ClientData, upload: Upload | None = None,
              scores: Scores | None = None, **ctl: Any) -> Message:
        C.save_state(context.state, state, client)
        content = RecordDict({"fedmm": C.control(**ctl)})
        if upload is not None:
            content["payload"] = C.payload_to_record(upload.payload)
            content["fedmm"]["findings"] = list(upload.findings)  # type: ignore[index]
        if scores is not None:
            content["scores"] = C.scores_to_record(scores)
        return Message(content=content, reply_to=msg)

    @app.query("meta")
    def meta(msg: Message, context: Context) -> Message:
        cfg = node.config(str(msg.content["fedmm"]["config"]))
        client, dataset, _ = node.client(cfg, int(context.node_config[PARTITION_KEY]))
        content = RecordDict({"fedmm": C.control(cid=client.cid, meta=C.meta_to_json(dataset),
                                                 num_nodes=client.num_nodes, held=held_counts(client, dataset.modalities))})
        return Message(content=content, reply_to=msg)

    @app.train("setup")
    def setup(msg: Message, context: Context) -> Message:
        cfg, client, raw, side, state = prepare(msg, context)
        up = client_setup_upload(side, client, state, raw, side.algo.upload_keys)
        return reply(msg, context, state, client, upload=up)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        cfg, client, raw, side, state = prepare(msg, context)
        received = C.record_to_payload(msg.content["payload"], client.device)  # type: ignore[arg-type]
        try:
            up = client_train(side, client, state, received, int(msg.content["fedmm"]["round"]), raw,  # type: ignore[arg-type]
                              side.algo.upload_keys)
        except NonFiniteLoss as e:
            return Message(content=RecordDict({"fedmm": C.control(nonfinite=str(e))}), reply_to=msg)
        return reply(msg, context, state, client, upload=up)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        cfg, client, raw, side, state = prepare(msg, context)
        received = C.record_to_payload(msg.content["payload"], client.device)  # type: ignore[arg-type]
        scores = side.evaluate(client, state, received, int(msg.content["fedmm"]["round"]))  # type: ignore[arg-type]
        return reply(msg, context, state, client, scores=scores)

    return app


__all__ = ["ClientSource", "FlowerChannel", "PARTITION_KEY", "make_client_app", "make_server_app"]
