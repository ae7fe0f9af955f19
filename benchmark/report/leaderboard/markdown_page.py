"""The leaderboard's markdown page of one suite: a table of current and one of superseded runs
per scale, failed seeds, figures and notes; every text from the records is escaped."""

from __future__ import annotations

from collections.abc import Sequence

from tabulate import tabulate

from benchmark.report.leaderboard.columns import columns, failure_text
from benchmark.report.leaderboard.sections import Section
from benchmark.report.markdown import md_escape


def render_markdown(sections: Sequence[Section], suite: str) -> str:
    """The markdown page of one suite: a table per scale, figures, provenance notes."""
    parts = [f"# Leaderboard: {md_escape(suite)}", ""]
    own = [s for s in sections if s.suite == suite]
    if own and own[0].description:
        parts += [own[0].description, ""]
    parts += ["Rows are suite cells under one artifact recipe and protocol; seeds are averaged only within a "
              "row. Metrics are test scores at the best validation round, mean ± sample std over seeds"
              " (percent unless raw). Robustness AUC: area under the primary metric vs missing rate divided "
              "by the rate range. Superseded rows come from an older recipe or protocol of the same cell and "
              "are never averaged with the current one.", ""]
    for sec in own:
        cols = columns(sec)
        parts += [f"## {md_escape(sec.suite)} [scale: {md_escape(sec.scale)}]", ""]
        for label, rows in (("Current runs", [r for r in sec.rows if r.current]),
                            ("Superseded runs", [r for r in sec.rows if not r.current])):
            if not rows:
                continue
            body = [[md_escape(c.text(r)) for c in cols] + [md_escape(r.recipe[:12] or "-"),
                                                             md_escape(r.protocol[:12] or "-")] for r in rows]
            head = [md_escape(c.label) for c in cols] + ["Artifact recipe", "Protocol"]
            parts += [f"### {label}", "", tabulate(body, headers=head, tablefmt="github", disable_numparse=True), ""]
            fails = [(r, failure_text(r)) for r in rows if r.failed]
            for r, text in fails:
                parts.append(f"- failed seeds of {md_escape(r.method)} ({md_escape(r.cell_key)}): {md_escape(text)}")
            if fails:
                parts.append("")
        for title, path in sec.figures:
            parts += [f"![{md_escape(title)}]({path.name})", ""]
        for note in sec.notes:
            parts += [f"> {md_escape(note)}", ""]
    return "\n".join(parts).rstrip() + "\n"
