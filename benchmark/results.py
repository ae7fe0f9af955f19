"""Result records: schema, provenance, and an append-only JSON-lines store.

One line per finished cell. Appends take an exclusive file lock and write the whole line
with a single ``write`` followed by ``fsync``, so parallel workers never interleave; a write
that fails or comes up short (a full disk) is truncated back off, and a run killed mid-write
leaves at most a truncated last line. ``read`` checks every line against the one record schema
readers rely on (``record_problem``) and skips, with one warning line naming the file and line,
anything else: truncated, not UTF-8, not JSON, non-finite numbers, wrong shapes.
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
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from benchmark import __version__
from benchmark.config import RunConfig
from benchmark.errors import BenchmarkError
from benchmark.dotted import flatten
from benchmark.record import SCHEMA_VERSION, Record

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


@lru_cache(maxsize=1)
def cpu_identity() -> dict[str, str]:
    """The CPU that CPU numbers depend on: its model and vendor (``/proc/cpuinfo``, else the
    platform) and the kernel set torch dispatches to (``torch.backends.cpu.get_cpu_capability``:
    AVX512, AVX2, DEFAULT). The same cell on the same code, seed and thread count gave test ACC
    0.693 (AVX512), 0.668 (AVX2) and 0.679 (DEFAULT) on one machine (FedDistill*,
    fedmbridge_table2, seed 0): kernels sum in different orders, and training amplifies the
    last bits. So a record re-runs bit for bit only on a CPU with the same identity."""
    model = vendor = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "vendor_id" and not vendor:
                    vendor = value.strip()
                if model and vendor:
                    break
    except OSError:
        pass
    return {"model": model or platform.processor() or platform.machine(), "vendor": vendor,
            "capability": str(torch.backends.cpu.get_cpu_capability())}


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.processor() or platform.machine()}"


def _task_protocol_version(name: str) -> int:
    from benchmark import registry as R

    R.load_plugins()
    return int(getattr(R.TASKS.get(name), "protocol_version", 1)) if name in R.TASKS else 1


def _task_protocol_marks(name: str, task_cfg: dict) -> dict[str, Any]:
    """The task's protocol marks for this config (``Task.protocol_marks``; {} for an unknown task)."""
    from benchmark import registry as R

    R.load_plugins()
    marks = getattr(R.TASKS.get(name), "protocol_marks", None) if name in R.TASKS else None
    return dict(marks(task_cfg)) if marks is not None else {}


def algorithm_revision(name: str) -> int:
    """The registered algorithm's ``revision``: raised when its computation changes without a
    config key saying so (a new default, a reworked generator), so that its stored records go
    stale. Records made before revisions existed count as revision 1."""
    from benchmark import registry as R

    R.load_plugins()
    return int(getattr(R.ALGORITHMS.get(name), "revision", 1)) if name in R.ALGORITHMS else 1


# How a run executes, not what it computes: where data and outputs live, the device, resume
# settings. Left out of the protocol hash and of staleness, so records stay comparable across
# machines; a matmul precision other than full fp32, or a distance kernel other than the eager
# one, changes the numbers, so only "highest" and "eager" are; likewise a minimum of rounds
# before early stopping, of which only 0 (none, as before the option existed) is.
EXECUTION_KEYS = ("output", "dataset.root", "train.device", "train.checkpoint_every", "train.deterministic")


def execution_only(key: str, value: Any) -> bool:
    """Whether the dotted config ``key`` (with ``value``) says how a run executes, not what it computes."""
    return (any(key == k or key.startswith(k + ".") for k in EXECUTION_KEYS)
            or (key == "train.matmul_precision" and value == "highest")
            or (key == "train.distance_kernel" and value == "eager")
            or (key == "train.min_rounds" and value == 0))  # no minimum: the stopping rule of every older record


