"""The leaderboard's markdown page of one suite: per scale, the fidelity of the suite's tables to
the paper's ranking, then current and superseded runs, each as a table of scores and a table of
clients, cost and provenance (a row numbered alike in both), failed seeds, figures and notes;
every text from the records is escaped.

One table of all the columns would be 17-23 columns wide, more than a reader's screen holds;
no table here is wider than ``MAX_MARKDOWN_COLUMNS``. The HTML page keeps one table per section
(it scrolls and sorts)."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from benchmark.report.fidelity_summary import describe
from benchmark.report.leaderboard.columns import Column, columns, failure_text
from benchmark.report.leaderboard.rows import Row
from benchmark.report.leaderboard.sections import Section
from benchmark.report.markdown import MAX_MARKDOWN_COLUMNS, md_escape

# The columns that start every table of a row set, so a row is found in each by its number.
KEY_HEADERS = ("#", "Method")
PART_TITLES = {"setting": "Scores", "cost": "Clients, cost and provenance"}


def _part_tables(cols: list[Column], rows: list[Row], method: Column) -> list[tuple[str, str]]:
    """(title, markdown table) per part: the setting and scores, then clients, cost and provenance
    (with the artifact recipe and protocol); a part wider than the limit is cut into pieces."""
    extra_cost = [("Artifact recipe", lambda r: r.recipe[:12] or "-"), ("Protocol", lambda r: r.protocol[:12] or "-")]
    parts = {
        "setting": [(c.label, c.text) for c in cols if c.part in ("setting", "score") and c.key != method.key],
        "cost": [(c.label, c.text) for c in cols if c.part == "cost"] + extra_cost,
    }
    width = MAX_MARKDOWN_COLUMNS - len(KEY_HEADERS)
    out = []
    for part, fields in parts.items():
        pieces = [fields[i:i + width] for i in range(0, len(fields), width)]
        for n, piece in enumerate(pieces, 1):
            title = PART_TITLES[part] + (f" ({n}/{len(pieces)})" if len(pieces) > 1 else "")
            head = list(KEY_HEADERS) + [md_escape(label) for label, _ in piece]
            body = [[str(i), md_escape(method.text(r))] + [md_escape(text(r)) for _, text in piece]
                    for i, r in enumerate(rows, 1)]
            out.append((title, tabulate(body, headers=head, tablefmt="github", disable_numparse=True)))
    return out


def render_markdown(sections: Sequence[Section], suite: str) -> str:
    """The markdown page of one suite: a table per scale, figures, provenance notes."""
    parts = [f"# Leaderboard: {md_escape(suite)}", ""]
    own = [s for s in sections if s.suite == suite]
    if own and own[0].description:
        parts += [own[0].description, ""]
    parts += ["Rows are suite cells under one artifact recipe and protocol; seeds are averaged only within a "
              "row. Metrics are test scores at the best validation round, mean ± sample std over seeds; a "
              "header marked (%) is in percent, any other metric is a raw value (e.g. MRR and Hits@k of the KG "
              "suites, costs), shown with three decimals unless the suite sets its own. Robustness AUC: area "
              "under the primary metric vs missing rate divided by the rate range. Superseded rows come from "
              "an older recipe or protocol of the same cell, or from a setting the suite no longer runs, and "
              "are never averaged with the current one. Each "
              "set of rows is printed as two tables, scores and then clients, cost and provenance; # numbers a "
              "row alike in both.", ""]
    for sec in own:
        cols = columns(sec)
        method = next(c for c in cols if c.key == "method")
        parts += [f"## {md_escape(sec.suite)} [scale: {md_escape(sec.scale)}]", ""]
        keys = [(c.label, c.key[len("param:"):]) for c in cols if c.key.startswith("param:")]
        if keys:
            named = "; ".join(f"{md_escape(label)} = {md_escape(key)}" for label, key in keys)
            parts += [f"Grid parameter columns: {named}.", ""]
        if sec.fidelity:
            parts += ["Fidelity to the paper's ranking (Kendall τ between our ranking of the methods and the "
                      "paper's, see `fidelity.md`):", ""]
            parts += [f"- {md_escape(describe(f))}" for f in sec.fidelity] + [""]
        for label, rows in (("Current runs", [r for r in sec.rows if r.current]),
                            ("Superseded runs", [r for r in sec.rows if not r.current])):
            if not rows:
                continue
            parts += [f"### {label}", ""]
            for title, table in _part_tables(cols, rows, method):
                parts += [f"#### {title}", "", table, ""]
            fails = [(r, failure_text(r)) for r in rows if r.failed]
            for r, text in fails:
                parts.append(f"- failed seeds of {md_escape(sec.method_label(r))} ({md_escape(r.cell_key)}): "
                             f"{md_escape(text)}")
            if fails:
                parts.append("")
        for title, path in sec.figures:
            parts += [f"![{md_escape(title)}]({path.name})", ""]
        for note in sec.notes:
            parts += [f"> {md_escape(note)}", ""]
    return "\n".join(parts).rstrip() + "\n"
