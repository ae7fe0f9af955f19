"""Result store: appends are whole lines; a truncated line never corrupts the store."""

import json
import multiprocessing as mp

from benchmark.results import ResultStore


def _writer(path: str, start: int) -> None:
    store = ResultStore(path)
    for i in range(start, start + 50):
        store.append({"cell_id": f"c{i}", "payload": "x" * 2000, "value": float(i)})


def test_parallel_appends_never_interleave(tmp_path):
    path = str(tmp_path / "r.jsonl")
    procs = [mp.get_context("fork").Process(target=_writer, args=(path, k * 100)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    records = ResultStore(path).read()
    assert len(records) == 200 and len({r["cell_id"] for r in records}) == 200


def test_truncated_line_is_skipped_and_next_append_is_clean(tmp_path):
    path = tmp_path / "r.jsonl"
    store = ResultStore(path)
    store.append({"cell_id": "a"})
    with open(path, "a") as f:
        f.write(json.dumps({"cell_id": "b"})[:7])  # a writer killed mid-line
    store.append({"cell_id": "c"})
    import warnings

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        ids = [r["cell_id"] for r in store.read()]
    assert ids == ["a", "c"]


def test_nan_is_stored_as_null(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append({"cell_id": "a", "metrics": {"x": float("nan")}})
    assert store.read()[0]["metrics"]["x"] is None
