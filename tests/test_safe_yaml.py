"""Every YAML the harness reads (run configs, ``--set`` values, suites) goes through
benchmark/safe_yaml.py: an alias bomb, a repeated key, a UTF-16 file, a huge or deeply
nested document is one ConfigError line (exit 2 from the CLI), fast; and whatever the input,
loading a run config either works or raises a BenchmarkError with a one-line message."""

from __future__ import annotations

import codecs
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fedmm_bench.cli import main
from benchmark.config import RunConfig, load_config, load_yaml, parse_override
from benchmark.errors import BenchmarkError, ConfigError
import benchmark.safe_yaml as safe_yaml
from benchmark.safe_yaml import MAX_ALIASES, MAX_BYTES, MAX_DEPTH, loads, short_repr
from option_cases import SECTIONS, all_options, component_configs

SUITES = Path(__file__).resolve().parent.parent / "benchmark" / "suites"


def laughs(levels: int = 9, width: int = 9, mapping: bool = False) -> str:
    """The "billion laughs" document: each level repeats the previous one ``width`` times."""
    if mapping:
        lines = ["l0: &l0 {x: lol}"]
        lines += [f"l{i}: &l{i} {{{', '.join(f'k{j}: *l{i - 1}' for j in range(width))}}}" for i in range(1, levels)]
    else:
        lines = [f"l0: &l0 [{', '.join(['lol'] * width)}]"]
        lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nmodel: {{hidden: *l{levels - 1}}}\n"


def one_line_error(capsys: Any, args: list[str]) -> str:
    """Run the CLI; assert exit 2 and exactly one stderr line, and return it."""
    start = time.perf_counter()
    assert main(args) == 2
    assert time.perf_counter() - start < 20, "a refused input must fail fast"
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert len(lines[0]) < 400, "a message must not quote a whole value"
    return lines[0]


# --------------------------------------------------------------------------- the probes


