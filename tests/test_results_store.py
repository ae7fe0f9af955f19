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
    assert len(records) == 200 and len({r.cell_id for r in records}) == 200


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
        ids = [r.cell_id for r in store.read()]
    assert ids == ["a", "c"]


def test_nan_is_stored_as_null(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append({"cell_id": "a", "metrics": {"x": float("nan")}})
    assert store.read()[0].metrics["x"] is None


def test_git_state_ignores_the_harness_outputs(tmp_path, monkeypatch):
    """A sweep appending to a committed results/ store runs committed code: not dirty. A code edit is."""
    import subprocess

    from benchmark import results as results_mod

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "s.jsonl").write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "init")
    monkeypatch.setattr(results_mod, "REPO_ROOT", tmp_path)

    def state() -> bool:
        results_mod.git_state.cache_clear()
        return results_mod.git_state()[1]

    try:
        (tmp_path / "results" / "s.jsonl").write_text("{}\n{}\n")
        assert state() is False
        (tmp_path / "code.py").write_text("x = 2\n")
        assert state() is True
    finally:
        results_mod.git_state.cache_clear()
