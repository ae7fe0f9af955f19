"""Cell claims: two sweeps writing into one store never run the same cell twice.

Before a worker runs a cell it creates ``<store>.claims/<cell_id>.json`` with ``O_EXCL``
(holding its pid, host, process start time and the time of the claim) and removes it when
the cell ends. While the cell runs, a heartbeat thread rewrites the claim's time every
``HEARTBEAT_S`` seconds. A claim is *stale*, and may be taken over, when its process is gone
(same host: the pid is dead, or now belongs to a process started at another time) or when
its last heartbeat is older than the expiry (``FEDMM_CLAIM_EXPIRY_S``, default 24 h; the only
test possible for a claim made on another host). The expiry must be at least
``MIN_EXPIRY_HEARTBEATS`` heartbeats long, so a live claimant is never taken over however long
its cell runs (a shorter expiry let two sweeps run every cell twice). Deciding that a claim is
stale and replacing it, and each heartbeat, happen under an ``flock`` on
``<store>.claims/.lock``, so two sweeps cannot both take over one claim; the result store
appends under the same kind of lock, so claims work wherever the store does.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.errors import ConfigError

DEFAULT_EXPIRY_S = 24 * 3600.0
EXPIRY_ENV = "FEDMM_CLAIM_EXPIRY_S"
HEARTBEAT_S = 5.0  # how often a held claim's time is refreshed
MIN_EXPIRY_HEARTBEATS = 3  # the expiry spans this many heartbeats: a late one never loses a live claim


def claims_dir(store_path: str | Path) -> Path:
    """Where the claims of one result store live."""
    return Path(f"{store_path}.claims")


def min_expiry_s() -> float:
    """The shortest expiry that cannot take a live claim over."""
    return MIN_EXPIRY_HEARTBEATS * HEARTBEAT_S


def expiry_s() -> float:
    """``$FEDMM_CLAIM_EXPIRY_S`` (seconds; ``inf`` never expires) or the default; a ConfigError
    naming the variable when it is no number or shorter than :func:`min_expiry_s`."""
    raw = os.environ.get(EXPIRY_ENV, "").strip()
    if not raw:
        return DEFAULT_EXPIRY_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not value >= min_expiry_s():  # also rejects nan
        raise ConfigError(f"{EXPIRY_ENV} must be a number of seconds >= {min_expiry_s():g} "
                          f"({MIN_EXPIRY_HEARTBEATS} claim heartbeats, so a running cell is never taken over), "
                          f"got '{raw}'; unset it for the default of {DEFAULT_EXPIRY_S:g}")
    return value


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux), to tell a reused pid from the claimant."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(info: dict[str, Any], now: float | None = None) -> bool:
    """Whether a claim's owner is gone (see the module docstring)."""
    now = time.time() if now is None else now
    try:
        if now - float(info["time"]) > expiry_s():
            return True
        if info.get("host") != socket.gethostname():
            return False
        pid = int(info["pid"])
    except (KeyError, TypeError, ValueError):
        return True  # unreadable claim content: nobody can own it
    if not _alive(pid):
        return True
    started = info.get("start")
    return started is not None and _start_time(pid) not in (None, started)


@dataclass
class Claim:
    """A claim held by this process, kept fresh by a heartbeat thread until :meth:`release`,
    which removes it if it is still ours."""

    path: Path
    token: str
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start_heartbeat(self) -> None:
        """Refresh the claim's time every HEARTBEAT_S seconds while the cell runs."""
        self._thread = threading.Thread(target=self._beat, name=f"claim-{self.path.stem}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if not refresh(self.path, self.token):
                    return  # taken over or removed: nothing of ours to keep alive
            except OSError:
                return  # the claims folder is gone: so is the claim

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()  # a heartbeat in flight must not write the claim back after it is removed
        try:
            info = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(info, dict) and info.get("token") == self.token:
            self.path.unlink(missing_ok=True)


def refresh(path: Path, token: str) -> bool:
    """Set a claim's time to now if it still holds ``token``; False when it is no longer ours.

    Under the claims lock, so it cannot overwrite a claim another sweep just took over; the
    new content replaces the file in one rename, so a reader sees the old or the new claim.
    """
    with _locked(path.parent):
        info = _read(path)
        if not info or info.get("token") != token:
            return False
        info["time"] = time.time()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(info))
        os.replace(tmp, path)
    return True


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory / ".lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _write_exclusive(path: Path, info: dict[str, Any]) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    return True


def _read(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def try_claim(store_path: str | Path, cell_id: str) -> Claim | None:
    """Claim a cell for this process; None while another live process holds it."""
    directory = claims_dir(store_path)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{cell_id}.json"
    token = f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}"
    info = {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_time(os.getpid()),
            "time": time.time(), "token": token}
    expiry_s()  # a bad $FEDMM_CLAIM_EXPIRY_S fails the first claim, not the first contended one
    with _locked(directory):
        if not _write_exclusive(path, info):
            held = _read(path)
            if held is not None and not is_stale(held):
                return None
            path.unlink(missing_ok=True)  # stale (or vanished): take it over
            if not _write_exclusive(path, info):
                return None
    claim = Claim(path, token)
    claim.start_heartbeat()
    return claim


def holder(store_path: str | Path, cell_id: str) -> dict[str, Any] | None:
    """The claim on a cell, if any (for messages and tests)."""
    return _read(claims_dir(store_path) / f"{cell_id}.json")
