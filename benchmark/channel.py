"""How the engine reaches its clients: in this process, or through a federation engine.

The round loop (``benchmark.engine``) is the server: it samples clients, records every
payload in the ledger, aggregates, evaluates and selects. Whatever happens on a client goes
through a :class:`Channel`: :class:`LocalChannel` calls the client side of the algorithm
here, on the clients of a built ``FederatedData``; ``benchmark.backends.flower_app`` sends
Flower messages to ``ClientApp``s instead. Both run a client's hooks through
:func:`client_train` and friends, so a client computes the same upload, and audits it
against its own raw data the same way, wherever it runs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from benchmark.comm import Payload, RawDataFingerprint, audit_findings
from benchmark.cost import ExchangeTiming, Stopwatch
from benchmark.federation import ClientData, FederatedData, FederationMeta
from benchmark.roles import ClientSide
from benchmark.training import mean_last_loss, measured_losses

Scores = dict[str, dict[str, float]]


@dataclass
class Upload:
    """One client's upload, what its own audit found in it (raw data, undeclared names), and
    the seconds its ``client_update`` hook took (the audit not included)."""

    payload: Payload
    findings: list[str] = field(default_factory=list)
    compute_s: float = 0.0
    train_loss: float | None = None  # mean last-epoch loss of the update's local training (None: not measured)


def client_setup_upload(side: ClientSide, client: ClientData, state: dict, raw: RawDataFingerprint | None,
                        declared: tuple[str, ...] | None) -> Upload:
    """A client's setup upload, audited where its data is."""
    up = side.setup_upload(client, state)
    return Upload(up, audit_findings(-1, client.cid, up, raw, declared) if raw is not None else [])


def client_train(side: ClientSide, client: ClientData, state: dict, received: Payload, rnd: int,
                 raw: RawDataFingerprint | None, declared: tuple[str, ...] | None) -> Upload:
    """A client's local update for round ``rnd``, timed, and audited where its data is."""
    watch = Stopwatch(client.device)
    with measured_losses() as logs, watch.span():
        up = side.client_update(client, state, received, rnd)
    return Upload(up, audit_findings(rnd, client.cid, up, raw, declared) if raw is not None else [], watch.seconds,
                  mean_last_loss(logs))


class Channel(ABC):
    """The server's only way to its clients (see the module docstring).

    ``train_ids`` are the clients that train (one pooled client for a centralized upper
    bound), ``eval_ids`` those that are scored; ``remote`` says whether evaluation costs a
    message (the engine then records it in the ledger, phase "eval"). ``last_exchange`` is
    what the channel measured of its last ``train`` call (``benchmark.cost``); a channel that
    measures nothing leaves the whole exchange to the clients.
    """

    meta: FederationMeta
    train_ids: list[int]
    eval_ids: list[int]
    remote: bool = False
    last_exchange: ExchangeTiming = ExchangeTiming()

    @abstractmethod
    def setup_uploads(self, cids: list[int]) -> dict[int, Upload]:
        """Each client's one-time setup upload."""

    @abstractmethod
    def setup_replies(self, replies: dict[int, Payload]) -> None:
        """Hand each client its setup reply (before its next hook runs)."""

    @abstractmethod
    def train(self, rnd: int, sends: dict[int, Payload]) -> dict[int, Upload]:
        """Local updates of the sampled clients (``sends``: what each receives), in ``sends`` order."""

    @abstractmethod
    def evaluate(self, rnd: int, sends: dict[int, Payload]) -> dict[int, Scores]:
        """Every scored client's scores under what it receives."""

    def close(self) -> None:
        """Release what the channel holds (nothing in process)."""

    def client_states(self) -> dict[int, dict] | None:
        """Each training client's private state between rounds, when the clients live in this
        process: the dict they read and write, which a checkpoint saves and a resume refills in
        place (pre-training warm starts go in it too). None where the clients' states stay on
        their own nodes (Flower): then nothing is checkpointed and nothing is warm-started."""
        return None


class LocalChannel(Channel):
    """The clients of a built federation, run one after another in this process.

    ``states`` holds each client's private state between rounds (checkpoints save it);
    one :class:`ClientSide` serves every client, since it keeps no memory of its own.
    """

    def __init__(self, fed: FederatedData, side: ClientSide, clients: list[ClientData],
                 train_clients: list[ClientData], declared: tuple[str, ...] | None, audit: bool = True) -> None:
        self.meta = fed.meta()
        self.side = side
        self.clients = {c.cid: c for c in clients}
        self.trainers = {c.cid: c for c in train_clients}
        self.train_ids = [c.cid for c in train_clients]
        self.eval_ids = [c.cid for c in clients]
        self.pooled = self.train_ids == [-1]
        self.declared = declared
        self.raws = {c.cid: RawDataFingerprint(c) for c in train_clients} if audit else {}
        self.states: dict[int, dict] = {cid: {} for cid in self.train_ids}

    def client_states(self) -> dict[int, dict]:
        return self.states

    def setup_uploads(self, cids: list[int]) -> dict[int, Upload]:
        return {cid: client_setup_upload(self.side, self.trainers[cid], self.states[cid], self.raws.get(cid),
                                         self.declared) for cid in cids}

    def setup_replies(self, replies: dict[int, Payload]) -> None:
        for cid, payload in replies.items():
            self.side.setup_receive(self.trainers[cid], self.states[cid], payload)

    def train(self, rnd: int, sends: dict[int, Payload]) -> dict[int, Upload]:
        """Each client in turn; nothing is encoded (a client reads the server's tensors), and
        the clients' seconds are their hooks' summed, since they run one after another."""
        ups = {cid: client_train(self.side, self.trainers[cid], self.states[cid], received, rnd,
                                 self.raws.get(cid), self.declared) for cid, received in sends.items()}
        self.last_exchange = ExchangeTiming(client_s=sum(up.compute_s for up in ups.values()))
        return ups

    def evaluate(self, rnd: int, sends: dict[int, Payload]) -> dict[int, Scores]:
        out = {}
        for cid, received in sends.items():
            state = self.states[-1] if self.pooled else self.states.get(cid, {})
            out[cid] = self.side.evaluate(self.clients[cid], state, received, rnd)
        return out


__all__ = ["Channel", "LocalChannel", "Scores", "Upload", "client_setup_upload", "client_train"]
