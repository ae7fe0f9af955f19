"""Declared option constraints: every option is declared, and every violation is one CLI line.

The property test draws, for every constraint declared on every option of the core
sections and of every registered component, values that break it (and values of the
wrong type), runs ``run_benchmark.py run`` in-process on a YAML config holding that value
and checks the bad-input contract: exit code 2, exactly one line on stderr naming the
option, no traceback, nothing written. Validation happens while the config loads, before
any data is built, so no example trains anything.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmark import engine
from fedmm_bench.cli import main
from benchmark.config import _check_type, load_config
from benchmark.errors import ConfigError
from benchmark.options import CONSTRAINT_KEYS, NUMERIC_KEYS, base_types, check_option, element_type, is_numeric
from benchmark.options import resolve_choices
from option_cases import SECTIONS, Option, all_options, component_configs, core_options

OPTIONS = all_options()
# "tune": the range a tuner searches (benchmark/tune/space.py; tests/test_tune.py checks every one)
META_KEYS = {"help", "pattern_help", "tune", *CONSTRAINT_KEYS}
FINITE = {"allow_nan": False, "allow_infinity": False}


# --------------------------------------------------------------------------- every option is declared


def test_the_option_table_covers_core_sections_and_components():
    keys = {o.key for o in core_options()}
    assert {"seed", "model.hidden", "model.dropout", "train.lr", "train.device", "train.eval_every",
            "train.local_epochs", "model.layers", "train.deterministic", "train.matmul_precision",
            "partition.num_clients", "missing.fill", "split.train", "output.results_dir"} <= keys
    kinds = {kind for kind, _, _ in component_configs()}
    assert kinds <= set(SECTIONS), f"components with options outside the validated sections: {kinds - set(SECTIONS)}"
    assert len(component_configs()) >= 40 and len(OPTIONS) >= 300


@pytest.mark.parametrize("opt", OPTIONS, ids=str)
def test_option_declares_help_type_compatible_default_and_known_constraints(opt: Option):
    assert opt.meta.get("help"), f"{opt}: no help text"
    unknown = set(opt.meta) - META_KEYS
    assert not unknown, f"{opt}: unknown metadata keys {unknown} (typo of a constraint?)"
    assert opt.default is not dataclasses_missing(), f"{opt}: no default"
    assert _check_type(opt.key, opt.default, opt.tp) == opt.default or opt.default is None
    check_option(opt.key, opt.default, opt.meta)  # the default satisfies its own constraints


@pytest.mark.parametrize("opt", [o for o in OPTIONS if is_numeric(o.tp)], ids=str)
def test_numeric_option_has_a_constraint_or_says_unbounded(opt: Option):
    declared = set(opt.meta) & set(NUMERIC_KEYS) | ({"choices"} & set(opt.meta))
    assert declared, f"{opt}: numeric option without min/max/above/below/positive/probability/choices or 'unbounded'"
    if opt.meta.get("unbounded"):
        assert not set(opt.meta) & (set(NUMERIC_KEYS) - {"unbounded"}), f"{opt}: 'unbounded' next to a bound"


def dataclasses_missing() -> Any:
    import dataclasses

    return dataclasses.MISSING


# --------------------------------------------------------------------------- violating values


def _number(tp: Any) -> tuple[bool, bool]:
    inner = base_types(element_type(tp))
    return int in inner and float not in inner, float in inner


def _nums(is_int: bool, lo: float | None = None, hi: float | None = None, exclude_lo=False, exclude_hi=False):
    """Numbers in [lo, hi] (either end open-ended when None) of the option's kind."""
    if is_int:
        lo_i = None if lo is None else (math.floor(lo) + 1 if exclude_lo or lo != math.floor(lo) else int(lo))
        hi_i = None if hi is None else (math.ceil(hi) - 1 if exclude_hi or hi != math.ceil(hi) else int(hi))
        return st.integers(min_value=lo_i, max_value=hi_i)
    return st.floats(min_value=lo, max_value=hi, exclude_min=exclude_lo and lo is not None,
                     exclude_max=exclude_hi and hi is not None, **FINITE)