@pytest.mark.parametrize("mapping", [False, True], ids=["list_aliases", "dict_aliases"])
def test_alias_bomb_is_one_line_and_fast(mapping: bool, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bomb.yaml"
    path.write_text(laughs(mapping=mapping))
    line = one_line_error(capsys, ["run", str(path)])
    assert "bomb.yaml" in line and "counted in full" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bomb.yaml"]


def test_alias_bomb_in_a_set_value(capsys):
    value = "{" + laughs(levels=8).replace("\n", ", ").rstrip(", ") + "}"
    line = one_line_error(capsys, ["run", "--set", f"dataset.extra={value}"])
    assert "--set dataset.extra" in line


def test_recursive_alias_is_refused(tmp_path: Path):
    path = tmp_path / "rec.yaml"
    path.write_text("model: &m {sub: *m}\n")
    with pytest.raises(ConfigError, match="recursive"):
        load_yaml(path)


def test_too_many_aliases_is_refused():
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(ConfigError, match=f"more than {MAX_ALIASES} aliases"):
        loads(text, "x")


def test_aliases_and_merge_keys_still_work():
    data = loads("base: &b {lr: 0.1, rounds: 3}\nrun: {<<: *b, rounds: 5}\nrows: &r [a, b]\nagain: *r\n", "x")
    assert data == {"base": {"lr": 0.1, "rounds": 3}, "run": {"lr": 0.1, "rounds": 5}, "rows": ["a", "b"],
                    "again": ["a", "b"]}
    assert "*methods" in (SUITES / "efficiency.yaml").read_text()  # a real suite shares lists by alias
    assert load_yaml(SUITES / "efficiency.yaml")["table"]["row_order"][0] == "fedavg"


@pytest.mark.parametrize("text, key, line", [
    ("seed: 1\nseed: 2\n", "'seed'", 2),
    ("train:\n  rounds: 1\n  lr: 0.1\n  rounds: 3\n", "'rounds'", 4),
    ("algorithm: {name: fedprox, mu: 0.1, mu: 0.2}\n", "'mu'", 1),
    ("base: &b {a: 1}\nrun: {<<: *b, c: 1, c: 2}\n", "'c'", 2),
])
def test_duplicate_key_names_key_and_line(text: str, key: str, line: int, tmp_path: Path):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_yaml(path)
    assert f"duplicate key {key}" in str(e.value) and f"line {line}" in str(e.value)


def test_duplicate_key_through_the_cli(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "dup.yaml"
    path.write_text("train:\n  rounds: 1\ntrain:\n  rounds: 2\n")
    assert "duplicate key 'train'" in one_line_error(capsys, ["run", str(path)])
    assert "duplicate key 'x'" in one_line_error(capsys, ["run", "--set", "dataset.extra={x: 1, x: 2}"])


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32"])
def test_non_utf8_file_is_one_line(encoding: str, tmp_path: Path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "wide.yaml"
    path.write_bytes("seed: 1\n".encode(encoding))
    assert "must be UTF-8" in one_line_error(capsys, ["run", str(path)])


def test_utf8_bom_is_fine_and_bad_bytes_are_one_line(tmp_path: Path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(codecs.BOM_UTF8 + "seed: 3\n".encode())
    assert load_yaml(path) == {"seed": 3}
    path.write_bytes(b"seed: \xff\xfe1\n")
    with pytest.raises(ConfigError, match=r"must be UTF-8 text \(byte 0xff at offset 6 is not UTF-8\)"):
        load_yaml(path)


def test_size_and_depth_caps(tmp_path: Path):
    path = tmp_path / "big.yaml"
    path.write_text("a: '" + "x" * MAX_BYTES + "'\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_yaml(path)
    with pytest.raises(ConfigError, match="larger than"):
        parse_override("dataset.extra=" + "x" * (MAX_BYTES + 1))
    with pytest.raises(ConfigError, match=f"deeper than {MAX_DEPTH}"):
        loads("a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "x")
    with pytest.raises(ConfigError, match="nest|recursion"):  # libyaml refuses it itself
        loads("[" * 100_000 + "]" * 100_000, "x")


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "- " * 100_000 + "x", "{a: " * 50_000 + "1" + "}" * 50_000])
def test_deep_nesting_is_refused_before_composing_on_any_pyyaml(text: str, monkeypatch: pytest.MonkeyPatch):
    """A PyYAML without libyaml's nesting cap (pure Python here) composes recursively: a GPU machine's
    build crashed the worker on 100,000 brackets. The depth is refused from the flat event stream first."""
    monkeypatch.setattr(safe_yaml, "_BASE", yaml.SafeLoader)
    monkeypatch.setattr(safe_yaml, "_Loader", type("_PureLoader", (yaml.SafeLoader,), {}))
    with pytest.raises(ConfigError, match=f"line 1: nests deeper than {MAX_DEPTH} levels$"):
        loads(text, "x")


def test_a_big_document_fails_fast():
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="more than"):
        loads("[" + "1," * (MAX_BYTES // 2 - 2) + "1]", "x")
    assert time.perf_counter() - start < 20


def test_set_value_that_is_not_yaml_stays_a_string():
    assert parse_override("dataset.root=a: b: c") == ("dataset.root", "a: b: c")
    assert parse_override("dataset.root=2020-13-45") == ("dataset.root", "2020-13-45")
    assert parse_override("dataset.root=*undefined") == ("dataset.root", "*undefined")


def test_messages_never_quote_a_whole_value(tmp_path: Path):
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump({"model": {"hidden": "x" * 50_000}, "seed": 0}))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert len(str(e.value)) < 200 and "..." in str(e.value)
    assert len(short_repr(list(range(10**5)))) <= 80
    assert len(short_repr({"k" * 10**4: [1] * 10**4})) <= 80


def test_every_yaml_read_goes_through_safe_yaml():
    """No module of the harness parses YAML by itself (benchmark/safe_yaml.py is the one reader)."""
    root = Path(__file__).resolve().parent.parent
    offenders = []
    for package in ("benchmark", "data_prep", "baselines", "methods"):
        for f in (root / package).rglob("*.py"):
            text = f.read_text()
            if f.name != "safe_yaml.py" and any(s in text for s in ("yaml.safe_load", "yaml.load(", "yaml.full_load",
                                                                    "yaml.unsafe_load", "yaml.SafeLoader")):
                offenders.append(str(f.relative_to(root)))
    assert offenders == []


# --------------------------------------------------------------------------- fuzzing

FUZZ = settings(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                       HealthCheck.data_too_large])

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["fedavg", "synthetic", "node_cls", "gcn", "concat", "cpu", "auto", "", "null",
                                     "1e999", ".nan", "yes", "~"]))


def _vocabulary() -> tuple[list[str], dict[str, list[str]], dict[str, list[str]], dict[tuple[str, str], list]]:
    """Top-level keys, every section's option names, every section's component names, and per
    option the values at and just past its declared bounds (besides its default)."""
    options = all_options()
    sections = sorted({o.section for o in options if o.section})
    keys = {s: sorted({o.name for o in options if o.section == s}) + ["name"] for s in sections}
    names = {SECTIONS[kind]: sorted({n for k, n, _ in component_configs() if k == kind}) for kind in SECTIONS}
    near: dict[tuple[str, str], list] = {}
    for o in options:
        cands = near.setdefault((o.section, o.name), [])
        cands.append(o.default)
        for bound in ("min", "max", "above", "below"):
            b = o.meta.get(bound)
            if isinstance(b, (int, float)):
                cands += [b, b + 1, b - 1]
    return ["seed", *sections], keys, names, near


TOP, SECTION_KEYS, COMPONENTS, NEAR = _vocabulary()
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=5)


