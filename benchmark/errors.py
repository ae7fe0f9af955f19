"""User-facing errors.

Anything raised as a :class:`BenchmarkError` is a problem with the user's input (config,
names, data files). The CLI prints it as one line and exits with code 2, writing nothing.
Everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class BenchmarkError(Exception):
    """Bad input: printed as one line, exit code 2."""


class ConfigError(BenchmarkError):
    """Malformed or invalid configuration."""


class DataError(BenchmarkError):
    """A data file is missing or malformed."""


class ContractError(BenchmarkError):
    """A plugged-in component broke its contract with the engine: an algorithm hook returned
    the wrong type, a dataset loader returned a malformed graph. One line naming the
    component, the hook and what was expected (``benchmark/contracts.py``)."""


def closest(name: str, choices: Iterable[str]) -> str:
    """Return ' (did you mean 'x'?)' for the closest choice, or '' when none is close."""
    match = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else ""


def unknown(kind: str, name: str, choices: Iterable[str]) -> ConfigError:
    """Error for an unknown name, listing the valid ones and suggesting the closest."""
    choices = sorted(choices)
    return ConfigError(f"unknown {kind} '{name}'{closest(name, choices)}; valid: {', '.join(choices)}")


def warn_rebuild(path: object, why: str) -> None:
    """One line on stderr: a cache file could not be used and is being rebuilt."""
    import sys

    print(f"warning: cache {path} {why}; rebuilding it", file=sys.stderr)


def first_line(exc: BaseException) -> str:
    """One line of an exception's message: the first non-empty one, or for torch's weights-only
    refusals (a boilerplate paragraph, then the reason) the line that gives the reason."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if lines and lines[0].startswith("Weights only load failed"):
        reasons = [ln for ln in lines[1:] if not ln.startswith(("Please file", "Check the documentation"))]
        if reasons:
            return reasons[0]
    return lines[0] if lines else type(exc).__name__
