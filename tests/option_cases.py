"""Every declared option of the core config sections and of every registered component.

Shared by the option-validation tests: one :class:`Option` per field, with the section it
lives in, the component name that selects it (None for core sections) and its metadata.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

from benchmark import config as C
from benchmark import registry as R

# registry -> config section whose ``name`` selects a component of it
SECTIONS = {"datasets": "dataset", "partitioners": "partition", "maskers": "missing", "tasks": "task",
            "algorithms": "algorithm"}


@dataclass(frozen=True)
class Option:
    section: str            # "" for top-level keys (seed)
    component: str | None   # registry name, None for a core section's own field
    name: str
    tp: Any
    meta: Any
    default: Any

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name

    def config(self, value: Any) -> dict[str, Any]:
        """A run-config mapping that sets this option to ``value``."""
        if not self.section:
            return {self.name: value}
        body: dict[str, Any] = {self.name: value}
        if self.component is not None:
            body["name"] = self.component
        return {self.section: body}

    def __str__(self) -> str:
        return f"{self.key}[{self.component}]" if self.component else self.key


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def _fields(cls: type, section: str, component: str | None, skip: tuple[str, ...] = ()) -> list[Option]:
    hints = typing.get_type_hints(cls)
    return [Option(section, component, f.name, hints[f.name], f.metadata, _default(f))
            for f in dataclasses.fields(cls) if f.name not in skip]


def core_options() -> list[Option]:
    """``seed`` and the fields of RunConfig's sections (component sections: own fields, not ``params``)."""
    hints = typing.get_type_hints(C.RunConfig)
    out: list[Option] = []
    for f in dataclasses.fields(C.RunConfig):
        cls = hints[f.name]
        if dataclasses.is_dataclass(cls):
            out += _fields(cls, f.name, None, skip=("params",))
        else:
            out.append(Option("", None, f.name, cls, f.metadata, _default(f)))
    return out


def component_configs() -> list[tuple[str, str, type]]:
    """(registry kind, name, Config) of every registered component that declares options."""
    R.load_plugins()
    out = []
    for kind, reg in R.ALL_REGISTRIES.items():
        for name in reg.names():
            cfg = getattr(reg.get(name), "Config", None)
            if cfg is not None:
                out.append((kind, name, cfg))
    return out


def component_options() -> list[Option]:
    out: list[Option] = []
    for kind, name, cfg in component_configs():
        out += _fields(cfg, SECTIONS[kind], name)
    return out


def all_options() -> list[Option]:
    return core_options() + component_options()
