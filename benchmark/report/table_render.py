"""A built table as markdown and LaTeX: body, captions, footnotes, and the split of a wide table.
Part of :mod:`benchmark.report.tables`."""

from __future__ import annotations

import math
import re
from collections.abc import Hashable

from tabulate import tabulate

from benchmark.guard import SPREAD_EPSILON, TAIL_SHARE
from benchmark.learned import LEARNED_SES
from benchmark.report.fidelity import (
    MIN_METHODS,
    number_text,
    plural,
    tau_text,
)
from benchmark.report.flags import REFERENCE_MARGIN
from benchmark.report.markdown import MAX_MARKDOWN_COLUMNS
from benchmark.report.paired_tests import ALPHA, MIN_SEEDS
from benchmark.report.markdown import md_escape_prose as _md_escape
from benchmark.report.records import STD_DDOF
from benchmark.report.table_cells import _Layout
from benchmark.report.table_text import (
    _MD,
    _TEX,
    RowKey,
    _fmt_value,
    _Format,
    key_label,
    latex_escape,
    metric_label,
)


def _availability_text(layout: _Layout, fmt: _Format) -> str:
    """'Measured availability ...: Fed3: text 0.22, numeric 0.18; ...' (empty without data)."""
    if not layout.availability:
        return ""

    def share(lo: float, hi: float) -> str:
        return f"{lo:.2f}" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}{fmt.range_dash}{hi:.2f}"

    parts = []
    for group in layout.groups:
        mods = layout.availability.get(group)
        if not mods:
            continue
        covered = layout.covered_availability.get(group, {})

        def item(m: str) -> str:
            own = f"{m} {share(*mods[m])}"
            if m in covered and share(*covered[m]) != share(*mods[m]):
                own += f" ({share(*covered[m])} of the entities the data gives it)"
            return own

        text = ", ".join(item(m) for m in sorted(mods))
        label = layout.group_label(group) if group else ""
        parts.append(f"{label}: {text}" if label else text)
    return ("Measured availability (share of the clients' nodes or entities holding each modality, "
            "over the runs shown): " + fmt.esc("; ".join(parts)) + ".")


def _body(layout: _Layout, fmt: _Format, subcols: list[tuple[RowKey, str]] | None = None) -> list[list[str]]:
    spec = layout.spec
    subcols = layout.subcols if subcols is None else subcols
    body: list[list[str]] = []
    previous: RowKey | None = None
    for row in layout.rows:
        labels = []
        for level, nk in enumerate(row):
            same_prefix = previous is not None and previous[: level + 1] == row[: level + 1]
            blank = level < len(row) - 1 and same_prefix
            labels.append("" if blank else fmt.esc(layout.row_label(nk)))
        cells = [layout.cells[(row, group, metric)].render(fmt, spec.places(metric))
                 for group, metric in subcols]
        body.append(labels + cells)
        previous = row
    return body


def _sub_header(layout: _Layout, metric: str, fmt: _Format) -> str:
    text = fmt.esc(metric_label(metric, layout.spec.metric_labels))
    if metric in layout.spec.lower_is_better:
        text += " ↓" if fmt is _MD else r" $\downarrow$"
    return text


def _caption(layout: _Layout, title: str, fmt: _Format) -> str:
    spec = layout.spec
    shown = layout.shown_cells()
    ns = sorted({c.attempted for c in shown if c.kind == "value"})
    pct = [m for m in spec.metrics if m not in spec.raw_metrics]
    raw_m = [metric_label(m, spec.metric_labels) for m in spec.metrics if m in spec.raw_metrics]
    units = "Metrics in %" if pct else "Metrics"
    if raw_m and pct:
        units += f" ({', '.join(raw_m)} unscaled)"
    if not ns:
        seeds = "no successful runs"
    elif ns[-1] == 1:
        seeds = "single seed, mean only"
    else:
        n_text = str(ns[0]) if ns[0] == ns[-1] else f"{ns[0]}{fmt.range_dash}{ns[-1]}"
        seeds = f"mean{fmt.pm}sample std (ddof={STD_DDOF}) over {n_text} seeds"
        if any(c.kind == "value" and c.n == 1 for c in shown):
            seeds += "; cells with one successful seed show the mean only"
    parts = []
    if title:
        parts.append(fmt.esc(title.rstrip(".")) + ".")
    if spec.caption:
        parts.append(fmt.esc(spec.caption.rstrip(".")) + ".")
    parts.append(f"{fmt.esc(units)}: {seeds}.")
    measured = _availability_text(layout, fmt)
    if measured:
        parts.append(measured)
    if spec.emphasis:
        parts.append(_emphasis_text(layout))
    if spec.control is not None and any(not math.isnan(c.control) for c in shown):
        parts.append(fmt.esc(f"In brackets: the same method and column under the control ({spec.control.label}), "
                             "mean over its seeds from the same sweep."))
    if any(c.paper is not None for c in shown):
        parts.append("In parentheses: the number the original paper reports.")
    fidelity = _fidelity_text(layout, fmt)
    if fidelity:
        parts.append(fidelity)
    return " ".join(parts)


