"""How a table prints: labels of keys and metrics, number formats, and LaTeX escaping that keeps a
caption's math. Part of :mod:`benchmark.report.tables`."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from benchmark.report.markdown import md_escape_prose as _md_escape

_UPPER_TOKENS = {"auc", "ap", "f1", "mae", "mse", "rmse", "mrr", "ndcg", "roc", "pr", "acc"}


RowKey = tuple[Hashable, ...]


def _fmt_value(raw: Any) -> str:
    if isinstance(raw, float):
        return f"{raw:g}"
    return str(raw)


def key_label(key: str, labels: Mapping[str, str] | None = None) -> str:
    """Readable header for a param key: 'algorithm.name' -> 'Algorithm', 'missing.rate' -> 'Missing rate'."""
    if labels and key in labels:
        return labels[key]
    parts = key.split(".")
    base = parts[-2] if len(parts) > 1 and parts[-1] == "name" else " ".join(parts)
    base = base.replace("_", " ")
    return base[:1].upper() + base[1:]


def metric_label(metric: str, labels: Mapping[str, str] | None = None) -> str:
    """Readable metric header: 'macro_f1' -> 'Macro F1', 'val/accuracy' -> 'Accuracy (val)'."""
    if labels and metric in labels:
        return labels[metric]
    split, name = metric.rsplit("/", 1) if "/" in metric else ("", metric)
    words = [w.upper() if w.lower() in _UPPER_TOKENS else w.capitalize() for w in name.split("_") if w]
    text = " ".join(words) or metric
    return f"{text} ({split})" if split and split != "test" else text


# Every character LaTeX treats as markup, as text that prints it. In the OT1 font '<' and '>'
# print as inverted marks, so they are spelled out too.
_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
    "^": r"\textasciicircum{}", "_": r"\_", "%": r"\%", "~": r"\textasciitilde{}",
    "<": r"\textless{}", ">": r"\textgreater{}",
}


_LATEX_TEXT = {"±": r"$\pm$", "—": "---", "–": "--"}


_LATEX_CHARS = re.compile("[" + re.escape("".join(_LATEX_SPECIALS) + "".join(_LATEX_TEXT)) + r"]|[\x00-\x1f\x7f]")


# Math that can only typeset symbols: these commands, letters, digits, a few operators, and
# sub/superscripts of those. No other command, no '^^' (TeX's character-code escape), no
# unbalanced brace, so a caption may say $\alpha$ or $^{\dagger}$ and a name cannot run code.
_MATH_COMMANDS = ("alpha beta gamma delta epsilon varepsilon zeta eta theta lambda mu nu xi pi rho sigma "
                  "tau phi varphi chi psi omega Delta Gamma Lambda Omega Phi Pi Sigma Theta "
                  "pm mp times cdot leq geq le ge neq approx sim infty downarrow uparrow rightarrow "
                  "leftarrow dagger ddagger ldots cdots")


_MATH_CMD = r"\\(?:" + "|".join(_MATH_COMMANDS.split()) + r")(?![A-Za-z])"


_MATH_ATOM = rf"(?:{_MATH_CMD}|[A-Za-z0-9])"


_MATH_SCRIPT = rf"[\^_](?:{_MATH_ATOM}|\{{(?:{_MATH_ATOM}|[ ,.+\-])*\}})"


_SAFE_MATH = re.compile(rf"(\$(?:{_MATH_CMD}|{_MATH_SCRIPT}|[A-Za-z0-9 +\-=.,()/|<>])+\$)")


def _latex_text(text: str) -> str:
    """``text`` as LaTeX that prints it: every special escaped, control characters as spaces."""
    return _LATEX_CHARS.sub(lambda m: _LATEX_SPECIALS.get(m.group(), _LATEX_TEXT.get(m.group(), " ")), text)


def latex_escape(text: str) -> str:
    r"""Escape everything that reaches a .tex file (method names and other record values,
    labels, captions, notes) so it prints as written and can run no command
    (``\input``, ``\write18``); only math from the harmless set above (``$\alpha$``) is kept."""
    pieces = _SAFE_MATH.split(str(text))
    return "".join(piece if i % 2 else _latex_text(piece) for i, piece in enumerate(pieces))


@dataclass(frozen=True)
class _Format:
    esc: Callable[[str], str]
    pm: str
    bold: Callable[[str], str]
    underline: Callable[[str], str]
    dagger: str
    ddagger: str
    missing: str
    range_dash: str
    tau: str
    label_sep: str  # between a column group's label and a metric's
    collapsed: str = "×"      # a seed's model collapsed (every score equal)
    unconverged: str = "°"    # a seed stopped before converging
    below: str = "▽"          # below the linear reference (benchmark/report/flags.py)
    unlearned: str = "∅"      # a seed did not learn: no better than chance, or never rose (benchmark/learned.py)


_MD = _Format(
    esc=_md_escape, pm=" ± ", bold=lambda s: f"**{s}**", underline=lambda s: f"<u>{s}</u>",
    dagger="†", ddagger="‡", missing="—", range_dash="–", tau="τ", label_sep=" · ",
)


_TEX = _Format(
    esc=latex_escape, pm=r" $\pm$ ", bold=lambda s: rf"\textbf{{{s}}}",
    underline=lambda s: rf"\underline{{{s}}}", dagger=r"$^{\dagger}$", ddagger=r"$^{\ddagger}$",
    missing="---", range_dash="--", tau=r"$\tau$", label_sep=" / ",
    collapsed=r"$^{\times}$", unconverged=r"$^{\circ}$", below=r"$^{\triangledown}$", unlearned=r"$^{\emptyset}$",
)
