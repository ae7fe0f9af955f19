"""The leaderboard's one self-contained HTML page: filters, a sortable table per suite and scale,
figures as base64 PNG and each row's provenance one click away.

The page must open from a file with no server and no network, so its style sheet and script
(``static/leaderboard.css`` and ``static/leaderboard.js``, package data) are inlined into it.
"""

from __future__ import annotations

import base64
import html
import json
import math
import numbers
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from benchmark.report.fidelity_summary import describe
from benchmark.report.leaderboard.columns import columns, failure_text, fmt_param
from benchmark.report.leaderboard.rows import Row, finite
from benchmark.report.leaderboard.sections import Section
from benchmark.results import now_iso

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

FILTERS = (("track", "Track"), ("task", "Task"), ("dataset", "Dataset"), ("missing", "Missing setting"),
           ("rate", "Missing rate"))
STATIC = "static"
SORT_HELP_ID = "sort-help"
SORT_HELP = "Sortable column: press Enter or Space, or click, to sort; again to reverse."


def _header_title(hint: str) -> str:
    """A header's tooltip: what the column holds (its config key for a grid column), then how to sort."""
    return (f"{hint}; " if hint else "") + "click, or press Enter or Space, to sort"


def static_dir() -> Traversable:
    """The page's static files, inside the installed package (package data)."""
    return resources.files(__package__) / STATIC


def asset(name: str, tag: str) -> str:
    """A static file of the page, framed by newlines, ready to go between ``<tag>`` and ``</tag>``.

    A missing file means a broken install (pyproject's package-data lists the folder), and a
    file holding ``</tag`` would end its element early, so both are errors that name the file.
    """
    path = static_dir() / name
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"leaderboard asset {STATIC}/{name} is missing from the installed "
                                f"package {__package__}; reinstall fedmm-bench") from None
    if f"</{tag}" in text.lower():
        raise ValueError(f"leaderboard asset {STATIC}/{name} contains '</{tag}', which would end "
                         f"the page's <{tag}> element early")
    return "\n" + text.strip("\n") + "\n"


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _sort_attr(value: Any) -> str:
    """The data-sort text: plain decimal for any real number (numpy's included), '' for none/NaN."""
    if value is None or isinstance(value, (bool, str)):
        return "" if value is None else str(value)
    if isinstance(value, numbers.Real):
        f = float(value)
        return repr(f) if math.isfinite(f) else ""
    return str(value)


def _filter_values(section: Section, row: Row) -> dict[str, str]:
    return {"track": section.track_of(row), "task": row.task, "dataset": row.dataset, "missing": row.missing,
            "rate": fmt_param(row.rate)}


def _provenance_html(section: Section, row: Row) -> str:
    """The details a reader needs to trust or reproduce a row, behind one click."""
    items: list[tuple[str, str]] = [
        ("suite / scale", f"{row.suite} / {row.scale}"),
        ("cell", json.dumps(row.params, sort_keys=True, default=str)),
        ("git sha", ", ".join(row.prov_values("git_sha")) or "unknown"),
        ("uncommitted changes", ", ".join(sorted({str(bool((r.provenance or {}).get("git_dirty")))
                                                   for r in row.records}))),
        ("artifact recipe", row.recipe or "unknown"),
        ("protocol", row.protocol or "unknown"),
        ("config hash", ", ".join(row.prov_values("config_hash")) or "unknown"),
    ]
    for rec in sorted(row.records, key=lambda r: str(r.seed)):
        prov = rec.provenance or {}
        status = rec.status
        if status != "ok":
            status = f"failed: {rec.reason or 'unknown error'}"
        items.append((f"seed {rec.seed}", f"artifact {prov.get('artifact_hash', 'unknown')}; {status}; "
                                          f"{rec.timestamp}"))
    items.append(("device", ", ".join(row.prov_values("device")) or "unknown"))
    for v in row.prov_values("versions"):
        try:
            versions = json.loads(v)
            items.append(("versions", ", ".join(f"{k} {versions[k]}" for k in sorted(versions))))
        except (json.JSONDecodeError, TypeError, AttributeError):
            items.append(("versions", v))
    subs = {json.dumps(r.submission, sort_keys=True) for r in row.records if r.submission}
    for s in sorted(subs):
        items.append(("submission", s))
    dl = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in items)
    rate = f" at missing rate {fmt_param(row.rate)}" if row.rate is not None else ""
    head = f"Provenance: {section.method_label(row)}{rate}" + ("" if row.current else " (superseded)")
    return (f"<details><summary>{_esc(', '.join(row.code_versions))}</summary><div class=\"prov\">"
            f"<h3>{_esc(head)}</h3><dl>{dl}</dl><p>Click outside or press Escape to close.</p></div></details>")


