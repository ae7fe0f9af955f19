"""Declarative option constraints, read from dataclass field metadata.

Every option of a config section or component ``Config`` states its constraints beside
its default::

    hidden: int = field(default=256, metadata={"help": "hidden size", "min": 1})

and :func:`check_option` enforces them when a value arrives from YAML or ``--set``, so a
new option is validated by declaring it. Recognized keys:

``min`` / ``max``
    inclusive bounds of a number.
``above`` / ``below``
    exclusive bounds of a number.
``positive``
    the number must be > 0 (short for ``above=0``).
``probability``
    the number must lie in [0, 1].
``choices``
    the value must be one of these; a callable returning them is called at check time
    (for choices held in a registry that fills as plugins load).
``pattern``
    a string must match this regular expression in full (``pattern_help`` says it in words).
``unbounded``
    an explicit statement that a numeric option takes any finite value.

Every size (a width, a count of nodes, clients, negatives or rounds) declares a ``max``: a
generous ceiling far above any paper's setting that refuses a typo's extra zeros in one line
before anything is allocated (``tests/test_size_bounds.py`` keeps every integer option so).

Numbers must be finite (no NaN or inf) whatever else is declared. Lists and mappings of
numbers are checked element by element. ``None`` (an optional option left unset) is
never checked. Cross-field rules stay in the dataclass's ``__post_init__``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from benchmark.errors import ConfigError
from benchmark.safe_yaml import clip, short_repr

NUMERIC_KEYS = ("min", "max", "above", "below", "positive", "probability", "unbounded")
CONSTRAINT_KEYS = NUMERIC_KEYS + ("choices", "pattern")


def _fmt(x: Any) -> str:
    """A bound or value as a user would type it (1 not 1.0 for whole floats in bounds), cut to one
    short line (a value may be anything a YAML file holds)."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10**60:
        return f"{'-' if x < 0 else ''}a {x.bit_length()}-bit integer"
    return short_repr(x) if isinstance(x, str) else clip(str(x))


def _check_number(where: str, value: float, meta: Mapping[str, Any]) -> None:
    """Finite, then every declared numeric bound."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value}")
    if meta.get("probability") and not 0.0 <= value <= 1.0:
        raise ConfigError(f"{where} must be in [0, 1], got {_fmt(value)}")
    if meta.get("positive") and not value > 0:
        raise ConfigError(f"{where} must be > 0, got {_fmt(value)}")
    above, below = meta.get("above"), meta.get("below")
    if above is not None and below is not None and not above < value < below:
        raise ConfigError(f"{where} must be in ({_fmt(above)}, {_fmt(below)}), got {_fmt(value)}")
    if above is not None and not value > above:
        raise ConfigError(f"{where} must be > {_fmt(above)}, got {_fmt(value)}")
    if below is not None and not value < below:
        low = meta.get("min")
        if low is not None:
            raise ConfigError(f"{where} must be in [{_fmt(low)}, {_fmt(below)}), got {_fmt(value)}")
        raise ConfigError(f"{where} must be < {_fmt(below)}, got {_fmt(value)}")
    lo, hi = meta.get("min"), meta.get("max")  # each side on its own: a ceiling of sizes is no range
    if lo is not None and value < lo:
        raise ConfigError(f"{where} must be >= {_fmt(lo)}, got {_fmt(value)}")
    if hi is not None and value > hi:
        raise ConfigError(f"{where} must be <= {_fmt(hi)}, got {_fmt(value)}")


def check_option(where: str, value: Any, meta: Mapping[str, Any]) -> None:
    """ConfigError naming ``where`` when ``value`` breaks a constraint declared in ``meta``."""
    if value is None:
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_option(f"{where}.{k}", v, meta)
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            check_option(f"{where}[{i}]", v, meta)
        return
    choices = resolve_choices(meta)
    if choices is not None and value not in choices:
        shown = ", ".join("null" if c is None else str(c) for c in choices)
        raise ConfigError(f"{where} must be one of {shown}, got {_fmt(value)}")
    pattern = meta.get("pattern")
    if pattern is not None and isinstance(value, str) and not re.fullmatch(pattern, value):
        raise ConfigError(f"{where} must be {meta.get('pattern_help', 'of the form ' + pattern)}, "
                          f"got {short_repr(value)}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        _check_number(where, value, meta)


def resolve_choices(meta: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The declared choices (calling a callable declaration), or None."""
    choices = meta.get("choices")
    if choices is None:
        return None
    return tuple(choices() if callable(choices) else choices)


def check_fields(cls: type, values: Mapping[str, Any], where: str) -> None:
    """Check the given values of ``cls``'s fields against each field's declared constraints."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in values.items():
        f = fields.get(name)
        if f is not None:
            check_option(f"{where}.{name}" if where else name, value, f.metadata)


# --------------------------------------------------------------------------- introspection


def base_types(tp: Any) -> set[Any]:
    """The non-None types of a field annotation (``int | None`` -> {int}; ``list[int]`` -> {list})."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        out: set[Any] = set()
        for a in typing.get_args(tp):
            if a is not type(None):
                out |= base_types(a)
        return out
    return {origin or tp}


def element_type(tp: Any) -> Any:
    """The element type of ``list[X]`` / ``dict[K, X]`` (optional wrappers removed), else ``tp``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return element_type(args[0]) if len(args) == 1 else tp
    if origin in (list, tuple):
        return typing.get_args(tp)[0]
    if origin is dict:
        return typing.get_args(tp)[1]
    return tp


def is_numeric(tp: Any) -> bool:
    """True for int / float options (also optional, and lists or mappings of them); bool is not a number."""
    inner = base_types(element_type(tp))
    return bool(inner & {int, float}) and bool not in inner


def undeclared_numeric_options(cls: type) -> list[str]:
    """Numeric fields of a Config dataclass that declare neither a bound nor ``unbounded``:
    options a validator could not check, so a new component must not have any."""
    hints = typing.get_type_hints(cls)
    return [f.name for f in dataclasses.fields(cls)
            if is_numeric(hints.get(f.name, f.type))
            and not (set(f.metadata) & {*NUMERIC_KEYS, "choices"})]


def constraints(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The constraint entries of a field's metadata."""
    return {k: v for k, v in meta.items() if k in CONSTRAINT_KEYS}


def describe(meta: Mapping[str, Any]) -> str:
    """Constraints in words, for ``list --options`` (empty when none is declared)."""
    parts = []
    if meta.get("probability"):
        parts.append("in [0, 1]")
    if meta.get("positive"):
        parts.append("> 0")
    for key, op in (("min", ">="), ("above", ">"), ("max", "<="), ("below", "<")):
        if meta.get(key) is not None:
            parts.append(f"{op} {_fmt(meta[key])}")
    choices = resolve_choices(meta)
    if choices is not None:
        parts.append("one of " + "|".join("null" if c is None else str(c) for c in choices))
    if meta.get("pattern") is not None:
        parts.append(meta.get("pattern_help", f"matches {meta['pattern']}"))
    return "; ".join(parts)
