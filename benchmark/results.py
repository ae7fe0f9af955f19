"""Result records: schema, provenance, and an append-only JSON-lines store.

One line per finished cell. Appends take an exclusive file lock and write the whole line
with a single ``write`` followed by ``fsync``, so parallel workers never interleave and an
interrupted run leaves at most a truncated last line, which ``read`` skips (and reports)
rather than failing on.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import math
import os
import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from benchmark import __version__
from benchmark.config import RunConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
GIT_STATE_ENV = "FEDMM_GIT_STATE"


@lru_cache(maxsize=1)
def git_state() -> tuple[str, bool]:
    """(commit sha, dirty flag) of the code, or ('unknown', False) outside a git checkout.

    Outputs the harness writes itself (``results/``, ``tables/``) do not make the code dirty:
    a sweep that appends to a committed result store is still running committed code. A
    sweep pins the state it started with in ``FEDMM_GIT_STATE`` (``sha:0|1``) for its
    workers, so an edit made while it runs does not relabel cells whose code was loaded before.
    """
    pinned = os.environ.get(GIT_STATE_ENV)
    if pinned:
        sha, _, dirty_flag = pinned.rpartition(":")
        return sha, dirty_flag == "1"
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                     ":(exclude)results", ":(exclude)tables"], cwd=REPO_ROOT,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
        return (sha or "unknown"), dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", False


@lru_cache(maxsize=1)
def package_versions() -> dict[str, str]:
    import numpy
    import torch_geometric

    return {
        "fedmm_bench": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_geometric": torch_geometric.__version__,
        "numpy": numpy.__version__,
    }


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.processor() or platform.machine()}"


def _task_protocol_version(name: str) -> int:
    from benchmark import registry as R

    R.load_plugins()
    return int(getattr(R.TASKS.get(name), "protocol_version", 1)) if name in R.TASKS else 1


# How a run executes, not what it computes: where data and outputs live, the device, resume
# settings. Left out of the protocol hash and of staleness, so records stay comparable across
# machines; a matmul precision other than full fp32 changes the numbers, so only "highest" is.
EXECUTION_KEYS = ("output", "dataset.root", "train.device", "train.checkpoint_every", "train.deterministic")


def execution_only(key: str, value: Any) -> bool:
    """Whether the dotted config ``key`` (with ``value``) says how a run executes, not what it computes."""
    return (any(key == k or key.startswith(k + ".") for k in EXECUTION_KEYS)
            or (key == "train.matmul_precision" and value == "highest"))


def protocol_hash(cfg: RunConfig) -> str:
    """Hash of what defines how a number is produced, apart from method, seed and artifact."""
    d = cfg.to_dict()
    keep = {k: d[k] for k in ("dataset", "split", "task", "train", "model")}
    version = _task_protocol_version(cfg.task.name)
    if version != 1:  # version 1 adds nothing, so the hashes of records made before versions existed hold
        keep["task_protocol_version"] = version
    keep["train"] = {k: v for k, v in keep["train"].items() if not execution_only(f"train.{k}", v)}
    import hashlib

    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def stale_reasons(record: dict[str, Any], cfg: RunConfig) -> list[str]:
    """Why ``record`` does not measure ``cfg`` today ([] when it does).

    A record is stale when its protocol hash differs (a task's ``protocol_version`` rose, or a
    dataset/split/task/train/model value changed), or when a config value both sides hold
    differs (a suite's base moved a missingness, partition or algorithm setting: these leave
    the cell id alone). Keys only one side has are ignored, so adding a config option with a
    default does not make every stored record stale; execution-only keys never count.
    """
    reasons = []
    stored = (record.get("provenance") or {}).get("protocol")
    if stored is not None and stored != protocol_hash(cfg):
        reasons.append("protocol")
    old, new = _flatten(record.get("config") or {}), _flatten(cfg.to_dict())
    for key in sorted(old.keys() & new.keys()):
        if old[key] != new[key] and not execution_only(key, new[key]) and not execution_only(key, old[key]):
            reasons.append(f"{key}: {old[key]!r} -> {new[key]!r}")
    return reasons


def provenance(cfg: RunConfig, artifact_hash: str, artifact_recipe: str, device: torch.device) -> dict[str, Any]:
    sha, dirty = git_state()
    return {
        "artifact_hash": artifact_hash,
        "artifact_recipe": artifact_recipe,
        "protocol": protocol_hash(cfg),
        "config_hash": cfg.hash(),
        "git_sha": sha,
        "git_dirty": dirty,
        "versions": package_versions(),
        "device": device_name(device),
        "threads": torch.get_num_threads(),   # CPU numbers depend on it (benchmark/threads.py)
    }


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _clean(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf become None, tensors become lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, torch.Tensor):
        return _clean(obj.tolist())
    return obj


class ResultStore:
    """Append-only JSON-lines file of result records."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(_clean(record), sort_keys=True) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size:
                # A previous writer killed mid-line leaves no newline: start on a fresh line.
                with open(self.path, "rb") as f:
                    f.seek(size - 1)
                    if f.read(1) != b"\n":
                        line = b"\n" + line
            os.write(fd, line)
            os.fsync(fd)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        """All complete records; a corrupt (truncated) line is skipped with a warning."""
        if not self.path.exists():
            return []
        out = []
        for i, raw in enumerate(self.path.read_text().splitlines(), 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                rec = None
            if isinstance(rec, dict):
                out.append(rec)
            else:
                print(f"warning: {self.path}:{i}: skipping a corrupt record line", file=sys.stderr)
        return out

    def done_cells(self) -> set[str]:
        """cell ids with a finished record (ok or failed)."""
        return {r["cell_id"] for r in self.read() if "cell_id" in r}
