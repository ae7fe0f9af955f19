"""The one local-training loop: zero_grad, loss, penalty, backward, clip, step.

Every algorithm trains through ``LocalLoop.run``; an algorithm only says what its loss is
(``loss_fn``), what it adds to it (``penalty``, FedProx's proximal term, MMFedEC's anchor),
and, for mini-batch training, how an epoch is cut into batches (``batches``). Writing the
loop once keeps the methods' numbers comparable (same step order, same clipping) and lets
one place decide how training talks to the device.

No host sync per step: a GPU runs ahead of Python only if nothing reads a device value
back. The loss of each step is summed on the device and its finiteness is ANDed into a
device flag; both are read once per mini-batch epoch, and once per ``run`` for full-batch
training (where an epoch is a single step). A non-finite loss therefore ends training at
the end of the epoch in which it appeared (rather than before its own step), and the cell
fails with the same ``NonFiniteLoss`` as before.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor

Batch = TypeVar("Batch")


#: where ``LocalLoop.run`` reports each run's log while a client update is being measured
#: (:func:`measured_losses`); None outside one
_LOSS_SINK: contextvars.ContextVar[list["LoopLog"] | None] = contextvars.ContextVar("loss_sink", default=None)


@contextmanager
def measured_losses() -> Iterator[list["LoopLog"]]:
    """Collect the logs of every local-training loop run inside the block (a client's update),
    so the engine can report a training loss per round without any hook returning one."""
    logs: list[LoopLog] = []
    token = _LOSS_SINK.set(logs)
    try:
        yield logs
    finally:
        _LOSS_SINK.reset(token)


def mean_last_loss(logs: list["LoopLog"]) -> float | None:
    """The mean loss of the last epoch of every loop in ``logs`` (one device read), None without one."""
    sums = [log.epoch_loss_sums[-1] for log in logs if log.epoch_loss_sums]
    steps = sum(log.epoch_steps[-1] for log in logs if log.epoch_loss_sums)
    if not sums or not steps:
        return None
    return float(torch.stack([s.float().reshape(()) for s in sums]).sum()) / steps


class NonFiniteLoss(RuntimeError):
    """Raised by local training when the loss becomes NaN or infinite."""


@dataclass
class LoopLog:
    """What a local run leaves behind, kept on the device until someone reads it."""

    epoch_loss_sums: list[Tensor] = field(default_factory=list)
    epoch_steps: list[int] = field(default_factory=list)

    @property
    def last_loss(self) -> float:
        """Mean loss of the last epoch (reads the device: call it only when needed)."""
        if not self.epoch_steps or self.epoch_steps[-1] == 0:
            return float("nan")
        return float(self.epoch_loss_sums[-1]) / self.epoch_steps[-1]


@dataclass(frozen=True)
class LocalLoop(Generic[Batch]):
    """``epochs`` passes of optimizer steps with optional gradient-norm clipping."""

    epochs: int
    grad_clip: float = 0.0

    @classmethod
    def from_train(cls, train: Any, epochs: int | None = None) -> "LocalLoop":
        """The loop a run's ``train`` section configures (``local_epochs``, ``grad_clip``)."""
        return cls(epochs=train.local_epochs if epochs is None else epochs, grad_clip=float(train.grad_clip))

    def run(self, loss_fn: Callable[..., Tensor], optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
            params: Iterable[Tensor], *, cid: int,
            batches: Callable[[int], Iterable[Batch]] | None = None,
            penalty: Callable[[], Tensor] | None = None) -> LoopLog:
        """Train; raise ``NonFiniteLoss`` (naming client ``cid``) if any step's loss was not finite.

        ``loss_fn()`` for full-batch training, ``loss_fn(batch)`` for each batch of
        ``batches(epoch)`` otherwise. ``penalty()`` is added to every step's loss.
        ``params`` are the tensors whose gradient norm is clipped (when ``grad_clip`` > 0).
        Several optimizers step together, in the given order (FedIIH's model and prior).
        """
        opts = [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else list(optimizers)
        clip = [p for p in params] if self.grad_clip > 0 else []
        log = LoopLog()
        finite: Tensor | None = None
        for epoch in range(self.epochs):
            total: Tensor | None = None
            steps = 0
            for batch in ([None] if batches is None else batches(epoch)):
                for opt in opts:
                    opt.zero_grad(set_to_none=True)
                loss = loss_fn() if batches is None else loss_fn(batch)
                if penalty is not None:
                    loss = loss + penalty()
                ok = torch.isfinite(loss.detach())
                finite = ok if finite is None else finite & ok
                total = loss.detach() if total is None else total + loss.detach()
                steps += 1
                loss.backward()
                if clip:
                    torch.nn.utils.clip_grad_norm_(clip, self.grad_clip)
                for opt in opts:
                    opt.step()
            if total is not None:
                log.epoch_loss_sums.append(total)
                log.epoch_steps.append(steps)
            if batches is not None:
                _raise_unless_finite(finite, cid, epoch)
        if batches is None:
            _raise_unless_finite(finite, cid, self.epochs - 1)
        sink = _LOSS_SINK.get()
        if sink is not None:
            sink.append(log)
        return log


def _raise_unless_finite(finite: Tensor | None, cid: int, epoch: int) -> None:
    if finite is not None and not bool(finite):
        raise NonFiniteLoss(f"non-finite training loss on client {cid} (local epoch {epoch})")


def shuffled_batches(items: Tensor, batch_size: int, generator: torch.Generator) -> Callable[[int], Iterable[Tensor]]:
    """An epoch's batches: ``items`` in a fresh seeded permutation, cut into ``batch_size`` rows.

    The permutation is drawn on the generator's device, so a CUDA generator never makes
    the indices travel from the host.
    """
    def epoch(_: int) -> Iterable[Tensor]:
        perm = torch.randperm(len(items), generator=generator, device=generator.device)
        if perm.device != items.device:
            perm = perm.to(items.device)
        for s in range(0, len(items), batch_size):
            yield items[perm[s:s + batch_size]]
    return epoch
