"""LaTeX tables (issue 25): every text that reaches a .tex file is escaped, so a method name
such as ``\\input{/etc/hostname}\\immediate\\write18{id}`` prints as written and runs nothing;
the committed tables are what the escaping generates."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmark.report.tables import latex_escape, make_table, write_table

ROOT = Path(__file__).resolve().parent.parent
EVIL = r"\input{/etc/hostname}\immediate\write18{id}"

# Every command the table writer emits on its own; anything else in a .tex came from data.
WRITER_COMMANDS = {
    "begin", "end", "centering", "caption", "label", "toprule", "midrule", "bottomrule", "cmidrule",
    "multicolumn", "addlinespace", "par", "smallskip", "footnotesize", "textbf", "underline",
    "textbackslash", "textasciicircum", "textasciitilde", "textless", "textgreater",
    "pm", "tau", "downarrow", "dagger", "ddagger", "alpha",
}


def commands(tex: str) -> set[str]:
    """The control words of ``tex`` (``\\{`` and other escaped symbols are not commands)."""
    return set(re.findall(r"\\([A-Za-z]+)", tex.replace("\\\\", "")))


def _rec(alg: str, seed: int, acc: float, *, status: str = "ok", reason: str = "", modality: str = "text",
         rate: float = 0.3) -> dict[str, Any]:
    ok = status == "ok"
    return {"suite": "s", "scale": "tiny", "cell_id": f"{alg}-{rate}-{seed}",
            "params": {"algorithm.name": alg, "missing.rate": rate}, "seed": seed, "status": status,
            "error": None if ok else {"round": 1, "reason": reason},
            "metrics": {"test/accuracy": acc} if ok else {}, "availability": {modality: 0.5},
            "timestamp": "2025-01-01T00:00:00"}


def _table(name: str, *, spec_text: str = "plain") -> Any:
    """A table whose method name, failure reason, modality, labels and caption all carry ``name``."""
    recs = [_rec(a, s, 0.5 + 0.1 * i + 0.01 * s, modality=name) for i, a in enumerate(("local", name)) for s in (0, 1)]
    recs += [_rec("fedavg", 0, 0.0, status="failed", reason=name), _rec("fedavg", 1, 0.7)]
    spec = {"rows": "algorithm.name", "columns": "missing.rate", "metrics": ["accuracy"],
            "caption": f"caption {spec_text}", "row_labels": {"local": f"Local {spec_text}"},
            "column_labels": {0.3: f"30% {spec_text}"}, "key_labels": {"algorithm.name": f"Method {spec_text}"},
            "metric_labels": {"accuracy": f"Acc {spec_text}"}, "paper": {"local": {0.3: {"accuracy": 50.0}}}}
    return make_table(recs, spec, title=f"Title {spec_text}")


def test_a_crafted_method_name_lands_escaped_in_the_tex_file(tmp_path):
    out = _table(EVIL, spec_text=EVIL)
    _, tex_path = write_table(out, tmp_path, "evil")
    tex = tex_path.read_text()
    escaped = r"\textbackslash{}input\{/etc/hostname\}\textbackslash{}immediate\textbackslash{}write18\{id\}"
    assert escaped in tex
    assert tex.count(escaped) >= 8  # row, caption, title, labels, footnote reason, availability
    assert not {"input", "immediate", "write"} & commands(tex)
    assert commands(tex) <= WRITER_COMMANDS


@pytest.mark.parametrize("char,escaped", [
    ("\\", r"\textbackslash{}"), ("{", r"\{"), ("}", r"\}"), ("$", r"\$"), ("&", r"\&"), ("#", r"\#"),
    ("^", r"\textasciicircum{}"), ("_", r"\_"), ("%", r"\%"), ("~", r"\textasciitilde{}"),
    ("<", r"\textless{}"), (">", r"\textgreater{}"),
])
def test_every_special_character_is_escaped(char, escaped):
    assert latex_escape(f"a{char}b") == f"a{escaped}b"


def test_control_characters_cannot_end_a_caption_paragraph():
    assert latex_escape("a\n\nb\x00c\td") == "a  b c d"


def test_harmless_math_is_kept_and_any_other_math_is_text():
    assert latex_escape(r"rate $\alpha$, $^{\dagger}$, $\tau$-b, $x_1 + y^2$") == \
        r"rate $\alpha$, $^{\dagger}$, $\tau$-b, $x_1 + y^2$"
    assert latex_escape(r"$\input{x}$") == r"\$\textbackslash{}input\{x\}\$"
    assert latex_escape("$x^^5cinput$") == r"\$x\textasciicircum{}\textasciicircum{}5cinput\$"  # TeX's ^^ escape
    assert latex_escape(r"$\pminput$") == r"\$\textbackslash{}pminput\$"
    assert latex_escape("a–b — ±") == r"a--b --- $\pm$"


NAMES = st.lists(st.sampled_from(list("\\{}$&#^_%~<>|@!aZ09 -\n\t\x00±") + ["input", "write18", "alpha"]),
                 max_size=20).map("".join)


def _balanced_and_inert(tex: str) -> None:
    """No command beyond the writer's, braces balanced, no bare '&' (a cell), '%' (a comment),
    '#' (a parameter) or '^^' (TeX's character-code escape)."""
    assert commands(tex) <= WRITER_COMMANDS
    body = re.sub(r"\\[{}$&#%_]", "", tex.replace("\\\\", ""))
    depth = 0
    for ch in body:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert depth == 0 and "^^" not in body


@settings(max_examples=1000, deadline=None)
@given(text=NAMES)
def test_no_text_adds_a_command_a_cell_or_a_brace(text):
    out = latex_escape(text)
    _balanced_and_inert(out)
    assert not re.search(r"(?<!\\)[&%#]", out) and "\n" not in out


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES)
def test_no_name_changes_the_shape_of_a_table(name):
    tex = _table(name or "x", spec_text=name).latex
    _balanced_and_inert(tex)
    rows = tex[tex.index(r"\midrule"):tex.index(r"\bottomrule")].splitlines()[1:]
    assert len(rows) == 3 and all(len(re.findall(r"(?<!\\)&", line)) == 1 for line in rows)


@pytest.mark.parametrize("suite", ["fedmgs_table4", "fedmpo_ablation", "fedmbridge_table3"])
def test_committed_tables_are_what_the_escaping_generates(suite, tmp_path):
    """These captions hold '->', 'S^c' or '{...}', which now print as written."""
    from benchmark.report.suite_tables import is_pending, make_suite_tables, suite_records
    from benchmark.sweep import load_suite

    loaded = load_suite(suite)
    records = suite_records(loaded, "small", ROOT / "results")
    for table in make_suite_tables(loaded, records, "small", is_pending(loaded, "small", ROOT / "results")):
        write_table(table.output, tmp_path, table.stem)
        for ext in ("tex", "md"):
            assert (ROOT / "tables" / f"{table.stem}.{ext}").read_text() == \
                (tmp_path / f"{table.stem}.{ext}").read_text(), f"{table.stem}.{ext}"
