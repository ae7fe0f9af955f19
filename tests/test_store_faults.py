"""The result store under faults (issue 25): lines of the wrong shape, deep nesting, bytes that
are not UTF-8 and non-finite numbers are skipped with one warning; a full disk leaves no half
line; a read-only folder is one line and exit 2 before anything runs."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedmm_bench.cli import main
from benchmark.errors import BenchmarkError
from benchmark.results import ResultStore, StoreError, encode_record, ensure_writable, record_problem
from benchmark.sweep import latest_records

GOOD = {"cell_id": "good", "status": "ok", "metrics": {"test/accuracy": 0.5}, "seed": 0}

# line -> words the warning gives; each breaks what a reader relies on
BAD_LINES: dict[str, tuple[bytes, str]] = {
    "cell_id_list": (b'{"cell_id": ["a"], "status": "ok"}', "'cell_id' must be a string"),
    "metrics_string": (b'{"cell_id": "a", "metrics": "0.9"}', "'metrics' must be"),
    "metric_string": (b'{"cell_id": "a", "metrics": {"test/accuracy": "0.9"}}', "'metrics' must be"),
    "metric_bool": (b'{"cell_id": "a", "metrics": {"test/accuracy": true}}', "'metrics' must be"),
    "provenance_string": (b'{"cell_id": "a", "provenance": "x"}', "'provenance' must be an object"),
    "params_list": (b'{"cell_id": "a", "params": [1]}', "'params' must be an object"),
    "seed_string": (b'{"cell_id": "a", "seed": "0"}', "'seed' must be an integer"),
    "status_other": (b'{"cell_id": "a", "status": "running"}', "'status' must be"),
    "curves_number": (b'{"cell_id": "a", "curves": {"round": 3}}', "'curves' must be"),
    "error_round_text": (b'{"cell_id": "a", "error": {"round": "x"}}', "'error' must be"),
    "not_an_object": (b'[1, 2]', "not an object"),
    "deep_100k": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "deep_parsable": (b'{"cell_id": "a", "params": {"x": ' + b"[" * 200 + b"]" * 200 + b"}}", "nested more than"),
    "not_utf8": (b'{"cell_id": "caf\xe9"}', "not UTF-8"),
    "infinity": (b'{"cell_id": "a", "metrics": {"test/accuracy": Infinity}}', "non-finite number Infinity"),
    "nan": (b'{"cell_id": "a", "metrics": {"test/accuracy": NaN}}', "non-finite number NaN"),
    "overflow": (b'{"cell_id": "a", "metrics": {"test/accuracy": 1e999}}', "non-finite number"),
    "truncated": (b'{"cell_id": "a", "sta', "not JSON"),
}


def _store_with(tmp_path: Path, bad: bytes) -> ResultStore:
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(GOOD)
    with open(store.path, "ab") as f:
        f.write(bad + b"\n")
    store.append({**GOOD, "cell_id": "after"})
    return store


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_a_bad_line_is_skipped_with_one_warning_naming_file_and_line(tmp_path, capsys, name):
    line, why = BAD_LINES[name]
    store = _store_with(tmp_path, line)
    assert [r.cell_id for r in store.read()] == ["good", "after"]
    assert store.done_cells() == {"good", "after"}
    assert latest_records(store.read(), {"good", "after", "a"})  # sweep resume's view
    warnings = _warnings(capsys.readouterr().err)
    assert len(warnings) == 3  # one per read
    assert all(w.startswith(f"warning: {store.path}:2: skipping a corrupt record line") for w in warnings)
    assert why in warnings[0] and "\n" not in warnings[0]


def test_every_committed_record_passes_the_schema_and_round_trips():
    """The schema describes what the harness writes: no committed record is refused."""
    stores = sorted(Path(__file__).resolve().parent.parent.glob("results/*/*.jsonl"))
    assert stores
    for path in stores[:8]:
        for raw in path.read_bytes().splitlines():
            if raw.strip():
                rec = json.loads(raw)
                assert record_problem(rec) is None, path
                assert json.loads(encode_record(rec)) == rec


# --------------------------------------------------------------------------- non-finite metrics


def test_a_nan_metric_is_stored_as_a_failed_cell(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append({"cell_id": "a", "status": "ok", "metrics": {"test/accuracy": float("nan"), "val/accuracy": 0.9}})
    store.append({"cell_id": "b", "status": "ok", "metrics": {"test/accuracy": float("inf")}})
    a, b = store.read()
    assert a.status == b.status == "failed"
    assert a.metrics["test/accuracy"] is None and a.metrics["val/accuracy"] == 0.9
    assert a.error == {"round": -1, "reason": "non-finite metric test/accuracy"}
    assert "Infinity" not in store.path.read_text() and "NaN" not in store.path.read_text()


def test_a_malformed_record_is_refused_at_write(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    for bad in ({"cell_id": ["a"]}, {"metrics": "x"}, {"provenance": "x"}, {"status": "weird"}):
        with pytest.raises(StoreError, match="malformed result record"):
            store.append(bad)
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(StoreError, match="nested more than"):
        store.append({"cell_id": "a", "params": {"x": deep}})
    assert not store.path.exists() or store.path.read_bytes() == b""


def _tabulate(records: list[dict[str, Any]]) -> Any:
    from benchmark.report.tables import make_table

    spec = {"rows": "algorithm.name", "metrics": ["accuracy"]}
    return make_table(records, spec)


def _rec(alg: str, seed: int, acc: Any) -> dict[str, Any]:
    return {"suite": "s", "scale": "tiny", "cell_id": f"{alg}-{seed}", "params": {"algorithm.name": alg},
            "seed": seed, "status": "ok", "metrics": {"test/accuracy": acc}, "timestamp": "2025-01-01T00:00:00"}


def test_an_infinity_in_a_store_line_is_never_the_best_cell(tmp_path, capsys):
    store = ResultStore(tmp_path / "r.jsonl")
    for alg, acc in (("local", 0.5), ("fedavg", 0.7)):
        store.append(_rec(alg, 0, acc))
    with open(store.path, "a") as f:
        f.write(json.dumps(_rec("evil", 0, 0.1)).replace("0.1", "Infinity") + "\n")
    out = _tabulate(store.read())
    assert "evil" not in out.markdown and "inf" not in out.latex
    assert r"fedavg & \textbf{70.00}" in out.latex
    assert len(_warnings(capsys.readouterr().err)) == 1


def test_a_non_finite_metric_handed_to_a_table_directly_ranks_nowhere():
    """Records not read from a store (a caller's own list) get the same rule in the table."""
    recs = [_rec("local", 0, 0.5), _rec("fedavg", 0, 0.7), _rec("evil", 0, float("inf")),
            _rec("nan", 0, float("nan"))]
    out = _tabulate(recs)
    assert r"fedavg & \textbf{70.00}" in out.latex and "inf" not in out.latex
    best = set(out.frame[out.frame["rank"] == 1]["algorithm.name"])
    # one seed resolves no gap, so both finite rows are tied for first; the non-finite ones rank nowhere
    assert best == {"fedavg", "local"}


# --------------------------------------------------------------------------- a full disk


def _fill_disk(monkeypatch, store: ResultStore, mode: str) -> None:
    """Patch os.write so that writes to the store hit a full disk: half the bytes then ENOSPC
    (``raise``), or a short count (``short``). Other writes go through."""
    real_write = os.write
    target = os.stat(store.path).st_ino

    def full(fd: int, data: bytes) -> int:
        if os.fstat(fd).st_ino != target:
            return real_write(fd, data)
        half = real_write(fd, bytes(data[: len(data) // 2]))
        if mode == "raise":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return half

    monkeypatch.setattr(os, "write", full)


@pytest.mark.parametrize("mode", ["raise", "short"])
def test_a_full_disk_leaves_the_store_whole(tmp_path, monkeypatch, capsys, mode):
    store = ResultStore(tmp_path / "r.jsonl")
    for i in range(10):
        store.append({**GOOD, "cell_id": f"c{i}"})
    before = store.path.read_bytes()
    with monkeypatch.context() as m:
        _fill_disk(m, store, mode)
        with pytest.raises(StoreError) as e:
            store.append({**GOOD, "cell_id": "c10", "payload": "x" * 5000})
    assert isinstance(e.value, BenchmarkError) and "\n" not in str(e.value)
    assert str(store.path) in str(e.value) and "not stored" in str(e.value)
    assert store.path.read_bytes() == before  # cut back to its length before the write
    assert [r.cell_id for r in store.read()] == [f"c{i}" for i in range(10)]
    store.append({**GOOD, "cell_id": "c10"})  # space again: the next append is clean
    assert [r.cell_id for r in store.read()][-1] == "c10"
    assert _warnings(capsys.readouterr().err) == []


def test_a_full_disk_is_one_line_and_exit_2_from_the_cli(tmp_path, monkeypatch, capsys):
    """`run --out` on a full disk: the engine's record cannot be stored, and the CLI says so."""
    from fedmm_bench import cli

    out = tmp_path / "runs.jsonl"
    ResultStore(out).append(GOOD)
    monkeypatch.setattr("benchmark.backends.run_backend", lambda name: lambda cfg, **kw: {"status": "ok"})
    _fill_disk(monkeypatch, ResultStore(out), "raise")
    assert cli.main(["run", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: cannot append to results store")


# --------------------------------------------------------------------------- a read-only folder


def _deny_writes_under(monkeypatch, folder: Path) -> None:
    """EACCES for every open that could write under ``folder`` (root ignores chmod, so patch)."""
    real_open = os.open
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def guarded(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & writes and str(Path(os.fsdecode(path)).resolve()).startswith(str(folder.resolve())):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded)


@pytest.fixture(params=["chmod", "patched"])
def read_only(request, tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "results"
    (folder / "mini").mkdir(parents=True)
    if request.param == "chmod":
        if os.geteuid() == 0:
            pytest.skip("root ignores file permissions")
        folder.chmod(0o500)
        (folder / "mini").chmod(0o500)
        request.addfinalizer(lambda: [p.chmod(0o700) for p in (folder, folder / "mini")])
    else:
        _deny_writes_under(monkeypatch, folder)
    return folder


def test_check_writable_says_so_in_one_line(read_only):
    with pytest.raises(StoreError, match=r"results store .*tiny\.jsonl is not writable") as e:
        ensure_writable(read_only / "mini" / "tiny.jsonl")
    assert "\n" not in str(e.value)


def test_check_writable_passes_and_leaves_nothing_behind(tmp_path):
    ResultStore(tmp_path / "new" / "s.jsonl").check_writable()
    assert list((tmp_path / "new").iterdir()) == []


def test_sweep_into_a_read_only_folder_is_one_line_before_any_cell_runs(read_only, tmp_path, monkeypatch, capsys):
    import benchmark.sweep as sweep

    suite = tmp_path / "mini.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "mini", "default_scale": "tiny", "base": {"train.rounds": 1},
        "grid": {"algorithm.name": ["fedavg"]}, "seeds": [0],
    }))
    ran: list[Any] = []
    monkeypatch.setattr(sweep, "run_suite", lambda *a, **k: ran.append(a) or ([], 0))
    assert main(["sweep", str(suite), "--results", str(read_only)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not writable" in err[0] and ran == []


def test_run_into_a_read_only_folder_is_one_line_before_the_run(read_only, monkeypatch, capsys):
    ran: list[Any] = []
    monkeypatch.setattr("benchmark.backends.run_backend", lambda name: ran.append(name))
    assert main(["run", "--out", str(read_only / "mini" / "runs.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not writable" in err[0] and ran == []


def test_run_out_naming_a_directory_is_one_line_before_the_run(tmp_path, monkeypatch, capsys):
    """The probe: ``run --out DIR`` ran the whole cell and then lost its record."""
    ran: list[Any] = []
    monkeypatch.setattr("benchmark.backends.run_backend", lambda name: ran.append(name))
    assert main(["run", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not writable" in err[0] and "directory" in err[0] and ran == []


# --------------------------------------------------------------------------- the readers, end to end


def _mini_suite(tmp_path: Path) -> tuple[Path, Path]:
    """A two-cell suite and a store holding a record for each cell (nothing left to run)."""
    from benchmark.sweep import load_suite

    path = tmp_path / "mini.yaml"
    path.write_text(yaml.safe_dump({
        "name": "mini", "description": "two cells", "default_scale": "tiny", "base": {"train.rounds": 1},
        "grid": {"algorithm.name": ["fedavg", "local"]}, "seeds": [0],
        "table": {"rows": "algorithm.name", "metrics": ["accuracy"]},
    }))
    suite = load_suite(str(path))
    results = tmp_path / "res"
    store = ResultStore(suite.results_path(results, "tiny"))
    for i, cell in enumerate(suite.cells("tiny")):
        store.append({**_rec(cell.params["algorithm.name"], 0, 0.5 + 0.1 * i), "suite": "mini",
                      "cell_id": cell.cell_id, "params": cell.params})
    with open(store.path, "ab") as f:
        f.write(b"\n".join(line for line, _ in BAD_LINES.values()) + b"\n")
    return path, results


def test_sweep_resume_table_and_leaderboard_read_past_every_bad_line(tmp_path, capsys):
    suite, results = _mini_suite(tmp_path)
    out = tmp_path / "tab"
    assert main(["sweep", str(suite), "--results", str(results)]) == 0
    assert "0 cells run now, 2 recorded" in capsys.readouterr().out
    assert main(["table", str(suite), "--results", str(results), "--out", str(out)]) == 0
    assert main(["leaderboard", "--results", str(results), "--out", str(out), "--no-plots"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    warnings = _warnings(captured.err)
    assert warnings and all("skipping a corrupt record line" in w for w in warnings)
    assert len({w.split(": skipping")[0] for w in warnings}) == len(BAD_LINES)  # every bad line, by number
    assert "Infinity" not in (out / "mini_tiny.tex").read_text()
    shutil.rmtree(out)
