"""Which config keys a suite's grid sets, and whether a cell's grid values describe what ran.

A record's ``params`` (its grid values) name its row in every table and leaderboard. A
``sweep --set`` on a key the grid sets would run one setting under another's name: ``--set
algorithm.name=fedprox`` over the demo grid stored FedProx's numbers under "fedavg",
"chance" and every other row. So a ``--set`` that touches a grid key (a dotted grid key, or
any config key a named-axis label sets) is refused, and before a cell runs its grid values
are checked against the merged config (:func:`params_disagreements`); the committed stores
are held to the same rule by a test.
"""

from __future__ import annotations

from typing import Any

from benchmark.dotted import flatten
from benchmark.errors import ConfigError
from benchmark.safe_yaml import clip, short_repr

#: a ``benchmark.sweep.Suite`` (grids, grid, axes, axis_overrides), typed loosely so this module
#: does not import the sweep that imports it
Suite = Any

_MISSING = object()


def _overlaps(a: str, b: str) -> bool:
    """Whether two dotted keys name the same option or one holds the other ('algorithm' holds
    'algorithm.name')."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def grid_config_keys(suite: Suite) -> dict[str, str]:
    """Every dotted config key the suite's grid sets at some scale, mapped to the grid key that
    sets it (a dotted grid key sets itself; a named axis sets every key of its labels)."""
    out: dict[str, str] = {}
    for grid in suite.grids or [suite.grid]:
        for key in grid:
            if key not in suite.axes:
                out.setdefault(key, key)
                continue
            for label in suite.axes[key]:
                for scale in ("tiny", "small", "paper"):
                    for dotted in flatten(suite.axis_overrides(key, label, scale)):
                        out.setdefault(dotted, key)
    return out


def refuse_grid_overrides(suite: Suite, overrides: dict[str, Any]) -> None:
    """One line when a ``--set`` key is (or holds, or lies inside) a key the grid sets."""
    owned = grid_config_keys(suite)
    for key in overrides:
        for dotted, axis in owned.items():
            if _overlaps(key, dotted):
                what = "a grid axis" if axis == dotted else f"set by the grid axis '{axis}'"
                raise ConfigError(
                    f"--set {clip(key)}: '{clip(dotted)}' is {what} of suite '{suite.name}', so every "
                    f"cell's record would name a setting that did not run; choose cells with --only "
                    f"{axis}=VALUE, or run a new method beside the baselines with --with-method NAME")


def _same(a: Any, b: Any) -> bool:
    """Equal as config values: 1 and 1.0 agree (YAML and JSON may type a number either way)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return bool(a == b)


def _get(config: dict[str, Any], dotted: str) -> Any:
    cur: Any = config
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def params_disagreements(suite: Suite, params: dict[str, Any], config: dict[str, Any],
                         scale: str) -> list[str]:
    """Where a cell's grid values do not describe ``config`` (empty when they all do): a dotted
    grid key whose config value differs, or a named-axis label whose overrides at ``scale`` the
    config does not hold."""
    out: list[str] = []
    for key, value in params.items():
        if key in suite.axes:
            if str(value) not in suite.axes[key]:
                out.append(f"{key}={clip(str(value), 40)}: no such label of axis '{key}'")
                continue
            expected = flatten(suite.axis_overrides(key, value, scale))
        else:
            expected = {key: value}
        for dotted, want in expected.items():
            got = _get(config, dotted)
            if got is _MISSING or not _same(got, want):
                shown = "absent" if got is _MISSING else short_repr(got)
                out.append(f"{key}={clip(str(value), 40)} but {dotted} is {shown}")
    return out


def check_params_describe_config(suite: Suite, cells: list[Any]) -> None:
    """Refuse to run a cell whose grid values would mislabel its record (one line, the first)."""
    for c in cells:
        wrong = params_disagreements(suite, c.params, c.config, c.scale)
        if wrong:
            raise ConfigError(f"suite '{suite.name}': a cell's grid values do not describe its config "
                              f"({wrong[0]}); its record would be mislabelled")


__all__ = ["check_params_describe_config", "grid_config_keys", "params_disagreements", "refuse_grid_overrides"]
