"""Nested config mappings as dotted keys ({'a': {'b': 1}} -> {'a.b': 1}): what stale-record
checks compare and what trackers log as params. Imports nothing of the project, so any
module may use it."""

from __future__ import annotations

from typing import Any


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1} (a config as dotted keys)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
