"""The `leaderboard` verb: read every record store, write the markdown pages and the HTML page."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import BenchmarkError
from benchmark.report.fidelity_summary import store_fidelity
from benchmark.report.leaderboard.figures import plot_sections
from benchmark.report.leaderboard.html_page import render_html
from benchmark.report.leaderboard.markdown_page import render_markdown
from benchmark.report.leaderboard.sections import Section, collect_sections

HTML_NAME = "leaderboard.html"


@dataclass
class LeaderboardOutput:
    """What `build_leaderboard` wrote."""

    html: Path
    markdown: list[Path]
    figures: list[Path]
    sections: list[Section]


def build_leaderboard(results_dir: str | Path = "results", out_dir: str | Path = "tables",
                      html_path: str | Path | None = None, plots: bool = True) -> LeaderboardOutput:
    """Read every record store under ``results_dir``; write the markdown pages and the HTML page."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sections = collect_sections(results_dir)
    attach_fidelity(sections, results_dir)
    if plots:
        plot_sections(sections, out)
    md_paths = []
    for suite in dict.fromkeys(s.suite for s in sections):
        path = out / f"leaderboard_{suite}.md"
        path.write_text(render_markdown(sections, suite), encoding="utf-8")
        md_paths.append(path)
    html_file = Path(html_path) if html_path else out / HTML_NAME
    html_file.parent.mkdir(parents=True, exist_ok=True)
    html_file.write_text(render_html(sections, str(results_dir), html_file.parent), encoding="utf-8")
    figures = [p for s in sections for _, p in s.figures]
    return LeaderboardOutput(html=html_file, markdown=md_paths, figures=figures, sections=sections)


def attach_fidelity(sections: list[Section], results_dir: str | Path) -> None:
    """Each section's fidelity rows (its suite's tables against the paper's ranking); a table
    that cannot be built from the store becomes a note instead of stopping the leaderboard."""
    for sec in sections:
        try:
            sec.fidelity = store_fidelity(sec.suite, sec.scale, results_dir)
        except BenchmarkError as e:
            sec.notes.append(f"fidelity not computed: {e}")


def cmd_leaderboard(a: argparse.Namespace) -> int:
    """`leaderboard`: rebuild the pages and say where they are."""
    res = build_leaderboard(a.results, a.out, a.html, plots=a.plots)
    if not res.sections:
        print(f"no result records under {a.results}/; the page says so. Run a sweep first, e.g. "
              f"python run_benchmark.py sweep demo --scale tiny")
    for s in res.sections:
        n_cur = sum(r.current for r in s.rows)
        print(f"{s.suite}[{s.scale}]: {n_cur} current rows, {len(s.rows) - n_cur} superseded")
    for p in res.markdown:
        print(f"wrote {p}")
    print(f"wrote {res.html}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `leaderboard` verb with the CLI."""
    p = sub.add_parser("leaderboard", help="build the leaderboard: markdown per suite + one static HTML page")
    p.add_argument("--results", default="results", help="results directory (one folder per suite)")
    p.add_argument("--out", default="tables", help="output directory for the pages and figures")
    p.add_argument("--html", default=None, help=f"HTML page path (default: OUT/{HTML_NAME})")
    p.add_argument("--no-plots", dest="plots", action="store_false", help="skip the robustness figures")
    p.set_defaults(handler=cmd_leaderboard)
