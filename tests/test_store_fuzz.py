"""Fuzzing the result store (issue 25): a few thousand arbitrary lines (JSON of any shape, the
record's own fields holding anything, non-finite numbers, random bytes, deep nesting, cut-off
lines) among good records. Reading never raises, every bad line is one warning, every good
record comes back in order, and what comes back never crashes the readers behind it."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmark.errors import BenchmarkError
from benchmark.report.leaderboard.rows import group_rows
from benchmark.report.records import records_frame
from benchmark.record import Record
from benchmark.results import RECORD_FIELDS, ResultStore, StoreError, encode_record
from benchmark.sweep import latest_records

MARK = "fuzz_good"  # a top-level key no generated record has: picks out the good records
SMALL_INT = st.integers(min_value=-(2**63), max_value=2**63)

scalars = st.none() | st.booleans() | SMALL_INT | st.floats() | st.text(max_size=12)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=5)
# records whose known fields hold anything (and a few fields of their right type)
fields = st.sampled_from([*RECORD_FIELDS, "best_round", "peak_memory_mb", "other"])
right = st.fixed_dictionaries({}, optional={
    "cell_id": st.text(max_size=6), "status": st.sampled_from(["ok", "failed"]), "seed": SMALL_INT,
    "metrics": st.dictionaries(st.sampled_from(["test/accuracy", "val/accuracy"]), st.floats() | st.none()),
    "params": st.dictionaries(st.sampled_from(["algorithm.name", "missing.rate"]), scalars, max_size=2)})
records = st.builds(lambda a, b: {**a, **b}, st.dictionaries(fields, json_values, max_size=5), right)


def _json_line(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()  # NaN and Infinity tokens included


def _deep(n: int) -> bytes:
    return b'{"cell_id": "d", "params": ' + b"[" * n + b"]" * n + b"}"


raw_lines = st.one_of(
    records.map(_json_line),
    json_values.map(_json_line),
    st.binary(max_size=80),
    st.integers(min_value=60, max_value=50_000).map(_deep),
    records.map(_json_line).map(lambda b: b[: len(b) // 2]),
    st.sampled_from([b"{}", b"Infinity", b'{"metrics": {"x": -Infinity}}', b'{"seed": 1e999}', b"\xff\xfe",
                     b'{"cell_id": "\\ud800"}', b"   ", b"\r"]),
)
ops = st.lists(st.one_of(
    st.tuples(st.just("raw"), raw_lines, st.booleans()),           # (kind, bytes, ends with a newline)
    st.tuples(st.just("good"), records, st.just(True)),
), min_size=5, max_size=40)


def _random_value(rnd: random.Random, depth: int = 0) -> Any:
    """Any JSON value (NaN and infinities included), cheaply: the bulk of the lines."""
    kind = rnd.randrange(8 if depth < 4 else 6)
    if kind == 6:
        return [_random_value(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    if kind == 7:
        return {rnd.choice([*RECORD_FIELDS, "x"]): _random_value(rnd, depth + 1) for _ in range(rnd.randrange(5))}
    if kind == 4:
        return "".join(chr(rnd.randrange(0x20, 0x3000)) for _ in range(rnd.randrange(6)))
    return [None, rnd.random() < 0.5, rnd.randint(-10**6, 10**6), rnd.choice([0.5, -1e308, math.nan, math.inf]),
            None, rnd.uniform(-1, 1)][kind]


def _random_line(rnd: random.Random) -> bytes:
    """A record of random field values, any JSON value, or random bytes (no newline)."""
    roll = rnd.random()
    if roll < 0.5:
        value = {rnd.choice([*RECORD_FIELDS, "x"]): _random_value(rnd) for _ in range(rnd.randrange(6))}
    elif roll < 0.8:
        value = _random_value(rnd)
    else:
        return bytes(rnd.randrange(256) for _ in range(rnd.randrange(40))).replace(b"\n", b"")
    return _json_line(value)


def _write(store: ResultStore, plan: list[tuple[str, Any, bool]]) -> list[dict[str, Any]]:
    """Carry out the plan; the good records as the store holds them, in order."""
    good = []
    for i, (kind, payload, newline) in enumerate(plan):
        if kind == "good":
            rec = {**payload, MARK: i}
            try:
                stored = json.loads(encode_record(rec))
            except StoreError:
                continue  # refused at write, as it would be skipped on read
            store.append(rec)
            good.append(stored)
        else:
            with open(store.path, "ab") as f:
                f.write(payload.replace(b"\n", b" ") + (b"\n" if newline else b""))
    return good


def _readers_survive(recs: list[Record]) -> None:
    """Sweep resume, tables and the leaderboard take what read returns without a traceback."""
    latest_records(recs)
    finished = [r for r in recs if r.status in ("ok", "failed")]
    for reader in (records_frame, lambda rs: group_rows("s", "tiny", rs)):
        try:
            if finished:
                reader(finished)
        except BenchmarkError:
            pass  # a one-line error about the records is fine; a crash is not


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(plan=ops, rnd=st.randoms(use_true_random=False))
def test_reading_never_raises_and_every_bad_line_is_one_warning(plan, rnd):
    plan = plan + [("raw", _random_line(rnd), True) for _ in range(50)]
    rnd.shuffle(plan)
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultStore(Path(tmp) / "r.jsonl")
        good = _write(store, plan)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            recs = store.read()
        with contextlib.redirect_stderr(io.StringIO()):
            assert store.done_cells() == {r.cell_id for r in recs if r.cell_id is not None}
        lines = [raw for raw in (store.path.read_bytes() if store.path.exists() else b"").split(b"\n")]
        non_blank = [n for n, raw in enumerate(lines, 1) if raw.strip()]
        warnings = err.getvalue().splitlines()
        assert all(w.startswith(f"warning: {store.path}:") and "skipping a corrupt record line" in w
                   for w in warnings)
        warned = [int(w.split(f"{store.path}:")[1].split(":")[0]) for w in warnings]
        assert len(set(warned)) == len(warned) and set(warned) <= set(non_blank)
        assert len(recs) + len(warnings) == len(non_blank)
        assert [r.to_dict() for r in recs if MARK in r.extra] == [Record.from_dict(g).to_dict() for g in good]
        for r in recs:
            metrics = r.metrics or {}
            assert all(v is None or math.isfinite(v) for v in metrics.values())
        _readers_survive(recs)