# Config values the artifact recipe holds (``data_prep/build.py:artifact_keys``), so the
# comparability rule already splits records by them; left out of the protocol hash, which
# therefore stays the same for the tracks that do not read them (KG, AMFL).
RECIPE_KEYS = ("dataset.normalize",)


def protocol_hash(cfg: RunConfig) -> str:
    """Hash of what defines how a number is produced, apart from method, seed and artifact."""
    d = cfg.to_dict()
    keep = {k: d[k] for k in ("dataset", "split", "task", "train", "model")}
    for key in RECIPE_KEYS:
        section, name = key.split(".")
        keep[section] = {k: v for k, v in keep[section].items() if k != name}
    version = _task_protocol_version(cfg.task.name)
    if version != 1:  # version 1 adds nothing, so the hashes of records made before versions existed hold
        keep["task_protocol_version"] = version
    marks = _task_protocol_marks(cfg.task.name, keep["task"])
    if marks:  # likewise: no marks, no key
        keep["task_protocol_marks"] = marks
    keep["train"] = {k: v for k, v in keep["train"].items() if not execution_only(f"train.{k}", v)}
    import hashlib

    return hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:16]


def stale_reasons(record: Record, cfg: RunConfig) -> list[str]:
    """Why ``record`` does not measure ``cfg`` today ([] when it does).

    A record is stale when its protocol hash differs (a task's ``protocol_version`` rose, or a
    dataset/split/task/train/model value changed), or when a config value both sides hold
    differs (a suite's base moved a missingness, partition or algorithm setting: these leave
    the cell id alone). Keys only one side has are ignored, so adding a config option with a
    default does not make every stored record stale; execution-only keys never count. A method
    whose computation changed without a key to show it raises its ``revision``
    (``Algorithm.revision``), which the record keeps.
    """
    reasons = []
    prov = record.provenance or {}
    stored = prov.get("protocol")
    if stored is not None and stored != protocol_hash(cfg):
        reasons.append("protocol")
    revision = algorithm_revision(cfg.algorithm.name)
    if int(prov.get("algorithm_revision", 1)) != revision:
        reasons.append(f"algorithm revision: {prov.get('algorithm_revision', 1)} -> {revision}")
    old, new = flatten(record.config or {}), flatten(cfg.to_dict())
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
        "algorithm_revision": algorithm_revision(cfg.algorithm.name),
        "git_sha": sha,
        "git_dirty": dirty,
        "versions": package_versions(),
        "device": device_name(device),
        "threads": torch.get_num_threads(),   # CPU numbers depend on it (benchmark/threads.py)
        "cpu": cpu_identity(),                # and on the CPU's kernels (bit-for-bit re-runs need the same)
    }


#: stores being re-run after a protocol or suite change: ``{"stores": {suite: why}}``
PENDING_FILE = "pending_rerun.json"
#: the scale whose store (``results/<suite>/small.jsonl``) a suite name in that file means
PENDING_SCALE = "small"


def pending_stores(results_dir: str | Path) -> dict[str, str]:
    """The stores ``results_dir/pending_rerun.json`` lists, with why (none when absent). Until
    its re-run lands such a store keeps the records, tables and findings it was made with, and
    a report that cannot render it under the changed suite leaves it out instead of failing."""
    path = Path(results_dir) / PENDING_FILE
    if not path.is_file():
        return {}
    stores = json.loads(path.read_text(encoding="utf-8")).get("stores") or {}
    return dict(stores) if isinstance(stores, dict) else {str(s): "" for s in stores}


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


# ---------------------------------------------------------------------------- record schema
#
# What every reader (sweep resume, tables, figures, leaderboard) relies on, checked in one
# place: a line that breaks it is skipped on read, and ``append`` refuses to write one. Every
# field is optional (``run --out`` records carry no cell id); a field that is present has the
# type below. Container fields may be null (readers take ``rec.get(k) or {}``).

MAX_DEPTH = 64   # real records nest 6 deep; deeper input is hostile or broken


