"""The typed result of one run: :class:`Record`, the only place a result record is shaped.

A record is what the engine returns, what a sweep stamps with its cell and appends to a
JSON-lines store, and what every report reads back. It used to be an untyped dict built in
three places (the engine, the sweep's cell stamp, the failed-cell record); now all three build
a :class:`Record` and write ``Record.to_dict()``, and the Python API hands out ``Record``
objects (``Record.from_dict`` of a stored line).

The JSON schema is versioned by ``schema_version``: 2 is this class; lines without the field
are version 1 (the same fields, written before it existed) and read the same way. Fields a
newer writer adds and this one does not know are kept in ``extra`` and written back unchanged,
so a round trip never loses data.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import Any

SCHEMA_VERSION = 2
STATUSES = ("ok", "failed")

# optional fields: written only when set (None or empty), as the records before this class did
_OMIT_WHEN_UNSET = ("coverage", "pretraining", "submission", "suite", "scale", "cell_id", "sweep_backend",
                    "worker_pid", "guard", "backend", "eval_sizes", "tuning")


@dataclass
class Record:
    """One run's result. ``metrics`` holds ``split/metric`` keys at the best validation round
    (``val/accuracy``, ``test/mrr``, ``test_server/mrr`` ...); :attr:`val` and :attr:`test`
    give one split's metrics by name. ``curves`` holds per-round lists (``round``,
    ``val/<primary>``, ``test/<primary>``, ``bytes_up``, ``bytes_down``, ``seconds``);
    ``per_client`` per-client test metrics at the best round; ``guard`` the
    collapsed/converged verdict (``benchmark.guard``)."""

    status: str
    seed: int
    metrics: dict[str, float | None] = field(default_factory=dict)
    error: dict[str, Any] | str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    best_round: int = -1
    rounds_run: int = 0
    per_client: dict[str, list] = field(default_factory=dict)
    client_sizes: list[float] = field(default_factory=list)
    # items scored per split at the best round, summed over clients ({"val": n, "test": n}):
    # the size the guard's `learned` verdict takes a chance score's standard error from
    eval_sizes: dict[str, float] = field(default_factory=dict)
    curves: dict[str, list] = field(default_factory=dict)
    comm: dict[str, Any] = field(default_factory=dict)
    seconds_per_round: float | None = None
    cost: dict[str, Any] | None = None
    server_memory_mb: float | None = None
    bytes_per_round: float | None = None
    algorithm: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    determinism: dict[str, Any] = field(default_factory=dict)
    availability: dict[str, float | None] = field(default_factory=dict)
    coverage: dict[str, float | None] = field(default_factory=dict)
    peak_memory_mb: float | None = None
    memory_growth_mb: float | None = None
    wall_time_s: float | None = None
    timestamp: str = ""
    pretraining: dict[str, Any] | None = None
    guard: dict[str, Any] = field(default_factory=dict)
    submission: dict[str, Any] | None = None
    # the tuning study whose choice the cell ran with (study, trial, budget, params, file)
    tuning: dict[str, Any] | None = None
    # the sweep's stamp: which cell of which suite, which backend and worker ran it
    suite: str | None = None
    scale: str | None = None
    cell_id: str | None = None
    sweep_backend: str | None = None
    worker_pid: int | None = None
    # the engine's transport: inprocess, flower-simulation or flower-deployment
    backend: str | None = None
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Record.status must be one of {', '.join(STATUSES)}, got {self.status!r}")

    # ------------------------------------------------------------------ reading

    def split(self, name: str) -> dict[str, float | None]:
        """The metrics of one split (``val``, ``test``, ``test_server`` ...), keyed by metric."""
        prefix = name + "/"
        return {k[len(prefix):]: v for k, v in self.metrics.items() if k.startswith(prefix)}

    @property
    def val(self) -> dict[str, float | None]:
        """Validation metrics at the best round."""
        return self.split("val")

    @property
    def test(self) -> dict[str, float | None]:
        """Test metrics at the best validation round."""
        return self.split("test")

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def reason(self) -> str:
        """Why a failed run failed ('' when it did not, or said nothing)."""
        if isinstance(self.error, dict):
            return str(self.error.get("reason") or "")
        return str(self.error or "")

    # ------------------------------------------------------------------ JSON

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Record":
        """A record from its JSON object (any schema version up to this one)."""
        if not isinstance(data, dict):
            raise TypeError(f"a record is a JSON object, got {type(data).__name__}")
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(f"record schema_version {version!r} is newer than this reader's {SCHEMA_VERSION}; "
                             "update fedmm-bench")
        names = {f.name for f in dataclasses.fields(cls)} - {"extra", "schema_version"}
        known = {k: v for k, v in data.items() if k in names}
        known.setdefault("status", "failed")
        known.setdefault("seed", 0)
        for f in dataclasses.fields(cls):  # a null where the class keeps an empty dict or list
            if f.name in known and known[f.name] is None and f.default_factory is not dataclasses.MISSING:
                known.pop(f.name)
        extra = {k: v for k, v in data.items() if k not in names and k != "schema_version"}
        return cls(**known, schema_version=version, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object a store line holds (stamped with this class's schema version)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("extra", "schema_version"):
                continue
            value = getattr(self, f.name)
            if f.name in _OMIT_WHEN_UNSET and (value is None or value == {}):
                continue
            out[f.name] = value
        out.update(self.extra)
        out["schema_version"] = SCHEMA_VERSION
        return out

    def stamped(self, **identity: Any) -> "Record":
        """This record with the sweep's cell identity (suite, scale, cell_id, params, seed,
        sweep_backend, worker_pid) set."""
        return dataclasses.replace(self, **identity)


def as_records(items: Iterable[Any]) -> list[Record]:
    """Records from what a report is handed: each a :class:`Record` or the JSON object of one
    (a store line, ``run_config``'s answer). Anything else is a ``DataError`` naming its position."""
    return [item if isinstance(item, Record) else read_record(item, f"result record {i}")
            for i, item in enumerate(items)]


def read_record(obj: Any, where: str) -> Record:
    """The record a JSON value holds, or a one-line ``DataError`` that starts with ``where``
    (``result record 3``, ``results.jsonl:12: result record``)."""
    from benchmark.errors import DataError

    if not isinstance(obj, dict):
        raise DataError(f"{where} is a {type(obj).__name__}, expected an object")
    try:
        return Record.from_dict(obj)
    except (TypeError, ValueError) as e:
        raise DataError(f"{where}: {e}") from None


def latest_records(records: Iterable[Record], cell_ids: set[str] | None = None) -> list[Record]:
    """The newest record of each cell (a retried cell keeps only its last result), in the
    order the cells were first stored; records without a cell id (a plain ``run``) are left out."""
    latest: dict[str, Record] = {}
    for r in records:
        if r.cell_id is None or (cell_ids is not None and r.cell_id not in cell_ids):
            continue
        latest[r.cell_id] = r
    return list(latest.values())


def failed_record(seed: int, reason: str, rnd: int = -1, timestamp: str = "") -> Record:
    """The record of a run that did not produce one (it raised, or its worker died)."""
    return Record(status="failed", seed=seed, error={"round": rnd, "reason": reason}, timestamp=timestamp)