def _column_label(layout: _Layout, group: RowKey, metric: str, fmt: _Format) -> str:
    text = metric_label(metric, layout.spec.metric_labels)
    return f"{layout.group_label(group)}{fmt.label_sep}{text}" if group else text


def _emphasis_text(layout: _Layout) -> str:
    """What bold means, and how much of the table's order the seeds resolve."""
    text = ("In bold: every method tied for first in its column, i.e. not significantly below the column's best "
            f"(a repeated-measures F-test over the seeds, then one-sided paired t-tests against the best with "
            f"Holm's correction, {ALPHA:.0%} level; every method sees the same partition and masks in a given seed; "
            f"fewer than {MIN_SEEDS} common seeds resolve nothing).")
    tests = layout.column_tests
    if tests:
        resolved = sum(t.resolved for t in tests.values())
        done, total = (sum(v[i] for v in layout.adjacent_pairs.values()) for i in (0, 1))
        text += (f" {resolved} of {len(tests)} columns tell a method below the best; {done} of {total} adjacent "
                 f"pairs of methods are resolved (two-sided paired t-test, {ALPHA:.0%}, uncorrected); the rest are "
                 f"ties within seed noise.")
    return text


def _fidelity_text(layout: _Layout, fmt: _Format) -> str:
    """The caption's fidelity sentence (empty for a table without it); see benchmark.report.fidelity."""
    fid = layout.fidelity
    if fid is None:
        return ""
    t = fmt.tau
    if not fid.measured:
        return fmt.esc(f"Fidelity: no column has the paper's number and ours for {MIN_METHODS} or more rows, "
                       f"so no Kendall {t} is given.")
    per = ", ".join(f"{_column_label(layout, c.group, c.metric, fmt)} {number_text(c.tau)}" for c in fid.columns)
    left = f"; {plural(len(fid.skipped), 'column')} with fewer comparable rows left out" if fid.skipped else ""
    return fmt.esc(f"Fidelity: Kendall {t} between our ranking of the rows and the paper's = {tau_text(fid)} "
                   f"(mean of the per-column {t}-b over {plural(len(fid.columns), 'column')} and "
                   f"{plural(fid.n_methods, 'row')}; "
                   f"{round(100 * fid.confidence)}% bootstrap interval over seeds, {fid.draws} draws{left}); "
                   f"per column: {per}.")


def _footnotes(layout: _Layout, fmt: _Format) -> list[str]:
    notes = []
    partial = [(k, v) for k, v in layout.failures.items() if v[0] < v[1]]
    total = [(k, v) for k, v in layout.failures.items() if v[0] == v[1]]
    if partial:
        items = "; ".join(f"{layout.cell_label(*k)} ({nf} of {nt} seeds failed: {reason})"
                          for k, (nf, nt, reason) in partial)
        notes.append(f"{fmt.dagger} Some seeds failed; mean and std over the successful seeds only: "
                     + fmt.esc(items) + ".")
    if layout.excluded:
        items = "; ".join(f"{layout.cell_label(*k)}: {n} record(s) excluded, {reason}"
                          for k, (n, reason) in layout.excluded.items())
        notes.append(f"{fmt.ddagger} Cell mixed runs with different artifact recipes/protocols; only the most "
                     f"recent run group is averaged. " + fmt.esc(items) + ".")
    if total:
        items = "; ".join(f"{layout.cell_label(*k)} ({nf} seeds: {reason})" for k, (nf, _, reason) in total)
        notes.append("failed: all seeds failed, " + fmt.esc(items) + ".")
    shown = layout.shown_cells()
    if any(c.flags is not None and c.flags.collapsed for c in shown if c.kind == "value"):
        notes.append(f"{fmt.collapsed} Collapsed: at least one seed's scores are all equal (spread below "
                     f"{SPREAD_EPSILON:g}); the number measures no model.")
    if any(c.flags is not None and c.flags.unconverged for c in shown if c.kind == "value"):
        notes.append(f"{fmt.unconverged} Not converged: at least one seed's best round is in the last "
                     f"{TAIL_SHARE:.0%} of its rounds or its validation score was still rising "
                     f"(`check` lists them).")
    if layout.spec.fixed_budget:
        notes.append("Fixed budget by design: every cell runs the rounds the table is about, so convergence "
                     "is not judged (collapse and learning are).")
    if any(c.flags is not None and c.flags.unlearned for c in shown if c.kind == "value"):
        notes.append(f"{fmt.unlearned} Not learned: at least one seed's best validation score is within "
                     f"{LEARNED_SES:g} standard errors of its column's chance score (from the validation "
                     f"set's size) or never rose above its first evaluation; such a cell is not ranked "
                     f"(no bold, no rank, no Kendall tau).")
    if any(c.flags is not None and c.flags.below_reference for c in shown if c.kind == "value"):
        notes.append(f"{fmt.below} Below reference: a shared-model method that gains less than "
                     f"{1 - REFERENCE_MARGIN:.0%} of the linear reference's gain over chance in its column.")
    kinds = {c.kind for c in shown}
    if "na" in kinds:
        notes.append("N/A: metric not applicable to this method.")
    if "missing" in kinds:
        notes.append(f"{fmt.missing}: no result.")
    return notes


