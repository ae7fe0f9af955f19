"""The leaderboard's one self-contained HTML page: filters, a sortable table per suite and scale,
figures and each row's provenance one click away.

The page must open from a file with no server and no network, so its style sheet and script
(``static/leaderboard.css`` and ``static/leaderboard.js``, package data) are inlined into it.

It must also stay small (the stores hold thousands of rows: ``PAGE_BUDGET``), so it is written
compactly and the script fills in what follows from it, once, before anything sorts or filters:

* a cell names its column only through its header (``data-key``; the script sets each cell's
  ``data-col`` and the numeric columns' class), and carries ``data-sort`` only where sorting by
  its text would not order the rows as its value does (the script gives every other cell its
  text, or in a numeric column the number its text starts with; see ``Column.sorts_as_shown``);
* a row's filter values are the texts of its track, task, dataset, missing and rate cells;
* a section's provenance is one JSON block (each string that repeats kept once), drawn into a
  row's panel when its Code entry is opened;
* a figure is a small palette PNG (:func:`figures.thumbnail`) linking to the full-size file,
  which stays beside the page; the page itself needs none of them.
"""

from __future__ import annotations

import base64
import html
import json
import math
import numbers
import os
import re
from collections import Counter
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from benchmark.report.fidelity_summary import describe
from benchmark.report.leaderboard.columns import Column, columns, failure_text, fmt_param
from benchmark.report.leaderboard.figures import thumbnail
from benchmark.report.leaderboard.rows import Row, finite
from benchmark.report.leaderboard.sections import Section
from benchmark.results import now_iso

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

# The filters: each key is a column's key too, and a row's value is that column's text.
FILTERS = (("track", "Track"), ("task", "Task"), ("dataset", "Dataset"), ("missing", "Missing setting"),
           ("rate", "Missing rate"))
