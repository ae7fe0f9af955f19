"""The Task contract: what a model is trained to do and how it is scored on one client."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from torch import Tensor, nn

from benchmark.federation import ClientData

SPLITS = ("train", "val", "test")


class Task(ABC):
    """Loss and evaluation for one task; stateless apart from its config."""

    primary_metric: ClassVar[str]
    metrics: ClassVar[tuple[str, ...]]

    def __init__(self, cfg: object | None = None) -> None:
        self.cfg = cfg

    @abstractmethod
    def out_dim(self, num_classes: int) -> int:
        """Size of the model head for this task."""

    @abstractmethod
    def loss(self, model: nn.Module, client: ClientData) -> Tensor:
        """Training loss on the client's training split."""

    @abstractmethod
    def evaluate(self, model: nn.Module, client: ClientData) -> dict[str, dict[str, float]]:
        """{split: {metric: value, 'n': split size}} for val and test (and train)."""