def _section_html(section: Section, index: int) -> str:
    cols = columns(section)
    # Each header is a sortable column header a keyboard reaches (Tab) and sorts (Enter, Space);
    # aria-sort says how it is sorted now ("none" until sorted), the help text says how to sort.
    head = "".join(f'<th scope="col" role="columnheader" tabindex="0" aria-sort="none" '
                   f'aria-describedby="{SORT_HELP_ID}" data-key="{_esc(c.key)}" '
                   f'data-type="{"num" if c.numeric else "text"}" data-hint="{_esc(c.hint)}" '
                   f'title="{_esc(_header_title(c.hint))}">{_esc(c.label)}</th>' for c in cols)
    body = []
    for row in section.rows:
        attrs = " ".join(f'data-{k}="{_esc(v)}"' for k, v in _filter_values(section, row).items())
        cls = " ".join(x for x in ("superseded" if not row.current else "",
                                   "has-failures" if row.failed else "") if x)
        cells = []
        for c in cols:
            css = " ".join(x for x in ("num" if c.numeric else "", "seeds" if c.key == "seeds" else "") if x)
            content = _provenance_html(section, row) if c.key == "code" else _esc(c.text(row))
            title = f' title="{_esc(failure_text(row))}"' if c.key == "seeds" and row.failed else ""
            css_attr = f' class="{css}"' if css else ""
            cells.append(f'<td data-col="{_esc(c.key)}" data-sort="{_esc(_sort_attr(c.sort(row)))}"'
                         f"{css_attr}{title}>{content}</td>")
        cls_attr = f' class="{cls}"' if cls else ""
        body.append(f'<tr {attrs} data-current="{1 if row.current else 0}"{cls_attr}>{"".join(cells)}</tr>')
    figures = []
    for title, path in section.figures:
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        figures.append(f'<figure><img alt="{_esc(title)}" src="data:image/png;base64,{data}">'
                       f"<figcaption>{_esc(title)}</figcaption></figure>")
    notes = "".join(f'<p class="note">{_esc(n)}</p>' for n in section.notes)
    desc = f'<p class="desc">{_esc(section.description)}</p>' if section.description else ""
    if section.fidelity:
        items = "".join(f"<li>{_esc(describe(f))}</li>" for f in section.fidelity)
        desc += (f'<div class="fidelity"><p>Fidelity to the paper\'s ranking (Kendall τ between our ranking of '
                 f"the methods and the paper's):</p><ul>{items}</ul></div>")
    return (f'<section class="suite" id="s{index}" data-suite="{_esc(section.suite)}" '
            f'data-scale="{_esc(section.scale)}"><h2>{_esc(section.suite)} <small>scale: {_esc(section.scale)}'
            f"</small></h2>{desc}"
            f'<div class="scroll"><table class="board"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>'
            f'<p class="empty" hidden>No rows of this suite match the filters.</p>'
            f'<div class="figures">{"".join(figures)}</div>{notes}</section>')


def render_html(sections: Sequence[Section], source: str) -> str:
    """The whole static page: filters, one sortable table per suite and scale, figures."""
    options = []
    for key, label in FILTERS:
        values = sorted({_filter_values(s, r)[key] for s in sections for r in s.rows},
                        key=lambda v: (finite(v) is None, finite(v) or 0.0, v))
        opts = '<option value="">all</option>' + "".join(f'<option value="{_esc(v)}">{_esc(v)}</option>'
                                                         for v in values)
        options.append(f'<label>{_esc(label)}<select data-filter="{key}">{opts}</select></label>')
    n_old = sum(1 for s in sections for r in s.rows if not r.current)
    options.append(f'<label><input type="checkbox" id="show-superseded"> show superseded runs ({n_old})</label>')
    options.append('<span id="row-count" class="meta"></span>')
    body = "".join(_section_html(s, i) for i, s in enumerate(sections)) or \
        '<p class="empty">No result records yet: run a sweep, then the leaderboard.</p>'
    rules = ("Each row is one suite cell under one artifact recipe and protocol; seeds are averaged only "
             "within a row, never across recipes or protocols. Metrics: test score at the best validation "
             "round, mean ± sample std over seeds; a header marked (%) is in percent, any other metric is a "
             "raw value (e.g. MRR and Hits@k of the KG suites, costs), shown with three decimals unless the "
             "suite sets its own. Robustness AUC: area under the primary metric vs missing rate over the rate "
             "range. Worst client / client spread: lowest per-client score and population std across clients "
             "of the primary metric, in its units. Click a column header, or focus it with Tab and press Enter "
             "or Space, to sort; hover a header for its config key; click a Code entry for the row's provenance.")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>FedMM-Bench leaderboard</title><style>{asset('leaderboard.css', 'style')}</style></head><body>"
            f"<header><h1>FedMM-Bench leaderboard</h1><p class=\"meta\">Built {_esc(now_iso())} from "
            f"{_esc(source)}. {_esc(rules)}</p></header>"
            f'<p id="{SORT_HELP_ID}" class="visually-hidden">{_esc(SORT_HELP)}</p>'
            f'<div id="filters">{"".join(options)}</div>{body}'
            f"<script>{asset('leaderboard.js', 'script')}</script></body></html>\n")
