"""Sizes and output folders are checked when a config loads, before anything is allocated or
run: every integer option declares an upper bound, so a typo's extra zeros (``model.hidden=
100000000000``) is one line and exit 2 at once; an output folder that is a file (or lies under
one) is refused before round 1 instead of failing at the first checkpoint."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from benchmark import engine
from fedmm_bench.cli import main
from benchmark.config import check_output_dir, load_config
from benchmark.errors import ConfigError
from benchmark.options import base_types, element_type
from option_cases import Option, all_options


def _integer(opt: Option) -> bool:
    inner = base_types(element_type(opt.tp))
    return int in inner and not inner & {bool, float}


INTEGER_OPTIONS = [o for o in all_options() if _integer(o)]


class Started(Exception):
    """An engine was about to be built: validation let the value through."""


def _no_engine(*args: Any, **kwargs: Any) -> None:
    raise Started("a run was about to start")


def one_line_exit_2(capsys: Any, args: list[str]) -> str:
    """``args`` through the CLI with the engine disabled: exit 2 within seconds, one stderr line."""
    start = time.perf_counter()
    with mock.patch.object(engine.Engine, "__init__", _no_engine):
        assert main(args) == 2
    assert time.perf_counter() - start < 20, "refused before any allocation, so at once"
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# --------------------------------------------------------------------------- sizes


def test_every_integer_option_has_an_upper_bound():
    assert len(INTEGER_OPTIONS) > 100
    unbounded = [str(o) for o in INTEGER_OPTIONS
                 if all(o.meta.get(k) is None for k in ("max", "below", "choices"))]
    assert unbounded == [], f"integer options without max: {unbounded}"


@pytest.mark.parametrize("opt", INTEGER_OPTIONS, ids=str)
def test_bounds_hold_the_default_and_leave_room(opt: Option):
    hi = opt.meta.get("max", opt.meta.get("below"))
    if hi is None:
        return  # choices
    defaults = opt.default if isinstance(opt.default, list) else [opt.default]
    assert all(d is None or d <= hi for d in defaults)
    if any(w in opt.name for w in ("hidden", "dim", "width")):
        assert hi >= 4096, f"{opt}: a width ceiling must be generous"


@pytest.mark.parametrize("overrides, key", [
    (["model.hidden=100000000000"], "model.hidden"),
    (["dataset.num_nodes=1000000000000"], "dataset.num_nodes"),
    (["dataset.text_dim=10000000000"], "dataset.text_dim"),
    (["partition.num_clients=1000000000"], "partition.num_clients"),
    (["train.rounds=1000000000000"], "train.rounds"),
    (["task.name=kg_completion", "dataset.name=synthetic_kg", "task.dim=10000000000"], "task.dim"),
    (["task.name=kg_completion", "dataset.name=synthetic_kg", "task.batch_size=10000000000"], "task.batch_size"),
    (["task.name=link_pred", "task.num_negatives=1000000000"], "task.num_negatives"),
    (["algorithm.name=fedmbridge", "algorithm.gnn_widths=[32, 100000000000]"], "algorithm.gnn_widths[1]"),
])
def test_a_huge_size_is_one_line_before_any_allocation(overrides: list[str], key: str, tmp_path: Path, capsys,
                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["run"] + [a for o in overrides for a in ("--set", o)]
    line = one_line_exit_2(capsys, args)
    assert key in line and "must be" in line
    assert list(tmp_path.iterdir()) == []


def test_a_number_with_thousands_of_digits_is_shown_short():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["model.hidden=" + "9" * 4000])
    assert len(str(e.value)) < 200


# --------------------------------------------------------------------------- output folders


@pytest.mark.parametrize("key", ["checkpoint_dir", "cache_dir", "results_dir"])
def test_an_output_folder_that_is_a_file_is_one_line_before_round_1(key: str, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("a file\n")
    line = one_line_exit_2(capsys, ["run", "--set", f"output.{key}=README.md", "--set", "train.rounds=1"])
    assert line == f"error: output.{key}: README.md is a file, not a directory"
    line = one_line_exit_2(capsys, ["run", "--set", f"output.{key}=README.md/sub/dir"])
    assert "cannot be created: README.md is a file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


def test_a_folder_that_can_be_made_is_accepted_and_not_made(tmp_path: Path):
    target = tmp_path / "new" / "deeper" / "ckpt"
    cfg = load_config(None, [f"output.checkpoint_dir={target}", f"output.cache_dir={tmp_path}"])
    assert cfg.output.checkpoint_dir == str(target) and not (tmp_path / "new").exists()


def test_unusable_paths_are_one_line(tmp_path: Path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for bad in (f"{tmp_path}/loop/x", "a\0b", "x" * 5000):
        with pytest.raises(ConfigError) as e:
            check_output_dir(bad, "output.cache_dir")
        assert str(e.value).startswith("output.cache_dir: ") and "\n" not in str(e.value)
        assert len(str(e.value)) < 400


def test_an_unwritable_folder_is_refused(tmp_path: Path):
    with mock.patch("benchmark.config.os.access", return_value=False):
        with pytest.raises(ConfigError, match="is not writable"):
            check_output_dir(tmp_path / "sub", "output.checkpoint_dir")


def test_a_sweep_refuses_an_output_folder_that_is_a_file_before_any_cell(tmp_path: Path, capsys, monkeypatch):
    """`sweep --set output.checkpoint_dir=FILE` is one line up front, not a failed record per cell."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "README.md").write_text("a file\n")
    line = one_line_exit_2(capsys, ["sweep", "ci", "--scale", "tiny", "--results", str(tmp_path / "res"),
                                    "--set", "output.checkpoint_dir=README.md"])
    assert line == "error: output.checkpoint_dir: README.md is a file, not a directory"
    assert not list((tmp_path / "res").rglob("*.jsonl"))
