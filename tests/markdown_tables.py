"""Reading markdown tables in tests: where each table is and how many columns it has."""

from __future__ import annotations

import re

_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)+\|?\s*$")


def table_widths(text: str) -> list[tuple[int, int]]:
    """(line number, columns) of every markdown table in ``text``, read off its delimiter row
    (``|---|---|``), outside fenced code blocks."""
    out = []
    fenced = False
    lines = text.splitlines()
    for n, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced and n > 1 and lines[n - 2].lstrip().startswith("|") and _DELIMITER.match(line):
            out.append((n - 1, len(line.strip().strip("|").split("|"))))
    return out
