"""Markdown the project generates: escaping for text placed in it (tables, headings, list items)
and the widest table it commits.

Names and labels come from result records and suite files, i.e. from users: an algorithm
called ``a|b`` must not add a table column, ``<script>`` must not become HTML when the page
is rendered, and a backtick must not open a code span that swallows the rest of the row.
"""

from __future__ import annotations

# The widest markdown table the project commits: a wider one does not fit a reader's screen, so
# leaderboard pages split their sections and a paper table can split per dataset (``split_wide``).
MAX_MARKDOWN_COLUMNS = 14

# Backslash first, so the escapes added below are not themselves escaped.
_REPLACEMENTS = (
    ("\\", "\\\\"),
    ("|", "\\|"),
    ("`", "\\`"),
    ("*", "\\*"),
    ("<", "&lt;"),
    (">", "&gt;"),
)


def md_escape_prose(text: object) -> str:
    """Lighter escaping for text the project writes (suite captions, labels, footnotes):
    no table-cell break and no tag, but ``->``, ``$\\alpha$``, emphasis and code spans stay
    readable in the raw file as their authors wrote them."""
    return str(text).replace("|", "\\|").replace("<", "&lt;")


def md_escape(text: object) -> str:
    """``text`` as inert markdown on one line: no table-cell break, tag, code span or emphasis."""
    out = " ".join(str(text).splitlines())
    for old, new in _REPLACEMENTS:
        out = out.replace(old, new)
    return out
