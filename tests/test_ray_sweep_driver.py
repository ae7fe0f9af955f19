"""The Ray sweep driver's own logic, against a stand-in ``ray`` module (no cluster start):
per-cell resources and ``--isolate`` reach ``ray.remote``; a task whose worker dies becomes a
``failed`` record while the other cells go on; the driver appends every record itself and
leaves no claim behind; it shuts down only a Ray it started."""

from __future__ import annotations

import types

import pytest

from benchmark.backends import ray_sweep
from benchmark.results import ResultStore
from benchmark.sweep import Cell


class _Bar:
    total, n = 3, 0

    def update(self, k: int) -> None:
        self.n += k

    def set_postfix_str(self, _: str) -> None:
        pass


class _Ref:
    """An object ref: hashable, holding the call it stands for."""

    def __init__(self, fn, cell: Cell, threads: int) -> None:  # noqa: ANN001
        self.fn, self.cell, self.threads = fn, cell, threads


def _fake_ray(dies: str) -> types.SimpleNamespace:
    """Runs each task at ``get``; the task of cell id ``dies`` raises as a dead worker does."""
    calls: dict = {"options": None, "init": 0, "shutdown": 0}

    class WorkerCrashedError(Exception):
        pass

    def remote(**options):  # noqa: ANN001, ANN202
        calls["options"] = options

        def wrap(fn):  # noqa: ANN001, ANN202
            return types.SimpleNamespace(remote=lambda cell, threads: _Ref(fn, cell, threads))

        return wrap

    def get(ref):  # noqa: ANN001, ANN202
        if ref.cell.cell_id == dies:
            raise WorkerCrashedError("The worker died unexpectedly while executing this task.")
        return ref.fn(ref.cell, ref.threads)

    return types.SimpleNamespace(
        calls=calls, remote=remote, get=get, is_initialized=lambda: False,
        init=lambda **kw: calls.__setitem__("init", calls["init"] + 1),
        shutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        wait=lambda refs, num_returns=1: (refs[:1], refs[1:]))


@pytest.mark.parametrize("isolate", [False, True])
def test_driver_records_every_cell_and_isolates_a_dead_worker(tmp_path, monkeypatch, isolate):
    cells = [Cell("s", "tiny", {"x": i}, 0, {}) for i in range(3)]
    monkeypatch.delenv("FEDMM_THREADS", raising=False)  # threads then follow the cell's CPUs
    fake = _fake_ray(dies=cells[1].cell_id)
    monkeypatch.setattr(ray_sweep, "require", lambda module, backend: fake)
    monkeypatch.setattr(ray_sweep, "execute_cell",
                        lambda cell, threads, backend="joblib": {"status": "ok", "metrics": {"m": cell.params["x"]},
                                                                 "cell_id": cell.cell_id, "threads": threads,
                                                                 "sweep_backend": backend})
    store = tmp_path / "s" / "tiny.jsonl"
    bar = _Bar()
    held = ray_sweep.run_cells_ray(cells, str(store), 1, 2, isolate, bar, {c.cell_id: 0 for c in cells}, [],
                                   resources={"cpus": 2.0, "gpus": 0.25})
    assert held == set() and bar.n == 3
    opts = fake.calls["options"]
    assert opts["num_cpus"] == 2.0 and opts["num_gpus"] == 0.25 and opts["max_retries"] == 0
    assert opts.get("max_calls") == (1 if isolate else None)
    records = {r.cell_id: r for r in ResultStore(store).read()}
    assert len(records) == 3
    assert records[cells[1].cell_id].status == "failed"
    assert "WorkerCrashedError" in records[cells[1].cell_id].reason
    assert {records[c.cell_id].status for c in (cells[0], cells[2])} == {"ok"}
    assert records[cells[0].cell_id].extra["threads"] == 2  # torch threads follow the cell's CPUs
    assert {r.sweep_backend for r in records.values()} == {"ray"}  # the dead worker's record too
    assert fake.calls["init"] == fake.calls["shutdown"] == 1
    assert not any((store.parent / "tiny.jsonl.claims").glob("*.json")), "every claim is released"
