"""Cell claims: two sweeps writing into one store never run the same cell twice.

Before a worker runs a cell it creates ``<store>.claims/<cell_id>.json`` with ``O_EXCL``
(holding its pid, host, process start time and the time of the claim) and removes it when
the cell ends. A claim is *stale*, and may be taken over, when its process is gone (same
host: the pid is dead, or now belongs to a process started at another time) or when it is
older than the expiry (``FEDMM_CLAIM_EXPIRY_S``, default 24 h; the only test possible for a
claim made on another host). Deciding that a claim is stale and replacing it happens under
an ``flock`` on ``<store>.claims/.lock``, so two sweeps cannot both take over one claim; the
result store appends under the same kind of lock, so claims work wherever the store does.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_EXPIRY_S = 24 * 3600.0


def claims_dir(store_path: str | Path) -> Path:
    """Where the claims of one result store live."""
    return Path(f"{store_path}.claims")


def _expiry_s() -> float:
    raw = os.environ.get("FEDMM_CLAIM_EXPIRY_S", "")
    try:
        return float(raw) if raw else DEFAULT_EXPIRY_S
    except ValueError:
        return DEFAULT_EXPIRY_S


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
        if now - float(info["time"]) > _expiry_s():
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
    """A claim held by this process; :meth:`release` removes it if it is still ours."""

    path: Path
    token: str

    def release(self) -> None:
        try:
            info = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if isinstance(info, dict) and info.get("token") == self.token:
            self.path.unlink(missing_ok=True)


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
    with _locked(directory):
        if _write_exclusive(path, info):
            return Claim(path, token)
        held = _read(path)
        if held is not None and not is_stale(held):
            return None
        path.unlink(missing_ok=True)  # stale (or vanished): take it over
        return Claim(path, token) if _write_exclusive(path, info) else None


def holder(store_path: str | Path, cell_id: str) -> dict[str, Any] | None:
    """The claim on a cell, if any (for messages and tests)."""
    return _read(claims_dir(store_path) / f"{cell_id}.json")