def _markdown_table(layout: _Layout, subcols: list[tuple[RowKey, str]]) -> str:
    spec = layout.spec
    headers = [_md_escape(key_label(k, spec.key_labels)) for k in spec.rows]
    for group, metric in subcols:
        sub = _sub_header(layout, metric, _MD)
        headers.append(f"{_md_escape(layout.group_label(group))} · {sub}" if group else sub)
    align = ["left"] * len(spec.rows) + ["right"] * len(subcols)
    return tabulate(_body(layout, _MD, subcols), headers=headers, tablefmt="github", colalign=align,
                    disable_numparse=True)


def _split_parts(layout: _Layout) -> list[tuple[str, list[tuple[RowKey, str]]]]:
    """(heading, sub-columns) of each markdown table: one per value of the first column key when
    ``split_wide`` is set and the whole table is wider than MAX_MARKDOWN_COLUMNS, else one."""
    spec = layout.spec
    if not spec.split_wide or len(spec.rows) + len(layout.subcols) <= MAX_MARKDOWN_COLUMNS:
        return [("", layout.subcols)]
    parts: dict[Hashable, list[tuple[RowKey, str]]] = {}
    for group, metric in layout.subcols:
        parts.setdefault(group[0], []).append((group, metric))
    key = spec.columns[0]
    out = []
    for nk, subcols in parts.items():
        label = spec.column_labels.get(nk) or f"{key_label(key, spec.key_labels)} = {_fmt_value(layout.raw.get(nk, nk))}"
        out.append((label, subcols))
    return out


def _markdown(layout: _Layout, title: str) -> tuple[str, list[str]]:
    tables = [(f"*{_md_escape(heading)}*\n\n" if heading else "") + _markdown_table(layout, subcols)
              for heading, subcols in _split_parts(layout)]
    notes = _footnotes(layout, _MD)
    parts = ([f"**{_md_escape(title)}**"] if title else []) + tables + [_caption(layout, title, _MD)] + notes
    return "\n\n".join(parts) + "\n", notes


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _latex(layout: _Layout, title: str) -> str:
    spec = layout.spec
    n_keys = len(spec.rows)
    colspec = "l" * n_keys + "".join(
        "c" * sum(1 for g, _ in layout.subcols if g == group) for group in layout.groups
    )
    lines = [r"\begin{table}[t]", r"\centering", rf"\caption{{{_caption(layout, title, _TEX)}}}"]
    if title:
        lines.append(rf"\label{{tab:{_slug(title)}}}")
    lines += [rf"\begin{{tabular}}{{{colspec}}}", r"\toprule"]
    if spec.columns:
        top = [""] * n_keys
        rules = []
        start = n_keys + 1
        for group in layout.groups:
            width = sum(1 for g, _ in layout.subcols if g == group)
            top.append(rf"\multicolumn{{{width}}}{{c}}{{{latex_escape(layout.group_label(group))}}}")
            rules.append(rf"\cmidrule(lr){{{start}-{start + width - 1}}}")
            start += width
        lines.append(" & ".join(top) + r" \\")
        lines.append(" ".join(rules))
    second = [latex_escape(key_label(k, spec.key_labels)) for k in spec.rows]
    second += [_sub_header(layout, m, _TEX) for _, m in layout.subcols]
    lines += [" & ".join(second) + r" \\", r"\midrule"]
    for i, (row, cells) in enumerate(zip(layout.rows, _body(layout, _TEX))):
        if n_keys > 1 and i and layout.rows[i - 1][0] != row[0]:
            lines.append(r"\addlinespace")
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    notes = _footnotes(layout, _TEX)
    if notes:
        lines += [r"\par\smallskip", r"{\footnotesize"] + [note + r"\par" for note in notes] + ["}"]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"
