"""Deterministic execution (``train.deterministic``), and a record of whether a run was.

On a GPU the same seed does not give the same numbers by default: atomics in
``index_add_`` / ``scatter_add_`` add in arbitrary order, and cuBLAS picks reduction
strategies per workspace. Torch's deterministic mode swaps in ordered kernels where it has
them and needs ``CUBLAS_WORKSPACE_CONFIG`` set before cuBLAS starts, so this module sets
that variable when it is imported (the engine imports it before touching CUDA).

Some ops have no deterministic kernel (a scatter-max in a GAT softmax on CUDA, say). The
mode runs with ``warn_only=True`` so such a run still finishes, and ``DeterminismWatch``
collects the names of the ops torch warned about: the record then says the run was *not*
deterministic, and which op made it so, instead of the cell failing or the claim being
silently false.
"""

from __future__ import annotations

import os
import re
import warnings
from types import TracebackType
from typing import Any

import torch

#: cuBLAS's documented setting for reproducible results (the smaller ':16:8' also works)
CUBLAS_SETTING = ":4096:8"
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_SETTING)

_ALERT = re.compile(r"^(?P<op>\S+) does not have a deterministic implementation")


def configure(enabled: bool) -> None:
    """Turn torch's deterministic algorithms (and cuDNN's) on or off for this process."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_SETTING)
    torch.use_deterministic_algorithms(enabled, warn_only=True)
    torch.backends.cudnn.deterministic = enabled
    torch.backends.cudnn.benchmark = False


class DeterminismWatch:
    """Context manager: collects torch's non-determinism alerts raised inside it.

    Other warnings are passed on unchanged when the block ends.
    """

    def __init__(self, requested: bool) -> None:
        self.requested = requested
        self.ops: list[str] = []
        self._catcher: warnings.catch_warnings | None = None
        self._caught: list[warnings.WarningMessage] = []

    def __enter__(self) -> "DeterminismWatch":
        configure(self.requested)
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._catcher is not None
        self._catcher.__exit__(kind, exc, tb)
        for w in self._caught:
            match = _ALERT.match(str(w.message))
            if match:
                if match["op"] not in self.ops:
                    self.ops.append(match["op"])
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)

    def summary(self) -> dict[str, Any]:
        """What a result record stores: asked for, achieved, and the ops that prevented it."""
        return {"requested": self.requested, "deterministic": self.requested and not self.ops,
                "nondeterministic_ops": list(self.ops)}
