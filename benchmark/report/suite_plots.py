"""A suite's ``plots:`` section drawn: every plot kind by name, each entry checked against
its function's keys. Kept apart from ``plots`` (the generic figures and the helpers the other
figure modules draw with), so those modules import ``plots`` and nothing imports back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.record import Record
from benchmark.errors import ConfigError, closest
from benchmark.report.contrast_figure import CONTRAST_PLOT_KINDS
from benchmark.report.kg_figures import KG_PLOT_KINDS
from benchmark.report.plots import PLOT_KINDS
from benchmark.report.rank_figure import RANK_PLOT_KINDS
from benchmark.report.scatter_figure import SCATTER_PLOT_KINDS
from benchmark.report.stacked_figure import STACKED_PLOT_KINDS


def plot_kinds() -> dict[str, Any]:
    """Every plot kind a suite's ``plots:`` may name: the generic ones of ``plots``, the KG
    track's figures, the rank chart, the contrast chart, the stacked bars and score vs cost."""
    return {**PLOT_KINDS, **KG_PLOT_KINDS, **RANK_PLOT_KINDS, **CONTRAST_PLOT_KINDS, **STACKED_PLOT_KINDS,
            **SCATTER_PLOT_KINDS}


def suite_plots(suite: str, specs: Sequence[Mapping[str, Any]] | None, records: Sequence[Record | Mapping[str, Any]],
                out_prefix: str | Path) -> list[Path]:
    """Every figure of a suite's ``plots:`` section; each entry picks its function with ``kind``
    (robustness, the default; heatmap; round_curve; stacked_bar...) and passes the other keys as its arguments.
    Files are ``<out_prefix>_<name>.png/.pdf``."""
    import inspect

    paths: list[Path] = []
    for raw in specs or []:
        if not isinstance(raw, Mapping):
            raise ConfigError(f"suite '{suite}': each plots entry must be a mapping, got {raw!r}")
        spec = dict(raw)
        kind = str(spec.pop("kind", "robustness"))
        kinds = plot_kinds()
        if kind not in kinds:
            raise ConfigError(f"suite '{suite}': unknown plot kind '{kind}'{closest(kind, list(kinds))}; "
                              f"valid: {', '.join(kinds)}")
        fn = kinds[kind]
        name = spec.pop("name", f"{spec.get('metric', 'metric')}_vs_{spec.get('x', 'x')}")
        allowed = [k for k in inspect.signature(fn).parameters if k not in ("records", "out_stem")]
        for key in spec:
            if key not in allowed:
                raise ConfigError(f"suite '{suite}': unknown {kind} plot key '{key}'{closest(key, allowed)}; "
                                  f"valid: name, kind, {', '.join(allowed)}")
        paths += fn(records, out_stem=f"{out_prefix}_{name}", **spec)
    return paths
