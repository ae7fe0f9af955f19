"""benchmarks/gpu_pack.sh and the unpacking in gpu_session.sh, on a small git checkout: the
stores travel compressed and come back byte for byte, the bulky files go aside and return,
a tree over the limit is put back; and gpu_rest.py names failures and unreached files."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout with two tracked stores (one edited locally), a leaderboard, a picture, a
    table that stays, an untracked partial store, and a shared data folder beside it."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    for name in ("gpu_pack.sh", "gpu_session.sh", "gpu_rest.py"):
        shutil.copy(ROOT / "benchmarks" / name, repo / "benchmarks" / name)
    (repo / ".gitignore").write_text("/.gpu/\n/.whl/\n")
    for rel, text in {"results/a/small.jsonl": '{"x": 1}\n' * 500, "results/b/small.jsonl": '{"y": 2}\n' * 300,
                      "tables/leaderboard.html": "<html>" + "x" * 5000, "tables/fig.png": "png" * 100,
                      "tables/keep.md": "| a |\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "seed")
    (repo / "results/b/small.jsonl").write_text('{"y": 2}\n' * 301)       # a local edit survives
    (repo / "results/a/small.jsonl.partial").write_text('{"p": 0}\n')     # an unfinished sweep
    fb = tmp_path / "shared" / "data" / "fb15k237"
    fb.mkdir(parents=True)
    for name in ("FB15k-237.tar.gz", "FB15k_mid2name.txt", "entity2wikidata.json", "FB15K_NumericalTriples.txt"):
        (fb / name).write_text(f"content of {name}\n")
    (fb.parent / "SHA256SUMS").write_text("sums\n")
    (repo / ".whl").mkdir()
    (repo / ".whl" / "mnist1d-0.0.0-py3-none-any.whl").write_bytes(b"not a real wheel")  # no download
    return repo


def _pack(repo: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "ASIDE": str(repo.parent / "aside"), "SHARED": str(repo.parent / "shared"),
            "PY": sys.executable, **env}
    return subprocess.run(["bash", "benchmarks/gpu_pack.sh", *args], cwd=repo, env=full, capture_output=True,
                          text=True, timeout=120)


def _snapshot(repo: Path) -> dict[str, bytes]:
    return {p.relative_to(repo).as_posix(): p.read_bytes()
            for top in ("results", "tables") for p in sorted((repo / top).rglob("*")) if p.is_file()}


def test_pack_moves_the_bulk_aside_and_restore_brings_it_back(checkout: Path):
    before, status = _snapshot(checkout), _git(checkout, "status", "--porcelain")
    run = _pack(checkout)
    assert run.returncode == 0, run.stderr
    assert "MiB (limit 64 MiB)" in run.stdout
    assert not (checkout / "results").exists() or not any((checkout / "results").rglob("*.jsonl*"))
    assert not (checkout / "tables/leaderboard.html").exists() and not (checkout / "tables/fig.png").exists()
    assert (checkout / "tables/keep.md").exists()
    with tarfile.open(checkout / ".gpu/results.tar.xz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    # the tracked stores as they are in the work tree (the local edit too); not the partial one
    assert members == {"results/a/small.jsonl": before["results/a/small.jsonl"],
                       "results/b/small.jsonl": before["results/b/small.jsonl"]}
    assert sorted(p.name for p in (checkout / ".gpu/data/fb15k237").iterdir()) == [
        "FB15K_NumericalTriples.txt.gz", "FB15k-237.tar.gz", "FB15k_mid2name.txt.gz", "entity2wikidata.json.gz"]
    again = _pack(checkout)  # a second pack before a restore would mix two states
    assert again.returncode != 0 and "restore" in again.stderr
    back = _pack(checkout, "restore")
    assert back.returncode == 0, back.stderr
    assert _snapshot(checkout) == before and _git(checkout, "status", "--porcelain") == status
    assert not (checkout.parent / "aside").exists()


def test_a_tree_over_the_limit_is_put_back_and_the_pack_fails(checkout: Path):
    before = _snapshot(checkout)
    run = _pack(checkout, LIMIT_MB="0")
    assert run.returncode != 0 and "over the limit" in run.stderr
    assert _snapshot(checkout) == before


def test_the_session_unpacks_the_stores_byte_for_byte(checkout: Path, tmp_path: Path):
    before = _snapshot(checkout)
    assert _pack(checkout).returncode == 0
    shutil.rmtree(checkout / ".whl")  # the fake wheel would not install
    env = {**os.environ, "OUT": str(tmp_path / "out"), "DEVICE": "cpu", "STEPS": " ", "PY": sys.executable}
    run = subprocess.run(["bash", "benchmarks/gpu_session.sh"], cwd=checkout, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "unpacked 2 result files" in run.stdout
    for rel in ("results/a/small.jsonl", "results/b/small.jsonl"):
        assert (checkout / rel).read_bytes() == before[rel]
    assert (checkout / ".gpu/data/fb15k237/FB15k_mid2name.txt").read_text() == "content of FB15k_mid2name.txt\n"
    assert _pack(checkout, "restore").returncode == 0
    assert _snapshot(checkout) == before


def _summary_module():
    spec = importlib.util.spec_from_file_location("gpu_rest", ROOT / "benchmarks" / "gpu_rest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_rest_summary_counts_failures_and_unreached_files():
    mod = _summary_module()
    lines = ["[gw0] [  1%] PASSED tests/test_a.py::test_one ",
             "[gw1] [  2%] FAILED tests/test_b.py::test_two[cuda] ",
             "[gw1] [  3%] SKIPPED tests/test_c.py::test_three ",
             "tests/test_d.py::test_four <- not a result line",
             "= 1 failed, 1 passed in 3.0s ="]
    out = mod.summarize(lines, ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py", "tests/test_d.py",
                                "tests/test_e.py"], {"tests/test_e.py"})
    assert out["counts"] == {"PASSED": 1, "FAILED": 1, "SKIPPED": 1}
    assert out["failing"] == ["tests/test_b.py::test_two[cuda]"]
    assert out["unreached"] == ["tests/test_d.py"]


def test_rest_order_puts_the_listed_files_first_and_skips_step_one():
    mod = _summary_module()
    files = ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py", "tests/test_d.py"]
    listed = "# comment\ntests/test_c.py\ntests/test_gone.py\ntests/test_a.py\ntests/test_c.py\n"
    assert mod.order(listed, files, {"tests/test_a.py"}) == ["tests/test_c.py", "tests/test_b.py", "tests/test_d.py"]
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks/gpu_rest.py"), "order", "tests/test_engine.py"],
                         capture_output=True, text=True, check=True)
    got = run.stdout.split()
    assert sorted(got) == sorted(set(mod.test_files()) - {"tests/test_engine.py"})


def test_rest_first_names_only_existing_test_files():
    names = [ln.strip() for ln in (ROOT / "benchmarks/gpu_rest_first.txt").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert names and all((ROOT / n).is_file() and Path(n).name.startswith("test_") for n in names)
