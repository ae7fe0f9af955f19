"""The leaderboard's robustness figures: primary metric vs missing rate, one line per method,
drawn by the plots module from the current rows' records only."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.errors import ConfigError, DataError
from benchmark.report.leaderboard.columns import fmt_param
from benchmark.report.leaderboard.rows import ROBUSTNESS_X, Row
from benchmark.report.leaderboard.sections import SETTING_HEADERS, Section, readable_key
from benchmark.report.tables import key_label, metric_label

MAX_PLOTS_PER_SECTION = 8
# The HTML page embeds each figure as a thumbnail and links the full-size file: the width it shows
# a figure at (static/leaderboard.css, ``figure img``) and the colours of its palette.
THUMBNAIL_WIDTH = 560
THUMBNAIL_COLORS = 64


def thumbnail(path: Path, width: int = THUMBNAIL_WIDTH, colors: int = THUMBNAIL_COLORS) -> tuple[bytes, int, int]:
    """(PNG bytes, width, height) of a figure as the HTML page embeds it: on white, no wider than
    ``width`` pixels, in a palette of ``colors`` (a line plot needs no more), so a page of figures
    stays small. The figure file is only read; it keeps its full size for the page to link to."""
    import io

    from PIL import Image  # matplotlib, which drew the figure, requires Pillow

    with Image.open(path) as image:
        rgba = image.convert("RGBA")
    canvas = Image.new("RGBA", rgba.size, "white")
    canvas.alpha_composite(rgba)
    rgb = canvas.convert("RGB")
    if rgb.width > width:
        rgb = rgb.resize((width, max(1, round(rgb.height * width / rgb.width))), Image.Resampling.LANCZOS)
    small = rgb.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    small.save(buf, format="PNG", optimize=True)
    return buf.getvalue(), small.width, small.height


def _setting(row: Row) -> dict[str, Any]:
    """The row's params apart from the curve's x (missing rate) and hue (method)."""
    return {k: v for k, v in row.params.items() if k not in (ROBUSTNESS_X, "algorithm.name")}


def setting_text(sec: Section, setting: dict[str, Any]) -> str:
    """A figure's fixed parameters as the suite's table shows them: each key's header (its
    ``key_labels``, else the leaderboard's column header) and each value's ``row_labels`` label,
    e.g. 'Dirichlet alpha: 0.5, Dataset: synthetic' rather than 'partition.alpha=0.5, dataset.name=synthetic'."""
    parts = []
    for key, value in setting.items():
        text = fmt_param(value)
        parts.append(f"{_header(sec, key)}: {sec.value_labels.get(key, {}).get(text, text)}")
    return ", ".join(parts)


def _header(sec: Section, key: str) -> str:
    """A grid key as the section's table heads it ('task.name' -> 'Task', never 'Name')."""
    found = sec.param_labels.get(key) or SETTING_HEADERS.get(key)
    return found or (key_label(key) if key.endswith(".name") else readable_key(key))


def figure_title(sec: Section, setting: dict[str, Any]) -> str:
    """The title of a section's robustness figure: suite, scale, metric label, fixed setting."""
    metric = sec.metric_labels.get(sec.primary) or metric_label(sec.primary)
    rest = setting_text(sec, setting)
    return f"{sec.suite} [{sec.scale}]: {metric} vs missing rate" + (f" ({rest})" if rest else "")


def plot_sections(sections: Sequence[Section], out_dir: Path) -> None:
    """Robustness curves (primary metric vs missing rate, one line per method) per section.

    Only current rows are drawn, one figure per combination of the other grid parameters, so a
    line never mixes recipes, protocols or settings. A figure that cannot be drawn becomes a
    note on the page instead of stopping the leaderboard.
    """
    for sec in sections:
        _plot_section(sec, out_dir)
        drawn = {p.stem for _, p in sec.figures}
        for old in out_dir.glob(f"leaderboard_{sec.suite}_{sec.scale}_robustness*"):
            if old.suffix in (".png", ".pdf") and old.stem not in drawn:
                old.unlink()  # a figure of an earlier page (a row set that is gone): never left to mislead


def _plot_section(sec: Section, out_dir: Path) -> None:
    """The figures of one section, appended to ``sec.figures`` (notes for those not drawn)."""
    from benchmark.report.robustness_figure import robustness_plot

    current = [r for r in sec.rows if r.current and r.ok]
    if len({r.rate for r in current if r.rate is not None}) < 2:
        return
    combos: dict[str, dict[str, Any]] = {}
    for r in current:
        combos.setdefault(json.dumps(_setting(r), sort_keys=True, default=str), _setting(r))
    if len(combos) > MAX_PLOTS_PER_SECTION:
        sec.notes.append(f"{len(combos)} parameter settings; figures drawn for the first "
                         f"{MAX_PLOTS_PER_SECTION} only (the table has all).")
    for i, (key, rest) in enumerate(list(combos.items())[:MAX_PLOTS_PER_SECTION]):
        records = [rec for r in current if json.dumps(_setting(r), sort_keys=True, default=str) == key
                   for rec in r.records]
        rates = {(rec.params or {}).get(ROBUSTNESS_X) for rec in records}
        if ROBUSTNESS_X not in (records[0].params or {}) or len(rates - {None}) < 2:
            continue  # one missing rate: no curve to draw
        title = figure_title(sec, rest)
        suffix = f"_{i}" if len(combos) > 1 else ""
        stem = out_dir / f"leaderboard_{sec.suite}_{sec.scale}_robustness{suffix}"
        try:
            paths = robustness_plot(records, x=ROBUSTNESS_X, metric=sec.primary, hue="algorithm.name",
                                    out_stem=stem, title=title, hue_labels=sec.method_labels() or None,
                                    percent=sec.percent.get(sec.primary, True))
        except (ConfigError, DataError) as e:
            sec.notes.append(f"figure not drawn: {e}")
            continue
        sec.figures.append((title, next(p for p in paths if p.suffix == ".png")))
