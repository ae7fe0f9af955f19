"""A Flower ``Grid`` that hands each message straight to a real ``ClientApp`` in this process.

The codec, the ClientApp's handlers, the client state kept in a Flower ``Context`` and the
server's FlowerChannel all run for real; only the transport (SuperLink, Ray workers) is
left out, so protocol checks run in a second instead of a simulation start-up.
"""

from __future__ import annotations

from collections.abc import Iterable

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity


class LoopGrid(Grid):
    """Nodes 100, 101, ... with partition ids 0, 1, ..., each with its own Context."""

    def __init__(self, app: ClientApp, num_nodes: int) -> None:
        TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = 1, 1, 0
        self.app = app
        self.contexts = {100 + i: Context(run_id=1, node_id=100 + i, node_config={"partition-id": i},
                                          state=RecordDict(), run_config={}) for i in range(num_nodes)}
        self.sent: list[Message] = []
        self.replies: dict[str, Message] = {}

    def set_run(self, run: object) -> None:  # noqa: D102 - no run to bind to
        pass

    @property
    def run(self) -> None:  # noqa: D102
        return None

    def create_message(self, *args: object, **kwargs: object) -> Message:  # noqa: D102
        raise NotImplementedError

    def get_node_ids(self) -> list[int]:  # noqa: D102
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        """Each message gets an id (as Flower's grids give one) and its reply at once."""
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = f"m{len(self.sent)}"
            self.sent.append(msg)
            self.replies[msg.metadata.message_id] = self.app(msg, self.contexts[msg.metadata.dst_node_id])
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:  # noqa: D102
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        out = []
        for msg in messages:
            self.sent.append(msg)
            out.append(self.app(msg, self.contexts[msg.metadata.dst_node_id]))
        return out