@st.composite
def run_configs(draw: Any) -> dict[Any, Any]:
    """A run-config mapping: mostly real sections, keys and component names, with wrong values,
    unknown keys, dotted keys and non-string keys mixed in."""
    out: dict[Any, Any] = {}
    for top in draw(st.lists(st.sampled_from(TOP + ["bogus", "model.hidden", "train.rounds"]), max_size=4)):
        if top not in SECTION_KEYS:
            out[top] = draw(values)
            continue
        body: dict[Any, Any] = {}
        for key in draw(st.lists(st.sampled_from(SECTION_KEYS[top]), max_size=4)):
            if key == "name" and top in COMPONENTS:
                body[key] = draw(st.one_of(st.sampled_from(COMPONENTS[top]), values))
            elif draw(st.integers(0, 3)):  # mostly a plausible value, so validation goes deep
                body[key] = draw(st.sampled_from(NEAR.get((top, key), [None])))
            else:
                body[key] = draw(values)
        if draw(st.integers(0, 4)) == 0:
            body[draw(st.one_of(st.text(max_size=5), st.integers(), st.booleans()))] = draw(values)
        out[top] = body if draw(st.integers(0, 19)) else draw(values)
    return out


def check_loads_or_refuses(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` works, or raises a BenchmarkError whose message is one line."""
    try:
        return fn(*args)
    except BenchmarkError as e:
        msg = str(e)
        assert msg and "\n" not in msg and "\r" not in msg, repr(msg)
        assert len(msg) < 2000, msg[:200]
        return None


@settings(FUZZ, max_examples=800)
@given(config=run_configs())
def test_fuzz_run_config_files(config: dict[Any, Any]):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.yaml"
        path.write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
        cfg = check_loads_or_refuses(load_config, path)
        assert cfg is None or isinstance(cfg, RunConfig)
        event("loaded" if cfg is not None else "refused")


yaml_text = st.text(alphabet=st.sampled_from(list("ab1.-:[]{},&*!|>'\"#%@?~<= \t\n\\") + ["\u00e9", "\u2028", "\x85",
                                                                                        "\x00", "\ufeff", "\ud800"]),
                    max_size=80)


@settings(FUZZ, max_examples=1500)
@given(text=yaml_text)
def test_fuzz_yaml_text(text: str):
    check_loads_or_refuses(loads, text, "fuzz")
    check_loads_or_refuses(parse_override, "dataset.extra=" + text)
    check_loads_or_refuses(load_config, None, ["seed=" + text])


@settings(FUZZ, max_examples=600)
@given(data=st.one_of(st.binary(max_size=60), yaml_text.map(lambda t: t.encode("utf-8", "surrogatepass")),
                      yaml_text.map(lambda t: t.encode("utf-16", "surrogatepass"))))
def test_fuzz_file_bytes(data: bytes):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.yaml"
        path.write_bytes(data)
        check_loads_or_refuses(load_config, path)
