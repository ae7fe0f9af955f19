"""Every file the harness reads: nothing in it runs code; a bad cache is one warning and a
rebuild, a bad input one DataError line naming the file."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.errors import DataError
from benchmark.results import ResultStore
from data_prep.build import load_artifact
from data_prep.datasets.sources import load_dataset, torch_load_plain
from data_prep.features import encode_texts
from data_prep.kg.build import _load_kg_artifact
from data_prep.kg.fb15k237 import _load_tensor_file

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("benchmark", "baselines", "methods", "data_prep")


class _Touch:
    """Unpickling this would run a shell command creating a file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _one_warning(capsys, path: Path) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(path) in err[0], err
    return err[0]


@pytest.mark.parametrize("loader", [lambda p: load_artifact(p, 10, 2), lambda p: _load_kg_artifact(p, 2, 2),
                                    load_dataset])
def test_corrupt_cache_is_a_warning_and_a_rebuild(tmp_path, capsys, loader):
    path = tmp_path / "cache.pt"
    torch.save({"x": torch.ones(3)}, path)
    path.write_bytes(path.read_bytes()[:40])  # torn write
    assert loader(path) is None  # None: the caller rebuilds
    assert "rebuilding" in _one_warning(capsys, path)


def test_malicious_cache_runs_nothing(tmp_path, capsys):
    path, marker = tmp_path / "cache.pt", tmp_path / "pwned"
    torch.save({"version": _Touch(marker)}, path)
    assert load_artifact(path, 10, 2) is None and load_dataset(path) is None
    assert not marker.exists()
    assert len(capsys.readouterr().err.strip().splitlines()) == 2


def test_corrupt_feature_cache_is_recomputed(tmp_path, capsys):
    texts = ["a cat", "a dog", "a bird"]
    first = encode_texts(texts, encoder="hashing", cache_dir=tmp_path, dim=16)
    (cached,) = tmp_path.glob("hashing-*.npy")
    cached.write_bytes(b"\x93NUMPY garbage")
    capsys.readouterr()
    again = encode_texts(texts, encoder="hashing", cache_dir=tmp_path, dim=16)
    assert torch.equal(first, again)
    _one_warning(capsys, cached)
    assert np.load(cached, allow_pickle=False).shape == (3, 16)  # rewritten


@pytest.mark.parametrize("loader", [torch_load_plain, _load_tensor_file])
def test_input_with_code_is_one_line_data_error(tmp_path, loader):
    path, marker = tmp_path / "edges.pt", tmp_path / "pwned"
    torch.save([_Touch(marker)], path)
    with pytest.raises(DataError) as e:
        loader(path)
    assert not marker.exists()
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_corrupt_result_line_is_one_warning_line(tmp_path, capsys):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append({"cell_id": "a"})
    with open(store.path, "a") as f:
        f.write('{"cell_id": "b"\n"just a string"\n')
    store.append({"cell_id": "c"})
    assert [r.cell_id for r in store.read()] == ["a", "c"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("skipping a corrupt record line" in line for line in err)


def _unsafe_loads(tree: ast.AST) -> list[tuple[int, str]]:
    """Calls that may run code while reading a file."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else ""
        name, kw = node.func.attr, {k.arg: k.value for k in node.keywords}

        def is_const(key: str, value: object) -> bool:
            return isinstance(kw.get(key), ast.Constant) and kw[key].value is value

        if owner == "torch" and name == "load" and not is_const("weights_only", True):
            found.append((node.lineno, "torch.load without weights_only=True"))
        elif owner in ("np", "numpy") and name == "load" and not is_const("allow_pickle", False):
            found.append((node.lineno, "np.load without allow_pickle=False"))
        elif owner == "yaml" and name in ("load", "unsafe_load", "full_load", "load_all"):
            found.append((node.lineno, f"yaml.{name}"))
        elif owner in ("pickle", "marshal", "dill", "joblib") and name in ("load", "loads"):
            found.append((node.lineno, f"{owner}.{name}"))
    return found


def test_no_file_is_read_in_a_way_that_runs_code():
    bad = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for line, what in _unsafe_loads(ast.parse(path.read_text(encoding="utf-8"))):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert bad == []


def test_the_scan_catches_unsafe_loads():
    src = ("torch.load(p)\ntorch.load(p, weights_only=False)\nnp.load(p, allow_pickle=True)\nnp.load(p)\n"
           "yaml.load(s)\npickle.loads(b)\ntorch.load(p, weights_only=True)\nnp.load(p, allow_pickle=False)\n")
    assert [line for line, _ in _unsafe_loads(ast.parse(src))] == [1, 2, 3, 4, 5, 6]


def test_first_line_of_a_weights_only_refusal_is_its_reason(tmp_path):
    from benchmark.errors import first_line

    path = tmp_path / "x.pt"
    torch.save([_Touch(tmp_path / "pwned")], path)
    with pytest.raises(Exception) as e:
        torch.load(path, weights_only=True)
    assert "system" in first_line(e.value) and "\n" not in first_line(e.value)
    assert first_line(ValueError("a\nb")) == "a" and first_line(ValueError("")) == "ValueError"