class StoreError(BenchmarkError):
    """A result store cannot be written (full disk, read-only folder): one line, exit 2."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    """A finite JSON number (booleans are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _dict_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A null or an object whose every value passes ``check``."""
    return lambda v: v is None or (isinstance(v, dict) and all(check(x) for x in v.values()))


def _error_ok(value: Any) -> bool:
    """null, a reason string, or {"round": int|null, "reason": str|null} (tables print both)."""
    if value is None or isinstance(value, str):
        return True
    return (isinstance(value, dict) and (value.get("round") is None or _is_int(value["round"]))
            and (value.get("reason") is None or isinstance(value["reason"], str)))


def _any(value: Any) -> bool:
    return True


_TEXT = (lambda v: isinstance(v, str), "a string")
# field -> (check, what the warning says it must be)
RECORD_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "cell_id": _TEXT, "suite": _TEXT, "scale": _TEXT, "timestamp": _TEXT,
    "status": (lambda v: v in ("ok", "failed"), "'ok' or 'failed'"),
    "seed": (_is_int, "an integer"),
    "metrics": (_dict_of(lambda v: v is None or _is_number(v)), "an object of finite numbers or nulls"),
    "params": (_dict_of(_any), "an object"),
    "provenance": (_dict_of(_any), "an object"),
    "config": (_dict_of(_any), "an object"),
    "curves": (_dict_of(lambda v: v is None or isinstance(v, list)), "an object of lists"),
    "per_client": (_dict_of(lambda v: v is None or isinstance(v, list)), "an object of lists"),
    "availability": (_dict_of(lambda v: v is None or _is_number(v)), "an object of numbers"),
    "coverage": (_dict_of(lambda v: v is None or _is_number(v)), "an object of numbers"),
    "eval_sizes": (_dict_of(lambda v: v is None or _is_number(v)), "an object of numbers"),
    "submission": (_dict_of(_any), "an object"),
    "tuning": (_dict_of(_any), "an object"),
    "guard": (_dict_of(_any), "an object"),
    "error": (_error_ok, "null, a string or {round, reason}"),
    "schema_version": (lambda v: _is_int(v) and 1 <= v <= SCHEMA_VERSION,
                       f"an integer from 1 to {SCHEMA_VERSION} (this reader's record schema)"),
}


def _too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` nests lists/objects more than ``limit`` deep (iterative: no recursion)."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list, tuple)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return False


def record_problem(record: Any) -> str | None:
    """Why ``record`` breaks the schema readers rely on (None when it does not)."""
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not an object"
    if _too_deep(record):
        return f"nested more than {MAX_DEPTH} levels deep"
    for name, (check, wanted) in RECORD_FIELDS.items():
        if name in record and not check(record[name]):
            return f"'{name}' must be {wanted}"
    return None


def _no_constant(token: str) -> Any:
    """json's parse_constant hook: NaN and Infinity are no JSON, and no metric may be one."""
    raise ValueError(f"non-finite number {token}")


def _finite_float(text: str) -> float:
    """json's parse_float hook: 1e999 parses as inf, which is no measurement either."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite number {text[:20]}")
    return value


def parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """(record, "") for a valid store line, else (None, why): never raises on any bytes."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return None, f"not UTF-8 (byte {e.start})"
    try:
        obj = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        return None, "nested too deeply to parse"
    except json.JSONDecodeError as e:
        return None, f"not JSON ({e.msg} at column {e.colno})"
    except ValueError as e:  # the hooks above; an integer too long to convert
        return None, str(e).splitlines()[0][:80] if str(e) else "bad number"
    problem = record_problem(obj)
    return (None, problem) if problem else (obj, "")


def _non_finite_metric(obj: dict[str, Any]) -> str | None:
    """The first metric of a record's JSON object whose value is NaN or infinite (None when all
    are finite or null)."""
    metrics = obj.get("metrics")
    if not isinstance(metrics, dict):
        return None
    return next((str(k) for k, v in metrics.items() if not _finite_or_absent(v)), None)


def _finite_or_absent(value: Any) -> bool:
    """False only for a number-like value (float, numpy or 0-d tensor) that is NaN or infinite."""
    if value is None or isinstance(value, (bool, str, int)):
        return True
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return True  # not a number at all: the schema check refuses it


def failed_on_non_finite(obj: dict[str, Any]) -> dict[str, Any]:
    """An ok record with a NaN/inf metric is stored as failed: a non-finite number is no
    score, and a table must never rank it (the metric itself is stored as null). Works on the
    JSON object a writer is about to store, before it is a line or a :class:`Record`."""
    name = _non_finite_metric(obj)
    if name is None or obj.get("status") != "ok":
        return obj
    return {**obj, "status": "failed", "error": {"round": -1, "reason": f"non-finite metric {name}"}}


def encode_record(record: dict[str, Any]) -> bytes:
    """The store line of ``record`` (newline included); StoreError when readers would skip it."""
    if _too_deep(record):
        raise StoreError(f"refusing to store a malformed result record: nested more than {MAX_DEPTH} levels deep")
    clean = _clean(failed_on_non_finite(record))
    problem = record_problem(clean)
    if problem:
        raise StoreError(f"refusing to store a malformed result record: {problem}")
    return (json.dumps(clean, sort_keys=True) + "\n").encode()


class ResultStore:
    """Append-only JSON-lines file of result records."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, record: dict[str, Any]) -> None:
        """Add one record as one line, or raise StoreError leaving the file as it was.

        The line goes out in a single ``os.write`` on an ``O_APPEND`` descriptor under an
        exclusive lock, so parallel writers never interleave; a failed or short write (a full
        disk) is cut back off with ``ftruncate``, so no reader ever meets half a record.
        """
        line = encode_record(record)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreError(f"cannot write results store {self.path}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # a writer killed mid-line left no newline: start a fresh one
            _write_whole(fd, line, size, self.path)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def check_writable(self) -> None:
        """Raise StoreError now, before any cell runs, when appends here would fail.

        Tries what a sweep will do: create the folder, open the store for appending, and
        create a file beside it (cell claims live there); nothing is left behind but the folder.
        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists():
                os.close(os.open(self.path, os.O_WRONLY | os.O_APPEND))
            with tempfile.TemporaryFile(dir=self.path.parent):
                pass
        except OSError as e:
            raise StoreError(f"results store {self.path} is not writable: {e.strerror or e}") from None

    def read(self) -> list[Record]:
        """All valid records, typed; any other line (truncated, not UTF-8, not JSON, non-finite
        numbers, wrong shape) is skipped with one warning line naming the file and line."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StoreError(f"cannot read results store {self.path}: {e.strerror or e}") from None
        out = []
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip():
                continue
            record, why = parse_line(raw)
            if record is None:
                print(f"warning: {self.path}:{lineno}: skipping a corrupt record line ({why})", file=sys.stderr)
            else:
                out.append(Record.from_dict(record))
        return out

    def done_cells(self) -> set[str]:
        """cell ids with a finished record (ok or failed)."""
        return {r.cell_id for r in self.read() if r.cell_id is not None}


def _write_whole(fd: int, line: bytes, size: int, path: Path) -> None:
    """Write ``line`` at the end of ``fd`` in one call and sync it; on any failure or a short
    write, truncate back to ``size`` (the length before) and raise StoreError."""
    try:
        written = os.write(fd, line)
        if written == len(line):
            os.fsync(fd)
            return
        why = f"short write ({written} of {len(line)} bytes; disk full?)"
    except OSError as e:
        why = e.strerror or str(e)
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass  # the partial line stays; read skips it and the next append starts a fresh line
    raise StoreError(f"cannot append to results store {path}: {why}; the record was not stored")


def ensure_writable(path: str | Path) -> None:
    """StoreError (one line, exit 2) when the result store at ``path`` cannot be appended to."""
    ResultStore(path).check_writable()
