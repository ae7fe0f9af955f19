"""A method's search space, read from ``tune`` metadata beside the options it searches.

Why here and not in a tuning file: a range belongs to the option it bounds, so it is declared
where the option is (``field(metadata={..., "tune": {...}})``), in the core's shared options
(``benchmark/config.py``: learning rate, weight decay, local epochs, hidden size, dropout) and
in each algorithm's ``Config`` (FedProx's ``mu``, FedMGS's ``lambda_rec`` ...). The task says
which shared options apply to it (``Task.tuned_options``: a KG model has no GNN dropout).

A ``tune`` entry is ``{"low": a, "high": b}`` (``"log": true`` for a log scale; integers when
the option is an ``int``) or ``{"choices": (...)}``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from benchmark import registry as R
from benchmark.config import ModelConfig, RunConfig, TrainConfig, component_config
from benchmark.errors import ConfigError

SHARED_SECTIONS: dict[str, type] = {"train": TrainConfig, "model": ModelConfig}


@dataclass(frozen=True)
class Dimension:
    """One searched option: its dotted config key and its range or choices."""

    key: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple[Any, ...] | None = None

    def suggest(self, trial: Any) -> Any:
        """The trial's value (Optuna's ``suggest_*``)."""
        if self.choices is not None:
            return trial.suggest_categorical(self.key, list(self.choices))
        if self.integer:
            return trial.suggest_int(self.key, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.key, float(self.low), float(self.high), log=self.log)

    def holds(self, value: Any) -> bool:
        """Whether ``value`` lies in this dimension (an enqueued first trial must)."""
        if self.choices is not None:
            return value in self.choices
        return isinstance(value, (int, float)) and not isinstance(value, bool) and self.low <= value <= self.high


def _dimension(key: str, f: dataclasses.Field) -> Dimension | None:
    spec = f.metadata.get("tune")
    if spec is None:
        return None
    if not isinstance(spec, dict) or not ({"choices"} <= set(spec) or {"low", "high"} <= set(spec)):
        raise ConfigError(f"{key}: 'tune' metadata must be {{'low', 'high'[, 'log']}} or {{'choices'}}, got {spec!r}")
    if "choices" in spec:
        return Dimension(key, choices=tuple(spec["choices"]))
    integer = f.type in (int, "int")
    return Dimension(key, low=spec["low"], high=spec["high"], log=bool(spec.get("log", False)), integer=integer)


def shared_dimensions(task: str) -> list[Dimension]:
    """The task's shared tuned options (``Task.tuned_options``) with their declared ranges."""
    R.load_plugins()
    wanted = tuple(getattr(R.TASKS.get(task), "tuned_options", ()))
    out = []
    for key in wanted:
        section, name = key.split(".", 1)
        cls = SHARED_SECTIONS.get(section)
        f = next((f for f in dataclasses.fields(cls) if f.name == name), None) if cls else None
        dim = _dimension(key, f) if f is not None else None
        if dim is None:
            raise ConfigError(f"task '{task}' tunes '{key}', which declares no 'tune' range")
        out.append(dim)
    return out


def algorithm_dimensions(algorithm: str) -> list[Dimension]:
    """The algorithm's own tuned coefficients: every ``Config`` field with ``tune`` metadata."""
    R.load_plugins()
    cfg_cls = getattr(R.ALGORITHMS.get(algorithm), "Config", None)
    if cfg_cls is None or not dataclasses.is_dataclass(cfg_cls):
        return []
    return [d for f in dataclasses.fields(cfg_cls) if (d := _dimension(f"algorithm.{f.name}", f)) is not None]


def task_dimensions(task: str) -> list[Dimension]:
    """The task's own tuned options (link prediction's decoder temperature): every task
    ``Config`` field with ``tune`` metadata, searched for every method alike."""
    R.load_plugins()
    cfg_cls = getattr(R.TASKS.get(task), "Config", None)
    if cfg_cls is None or not dataclasses.is_dataclass(cfg_cls):
        return []
    return [d for f in dataclasses.fields(cfg_cls) if (d := _dimension(f"task.{f.name}", f)) is not None]


def search_space(cfg: RunConfig) -> list[Dimension]:
    """Everything a study of this run's method on this run's task searches. A method with no
    trainable state (``constant_scores``: the chance reference) searches nothing."""
    R.load_plugins()
    if getattr(R.ALGORITHMS.get(cfg.algorithm.name), "constant_scores", False):
        return []
    return shared_dimensions(cfg.task.name) + task_dimensions(cfg.task.name) + algorithm_dimensions(cfg.algorithm.name)


def current_values(cfg: RunConfig, space: list[Dimension]) -> dict[str, Any]:
    """The run's own values of the searched options (the suite's, which follow the paper, and an
    algorithm option's default): the first trial of every study, so tuning can only improve on
    them. A null option a method resolves for the task (FedMPO's Table 9 loss weights) is read
    through its Config's ``resolved(name, task)``. A value outside its declared range is left
    for the sampler (the caller warns)."""
    own = {"algorithm": component_config(R.ALGORITHMS, cfg.algorithm, "algorithm"),
           "task": component_config(R.TASKS, cfg.task, "task")}
    out = {}
    for dim in space:
        section, name = dim.key.split(".", 1)
        holder = own.get(section) or getattr(cfg, section)
        value = getattr(holder, name, None)
        if value is None and hasattr(holder, "resolved"):  # a null option the method resolves per task
            value = holder.resolved(name, cfg.task.name)
        if value is not None and dim.holds(value):
            out[dim.key] = value
    return out


__all__ = ["Dimension", "algorithm_dimensions", "current_values", "search_space", "shared_dimensions",
           "task_dimensions"]