def violations(opt: Option) -> list[tuple[str, st.SearchStrategy]]:
    """(constraint, strategy of values that break it) for every constraint of ``opt``."""
    m = opt.meta
    is_int, is_float = _number(opt.tp)
    out: list[tuple[str, st.SearchStrategy]] = []
    if is_int or is_float:
        if m.get("min") is not None:
            out.append(("min", _nums(is_int, hi=m["min"], exclude_hi=True)))
        if m.get("max") is not None:
            out.append(("max", _nums(is_int, lo=m["max"], exclude_lo=True)))
        if m.get("above") is not None:
            out.append(("above", _nums(is_int, hi=m["above"])))
        if m.get("below") is not None:
            out.append(("below", _nums(is_int, lo=m["below"])))
        if m.get("positive"):
            out.append(("positive", _nums(is_int, hi=0)))
        if m.get("probability"):
            out.append(("probability", st.one_of(_nums(is_int, hi=0, exclude_hi=True),
                                                 _nums(is_int, lo=1, exclude_lo=True))))
        if is_float:
            out.append(("finite", st.sampled_from([math.nan, math.inf, -math.inf])))
    choices = resolve_choices(m)
    if choices is not None:
        if is_int:
            out.append(("choices", st.integers().filter(lambda v: v not in choices)))
        else:
            out.append(("choices", st.text(max_size=12).filter(lambda v: v not in choices)))
    if m.get("pattern") is not None:
        out.append(("pattern", st.text(max_size=12).filter(lambda v: not re.fullmatch(m["pattern"], v))))
    out.append(("type", wrong_type(opt.tp)))
    return out


def wrong_type(tp: Any) -> st.SearchStrategy:
    """Values that no annotation of this kind accepts (a float for an int, a word for a number, ...)."""
    kinds = base_types(tp)
    inner = base_types(element_type(tp))
    words = st.text(alphabet="abcxyz", min_size=1, max_size=6).filter(lambda w: w not in ("y", "n"))
    if list in kinds:
        bad_item = wrong_type(element_type(tp))
        return st.one_of(words, st.lists(bad_item, min_size=1, max_size=3))
    if dict in kinds:
        return st.one_of(words, st.dictionaries(words, wrong_type(element_type(tp)), min_size=1, max_size=2))
    if bool in kinds:
        return st.one_of(words, st.integers(), st.floats(**FINITE))
    if int in inner and float not in inner:
        return st.one_of(words, st.floats(**FINITE).filter(lambda v: not float(v).is_integer()), st.booleans())
    if float in inner:
        return st.one_of(words, st.booleans(), st.lists(st.integers(), min_size=1, max_size=2))
    if str in kinds:
        return st.one_of(st.integers(), st.floats(**FINITE), st.booleans(), st.lists(words, min_size=1, max_size=2))
    raise AssertionError(f"no wrong-type strategy for {tp}")


def wrap(opt: Option, value: Any, constraint: str) -> Any:
    """Lists and mappings of numbers carry the bad value as an element."""
    if constraint == "type":
        return value
    kinds = base_types(opt.tp)
    if list in kinds:
        return [value]
    if dict in kinds:
        return {"image": value}
    return value


CASES = [(opt, name, strategy) for opt in OPTIONS for name, strategy in violations(opt)]


class ValidationPassed(Exception):
    """Raised instead of building an engine: a bad value got through validation."""


def _no_engine(*args: Any, **kwargs: Any) -> None:
    raise ValidationPassed("the config was accepted and a run was about to start")


def run_cli(config: dict[str, Any]) -> tuple[int, str, list[str]]:
    """``run_benchmark.py run <yaml> --out <file>`` in a fresh directory: (exit code, stderr, files left).

    The engine is replaced by a guard, so a value that slips through validation fails the
    test at once instead of training a model.
    """
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(engine.Engine, "__init__", _no_engine):
        cfg_file = Path(tmp) / "run.yaml"
        cfg_file.write_text(yaml.safe_dump(config))
        err, out = io.StringIO(), io.StringIO()
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                try:
                    code = main(["run", str(cfg_file), "--out", str(Path(tmp) / "results" / "r.jsonl")])
                except SystemExit as e:  # argparse
                    code = int(e.code or 0)
        finally:
            os.chdir(cwd)
        left = sorted(str(p.relative_to(tmp)) for p in Path(tmp).rglob("*") if p != cfg_file)
    return code, err.getvalue(), left