STATIC = "static"
SORT_HELP_ID = "sort-help"
SORT_HELP = "Sortable column: press Enter or Space, or click, to sort; again to reverse."
PROVENANCE_CLASS = "provenance"  # the <script type="application/json"> of a section's provenance
# What the page may weigh, in bytes (tests/test_leaderboard_page.py holds the committed page to it).
PAGE_BUDGET = 3_000_000
# The number a numeric cell's text starts with; static/leaderboard.js has the same pattern.
LEADING_NUMBER = re.compile(r"[-+]?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


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


def text_sort(text: str, numeric: bool) -> str:
    """The sort value the page's script gives a cell written without one: its text, or in a
    numeric column the number its text starts with ('' when it starts with none, as '-')."""
    if not numeric:
        return text
    m = LEADING_NUMBER.match(text.strip())
    return m.group() if m else ""


def explicit_sort(col: Column, row: Row, text: str) -> str | None:
    """A cell's ``data-sort`` where the page must write it: None where the script's value from
    the text (:func:`text_sort`) orders the rows as the column's sort value does."""
    if col.sorts_as_shown:
        return None
    value = _sort_attr(col.sort(row))
    derived = text_sort(text, col.numeric)
    if col.numeric and value and derived:
        return None if float(value) == float(derived) else value
    return None if value == derived else value


def _json_script(data: Any, css_class: str) -> str:
    """``data`` as a JSON block the script reads; '<' is escaped, so no text can end the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" class="{css_class}">{text}</script>'


def _filter_values(cols: dict[str, Column], row: Row) -> dict[str, str]:
    """The row's value of each filter: the text of the filter's column, as the script reads it."""
    return {key: cols[key].text(row) for key, _ in FILTERS}


def provenance_items(section: Section, row: Row) -> tuple[str, list[tuple[str, str]]]:
    """(heading, [(label, value), ...]): what a reader needs to trust or reproduce a row."""
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
    rate = f" at missing rate {fmt_param(row.rate)}" if row.rate is not None else ""
    head = f"Provenance: {section.method_label(row)}{rate}" + ("" if row.current else " (superseded)")
    return head, items


def provenance_data(section: Section) -> dict[str, Any]:
    """The section's provenance as the script reads it, each repeated string kept once.

    ``rows`` holds, per row in page order, ``[heading, shape, value, value, ...]``: ``shapes[shape]``
    is the row's list of labels (most rows of a section share one), and the heading and each
    value is a string, or the index in ``strings`` of a string the section repeats (git shas,
    versions, ...)."""
    entries = [provenance_items(section, row) for row in section.rows]
    counts = Counter(text for head, items in entries for text in (head, *(value for _, value in items)))
    strings: list[str] = []
    index: dict[str, int] = {}
    shapes: dict[tuple[str, ...], int] = {}

    def ref(text: str) -> str | int:
        if counts[text] < 2:
            return text
        if text not in index:
            index[text] = len(strings)
            strings.append(text)
        return index[text]

    rows = []
    for head, items in entries:
        shape = shapes.setdefault(tuple(label for label, _ in items), len(shapes))
        rows.append([ref(head), shape, *(ref(value) for _, value in items)])
    return {"shapes": [list(labels) for labels in shapes], "strings": strings, "rows": rows}


def _row_html(cols: list[Column], row: Row) -> str:
    cells = []
    for c in cols:
        text = c.text(row)
        sort = explicit_sort(c, row, text)
        attrs = "" if sort is None else f' data-sort="{_esc(sort)}"'
        if c.key == "seeds" and row.failed:
            attrs += f' title="{_esc(failure_text(row))}"'
        # the Code entry opens the row's provenance, which the script draws from the section's JSON
        content = f"<details><summary>{_esc(text)}</summary></details>" if c.key == "code" else _esc(text)
        cells.append(f"<td{attrs}>{content}")
    cls = " ".join(x for x in ("superseded" if not row.current else "", "has-failures" if row.failed else "") if x)
    cls_attr = f' class="{cls}"' if cls else ""
    # A cell's and a row's end tags are optional in HTML (the next <td>, <tr> or </tbody> ends
    # them): left out, as thousands of rows would spend a quarter of a megabyte on them.
    return f'<tr{cls_attr}>{"".join(cells)}'


def figure_href(path: Path, html_dir: Path | None) -> str:
    """The link from the page to a full-size figure: relative to the page's folder (the figures
    sit beside it in ``tables/``), so it holds wherever the folder is copied."""
    rel = path.name if html_dir is None else os.path.relpath(path.resolve(), Path(html_dir).resolve())
    return quote(Path(rel).as_posix())


def _figure_html(title: str, path: Path, html_dir: Path | None) -> str:
    data, width, height = thumbnail(path)
    src = base64.b64encode(data).decode("ascii")
    href = _esc(figure_href(path, html_dir))
    return (f'<figure><a href="{href}"><img alt="{_esc(title)}" width="{width}" height="{height}" '
            f'src="data:image/png;base64,{src}"></a><figcaption>{_esc(title)} '
            f'(<a href="{href}">full size</a>)</figcaption></figure>')


def _section_html(section: Section, cols: list[Column], index: int, html_dir: Path | None) -> str:
    # Each header is a sortable column header a keyboard reaches (Tab) and sorts (Enter, Space);
    # aria-sort says how it is sorted now ("none" until sorted), the help text says how to sort.
    head = "".join(f'<th scope="col" role="columnheader" tabindex="0" aria-sort="none" '
                   f'aria-describedby="{SORT_HELP_ID}" data-key="{_esc(c.key)}" '
                   f'data-type="{"num" if c.numeric else "text"}" data-hint="{_esc(c.hint)}" '
                   f'title="{_esc(_header_title(c.hint))}">{_esc(c.label)}</th>' for c in cols)
    body = "".join(_row_html(cols, row) for row in section.rows)
    figures = "".join(_figure_html(title, path, html_dir) for title, path in section.figures)
    notes = "".join(f'<p class="note">{_esc(n)}</p>' for n in section.notes)
    desc = f'<p class="desc">{_esc(section.description)}</p>' if section.description else ""
    if section.fidelity:
        items = "".join(f"<li>{_esc(describe(f))}</li>" for f in section.fidelity)
        desc += (f'<div class="fidelity"><p>Fidelity to the paper\'s ranking (Kendall τ between our ranking of '
                 f"the methods and the paper's):</p><ul>{items}</ul></div>")
    # Wide tables scroll inside their own box (both ways, its header row pinned), so every
    # column, the Guard and Code columns on the right included, is in reach on any screen.
    return (f'<section class="suite" id="s{index}" data-suite="{_esc(section.suite)}" '
            f'data-scale="{_esc(section.scale)}"><h2>{_esc(section.suite)} <small>scale: {_esc(section.scale)}'
            f"</small></h2>{desc}"
            f'<div class="scroll"><table class="board"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>"
            f'<p class="empty" hidden>No rows of this suite match the filters.</p>'
            f"{_json_script(provenance_data(section), PROVENANCE_CLASS)}"
            f'<div class="figures">{figures}</div>{notes}</section>')


def render_html(sections: Sequence[Section], source: str, html_dir: str | Path | None = None) -> str:
    """The whole static page: filters, one sortable table per suite and scale, figures.

    ``html_dir`` is the folder the page is written to; its links to the full-size figures are
    relative to it (to the bare file names when None)."""
    folder = Path(html_dir) if html_dir is not None else None
    cols = [columns(s) for s in sections]
    values: dict[str, set[str]] = {key: set() for key, _ in FILTERS}
    for sec, sec_cols in zip(sections, cols):
        by_key = {c.key: c for c in sec_cols}
        for row in sec.rows:
            for key, value in _filter_values(by_key, row).items():
                values[key].add(value)
    options = []
    for key, label in FILTERS:
        ordered = sorted(values[key], key=lambda v: (finite(v) is None, finite(v) or 0.0, v))
        opts = '<option value="">all</option>' + "".join(f'<option value="{_esc(v)}">{_esc(v)}</option>'
                                                         for v in ordered)
        options.append(f'<label>{_esc(label)}<select data-filter="{key}">{opts}</select></label>')
    n_old = sum(1 for s in sections for r in s.rows if not r.current)
    options.append(f'<label><input type="checkbox" id="show-superseded"> show superseded runs ({n_old})</label>')
    options.append('<span id="row-count" class="meta"></span>')
    body = "".join(_section_html(s, c, i, folder) for i, (s, c) in enumerate(zip(sections, cols))) or \
        '<p class="empty">No result records yet: run a sweep, then the leaderboard.</p>'
    rules = ("Each row is one suite cell under one artifact recipe and protocol; seeds are averaged only "
             "within a row, never across recipes or protocols. Metrics: test score at the best validation "
             "round, mean ± sample std over seeds; a header marked (%) is in percent, any other metric is a "
             "raw value (e.g. MRR and Hits@k of the KG suites, costs), shown with three decimals unless the "
             "suite sets its own. Robustness AUC: area under the primary metric vs missing rate over the rate "
             "range. Worst client / client spread: lowest per-client score and population std across clients "
             "of the primary metric, in its units. Click a column header, or focus it with Tab and press Enter "
             "or Space, to sort; hover a header for its config key; click a Code entry for the row's provenance; "
             "click a figure for its full size.")
    noscript = ("<noscript><p class=\"note\">Sorting, the filters and each row's provenance need JavaScript; "
                "the markdown pages beside this one (leaderboard_SUITE.md) hold the same tables.</p></noscript>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>FedMM-Bench leaderboard</title><style>{asset('leaderboard.css', 'style')}</style></head><body>"
            f"<header><h1>FedMM-Bench leaderboard</h1><p class=\"meta\">Built {_esc(now_iso())} from "
            f"{_esc(source)}. {_esc(rules)}</p>{noscript}</header>"
            f'<p id="{SORT_HELP_ID}" class="visually-hidden">{_esc(SORT_HELP)}</p>'
            f'<div id="filters">{"".join(options)}</div>{body}'
            f"<script>{asset('leaderboard.js', 'script')}</script></body></html>\n")
