"""Clean stops: SIGTERM and SIGINT become one exception in the main thread.

Python's default SIGTERM action ends the process at once, so a sweep's worker processes
(joblib's loky pool, a spawn pool) were orphaned and kept appending records for minutes.
Inside :func:`stop_on_signals` both signals raise :class:`Interrupted` instead, which unwinds
through the code that owns the workers (it kills them) and reaches the CLI, which prints one
line saying what was saved and exits with 128 + the signal number (130 SIGINT, 143 SIGTERM).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """A stop asked for by a signal; ``message`` says what is true about the work saved."""

    def __init__(self, signum: int = signal.SIGINT, message: str = "") -> None:
        super().__init__(message)
        self.signum = int(signum)
        self.message = message

    def __reduce__(self) -> tuple[type, tuple[int, str]]:  # pickled whole, e.g. out of a worker
        return (type(self), (self.signum, self.message))

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process ended by this signal."""
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


def as_interrupted(exc: BaseException, message: str) -> Interrupted:
    """The same stop (its signal; SIGINT for a plain KeyboardInterrupt) with a better message."""
    return Interrupted(getattr(exc, "signum", signal.SIGINT), message)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Interrupted` in the main thread while inside.

    A repeated signal during the unwinding is ignored, so the cleanup that kills the workers
    is not itself cut short. Outside the main thread (where handlers cannot be set) this does
    nothing. The previous handlers come back on exit.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping = False

    def handler(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        raise Interrupted(signum)

    previous: dict[int, Any] = {}
    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