# Hypothesis chains one settings object per parametrized case of a @given test, and past
# about a thousand cases reading that chain overflows the stack; the cases are therefore
# spread over several identical tests, each with its own share (a case per option and
# constraint, as before).
SHARDS = 4
SHARD_OF = [CASES[k::SHARDS] for k in range(SHARDS)]


def _given(cases: list) -> Any:
    def deco(fn: Any) -> Any:
        fn = given(data=st.data())(fn)
        fn = settings(max_examples=3, deadline=None, derandomize=True, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])(fn)
        return pytest.mark.parametrize("opt, constraint, strategy", cases, ids=[f"{o}-{c}" for o, c, _ in cases])(fn)
    return deco


@_given(SHARD_OF[0])
def test_out_of_range_value_is_one_line_exit_2(opt: Option, constraint: str, strategy: Any, data: Any):
    check_out_of_range(opt, constraint, strategy, data)


@_given(SHARD_OF[1])
def test_out_of_range_value_is_one_line_exit_2_b(opt: Option, constraint: str, strategy: Any, data: Any):
    check_out_of_range(opt, constraint, strategy, data)


@_given(SHARD_OF[2])
def test_out_of_range_value_is_one_line_exit_2_c(opt: Option, constraint: str, strategy: Any, data: Any):
    check_out_of_range(opt, constraint, strategy, data)


@_given(SHARD_OF[3])
def test_out_of_range_value_is_one_line_exit_2_d(opt: Option, constraint: str, strategy: Any, data: Any):
    check_out_of_range(opt, constraint, strategy, data)


def check_out_of_range(opt: Option, constraint: str, strategy: Any, data: Any) -> None:
    """A value breaking ``constraint`` of ``opt``: exit 2, one line naming the option, nothing written."""
    value = wrap(opt, data.draw(strategy, label="value"), constraint)
    code, err, left = run_cli(opt.config(value))
    lines = err.splitlines()
    assert code == 2, f"{opt} = {value!r}: exit {code}, stderr {err!r}"
    assert len(lines) == 1 and lines[0].startswith("error: "), f"{opt} = {value!r}: stderr {err!r}"
    assert "Traceback" not in err
    assert opt.key in lines[0], f"{opt} = {value!r}: the message does not name the option: {lines[0]}"
    assert left == [], f"{opt} = {value!r}: wrote {left}"


# --------------------------------------------------------------------------- the issue's probes


@pytest.mark.parametrize("override, message", [
    ("model.hidden=0", "model.hidden must be >= 1, got 0"),
    ("model.dropout=2", "model.dropout must be in [0, 1], got 2"),
    ("train.lr=-1", "train.lr must be >= 0, got -1"),
    ("train.device=tpu", "train.device must be auto, cpu, cuda or cuda:N, got 'tpu'"),
    ("train.eval_every=0", "train.eval_every must be >= 1, got 0"),
    ("train.local_epochs=-1", "train.local_epochs must be >= 1, got -1"),
    ("model.layers=0", "model.layers must be >= 1, got 0"),
    ("model.hidden=abc", "model.hidden: expected an integer, got 'abc'"),
    ("model.hidden=1.5", "model.hidden: expected an integer, got 1.5"),
    ("train.deterministic=maybe", "train.deterministic: expected true or false, got 'maybe'"),
    ("train.matmul_precision=low", "train.matmul_precision must be one of highest, high, medium, got 'low'"),
    ("train.lr=.nan", "train.lr must be a finite number, got nan"),
])
def test_issue_probes(override: str, message: str, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--set", override, "--out", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}\n"
    assert list(tmp_path.iterdir()) == []


def test_valid_values_at_the_bounds_pass():
    cfg = load_config(None, ["model.dropout=1", "train.client_fraction=1", "train.device=cuda:1",
                             "algorithm.name=s2fgl", "algorithm.ppr_alpha=1", "missing.rates={image: 1.0}"])
    assert cfg.model.dropout == 1 and cfg.train.device == "cuda:1"
    with pytest.raises(ConfigError, match=r"algorithm.ppr_alpha must be > 0, got 0"):
        load_config(None, ["algorithm.name=s2fgl", "algorithm.ppr_alpha=0"])
    with pytest.raises(ConfigError, match=r"missing.rates.image must be in \[0, 1\], got 1.5"):
        load_config(None, ["missing.rates={image: 1.5}"])
