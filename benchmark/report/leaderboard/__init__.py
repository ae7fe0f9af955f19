"""The leaderboard: every suite's records as sortable, filterable tables.

``python run_benchmark.py leaderboard`` reads ``results/<suite>/<scale>.jsonl`` and writes

* ``tables/leaderboard_<suite>.md``: one markdown page per suite (a table per scale), and
* ``tables/leaderboard.html``: one self-contained static page (inlined CSS/JS, each plot as a
  small embedded PNG linking to its full-size file, no server, no network) with click-to-sort
  columns in tables that scroll, filters by track, task, dataset and missing setting, the
  robustness curves, and each row's provenance one click away. It is written compactly, so
  thousands of rows stay within a few megabytes (``html_page.PAGE_BUDGET``).

A row is one *cell* of a suite (its grid parameters) under one ``(artifact_recipe, protocol)``
pair, as :func:`benchmark.report.records.comparable_groups` groups them for tables and plots
too: records whose artifact recipe (the federated data without the seed) or protocol hash
(dataset, split, task, training, model) differ are never averaged together, they become
separate rows. The newest pair of a cell is its *current* row; older pairs stay on the page as
*superseded* rows (hidden until asked for), so a number never silently mixes two code or data
versions, and every row names the git commits that made it.

Beyond the task metrics each row carries the robustness AUC (area under the primary metric
vs missing rate, over the current rows of the same method and setting, normalised by the rate
range), the worst client's score and the spread (population std) across clients of the primary
metric at the selected round, bytes communicated per round and seconds per round.

Modules: ``rows`` (the row model), ``sections`` (a store -> ordered rows with the suite's
labels), ``columns`` (what both pages show), ``markdown_page``, ``html_page`` (with
``static/leaderboard.css`` and ``static/leaderboard.js``), ``figures`` and ``verb``.
"""

from benchmark.report.leaderboard.rows import Row, Stat, group_rows, record_scalars
from benchmark.report.leaderboard.sections import Section, collect_sections
from benchmark.report.leaderboard.verb import LeaderboardOutput, build_leaderboard

__all__ = ["LeaderboardOutput", "Row", "Section", "Stat", "build_leaderboard", "collect_sections", "group_rows",
           "record_scalars"]
