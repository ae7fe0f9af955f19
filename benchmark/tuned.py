"""The hyperparameters finished tuning studies chose, as every sweep of the suite runs them.

Why here, below the sweep and the ``tune`` verb: a sweep reads the choices by default (a
ranking of untuned defaults measures the defaults, issue 54), the tuner writes them, and the
tests that hold committed stores to their suites read them too; none of those should import
another to find one YAML file.

``results/tuning/<suite>/<scale>.yaml`` (written by ``tune``) holds one entry per study,
named ``<method>|<setting>`` (the cell's grid values but the method's; a suite's control
keys, such as shuffled content, are left out, so a control cell runs its setting's choice).
A study applies to its cells once it has used its whole budget: a study still running changes
nothing, so a store never mixes a half-tuned setting with a finished one. What it chose is
merged over the cell's config (never over a key the cell's grid values set), and the record the
cell makes names the study, its trial and its budget (``Record.tuning``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from benchmark.config import deep_merge, expand_dotted
from benchmark.errors import DataError
from benchmark.dotted import flatten
from benchmark.safe_yaml import loads

TUNING_DIR = "tuning"


def control_keys(suite: Any) -> set[str]:
    """The grid keys of the suite's control cells (``control.where``), which share the study of
    the setting they control."""
    return set(((suite.spec.get("control") or {}).get("where") or {}))


def setting_of(params: dict[str, Any], ignored: set[str] | frozenset[str] = frozenset()) -> str:
    """A cell's grid values but the method's (and ``ignored``), as ``k=v`` pairs: what a study
    is tuned for."""
    own = {k: v for k, v in sorted(params.items()) if not k.startswith("algorithm.") and k not in ignored}
    return ",".join(f"{k}={v}" for k, v in own.items()) or "all"


def study_name(cell: Any, ignored: set[str] | frozenset[str] = frozenset()) -> str:
    """One study per (method, setting): ``fedmpo|setting=dy``."""
    return f"{cell.algorithm}|{setting_of(cell.params, ignored)}"


def tuning_paths(results_dir: str | Path, suite: str, scale: str) -> tuple[Path, Path]:
    """(journal, chosen-parameters YAML) of a suite at a scale."""
    folder = Path(results_dir) / TUNING_DIR / suite
    return folder / f"{scale}.journal", folder / f"{scale}.yaml"


def read_choices(path: Path) -> dict[str, dict[str, Any]]:
    """The studies' entries of a choices file ({} when there is none); a malformed entry is a
    one-line ``DataError`` naming the file and the study."""
    if not path.is_file():
        return {}
    data = loads(path.read_text(encoding="utf-8"), str(path)) or {}
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a mapping of study name -> choice, got {type(data).__name__}")
    for name, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("params"), dict) \
                or not isinstance(entry.get("budget"), int) or not isinstance(entry.get("trials"), int):
            raise DataError(f"{path}: study '{name}' needs params (a mapping), budget and trials (integers)")
    return data


def _overlaps(a: str, b: str) -> bool:
    """Whether two dotted keys name the same option or one holds the other."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def cell_grid_keys(suite: Any, cell: Any) -> set[str]:
    """The config keys this cell's grid values set: its dotted grid keys, and every key its
    named-axis labels set at its scale (a retrieval column's ``task.temperature`` is the
    paper's, while a link column leaves the same key to the tuner)."""
    keys: set[str] = set()
    for key, value in cell.params.items():
        if key in suite.axes:
            keys |= set(flatten(suite.axis_overrides(key, value, cell.scale)))
        else:
            keys.add(key)
    return keys


def finished(entry: dict[str, Any]) -> bool:
    """Whether a study has used its budget and chose something (a complete trial)."""
    return entry["trials"] >= entry["budget"] and entry.get("trial") is not None


def apply_choices(suite: Any, cells: list[Any], results_dir: str | Path) -> list[Any]:
    """``cells`` with each finished study's choice merged into its cells' configs and named in
    ``cell.tuning``; cells without a finished study are returned as they are."""
    if not cells:
        return cells
    _, path = tuning_paths(results_dir, suite.name, cells[0].scale)
    choices = read_choices(path)
    if not choices:
        return cells
    ignored = control_keys(suite)
    out = []
    for cell in cells:
        name = study_name(cell, ignored)
        entry = choices.get(name)
        if entry is None or not finished(entry):
            out.append(cell)
            continue
        owned = cell_grid_keys(suite, cell)
        params = {k: v for k, v in entry["params"].items() if not any(_overlaps(k, o) for o in owned)}
        tuning = {"study": name, "trial": entry["trial"], "budget": entry["budget"],
                  "value": entry.get("value"), "params": params,
                  "file": f"{TUNING_DIR}/{suite.name}/{cell.scale}.yaml"}
        out.append(dataclasses.replace(cell, config=deep_merge(cell.config, expand_dotted(params)), tuning=tuning))
    return out


__all__ = ["TUNING_DIR", "apply_choices", "cell_grid_keys", "control_keys", "finished", "read_choices", "setting_of", "study_name",
           "tuning_paths"]
