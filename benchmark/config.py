"""Typed run configuration.

Precedence (lowest first): the dataclass defaults (mirrored, with comments, in
``benchmark/defaults.yaml``), a run YAML, then ``--set a.b=c`` overrides. Component
sections (dataset, partition, missing, task, algorithm) take a ``name`` plus the options of
that component, which are validated against the component's own ``Config`` dataclass
(declared next to its code). Every unknown key is an error that lists the valid keys and
suggests the closest one.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark.errors import ConfigError, closest
from benchmark.options import check_fields
from benchmark.safe_yaml import YamlSyntaxError, clip, load_file, loads, short_repr

DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")
# A registry name (and a suite name, which names a results folder): an identifier, so no
# path separator, newline or dot-dot can reach a file name or a one-line message.
NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]{0,99}"
NAME_HELP = "an identifier (letters, digits, _; at most 100 characters)"


def opt(default: Any, help: str, **constraints: Any) -> Any:
    """A dataclass field with its help text and constraints in metadata (see benchmark.options)."""
    return field(default=default, metadata={"help": help, **constraints})


def name_opt(default: str, help: str) -> Any:
    """A registry-name field: an identifier, checked before any registry lookup."""
    return opt(default, help, pattern=NAME_PATTERN, pattern_help=NAME_HELP)


@dataclass
class ComponentConfig:
    """A registry name plus that component's own options (validated against its Config)."""

    name: str = ""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class DatasetConfig(ComponentConfig):
    name: str = name_opt("synthetic", "registry name (`list` shows all); its options go beside `name`")
    root: str | None = opt(None, "data root or local mirror; null = FEDMM_DATA_ROOT, then ../shared/data")
    normalize: str = opt("standard", "feature conditioning of the graph track, fitted on each client's own training rows: standard (z-score) | l2 (unit rows) | none", choices=("standard", "l2", "none"))


@dataclass
class PartitionConfig(ComponentConfig):
    name: str = name_opt("dirichlet_label", "partitioner registry name")
    num_clients: int = opt(10, "K, number of clients", min=1, max=100_000)


@dataclass
class MissingConfig(ComponentConfig):
    name: str = name_opt("node_level", "masker registry name")
    fill: str = opt("zeros", "value of an absent modality", choices=("zeros", "random", "mean"))
    content: str = opt("keep", "keep, or shuffle each modality's rows across nodes", choices=("keep", "shuffle"))


@dataclass
class TaskConfig(ComponentConfig):
    name: str = name_opt("node_cls", "task registry name")


@dataclass
class AlgorithmConfig(ComponentConfig):
    name: str = name_opt("fedavg", "algorithm registry name")


@dataclass
class SplitConfig:
    train: float = opt(0.6, "fraction of each client's nodes for training", probability=True)
    val: float = opt(0.2, "fraction for model selection and early stopping", probability=True)
    test: float = opt(0.2, "fraction reported", probability=True)


@dataclass
class ModelConfig:
    backbone: str = name_opt("gcn", "GNN backbone registry name")
    fusion: str = name_opt("concat", "modality fusion registry name")
    hidden: int = opt(256, "hidden size of encoders, fusion and GNN", min=1, max=65_536,
                      tune={"choices": (32, 64, 128, 256)})
    layers: int = opt(2, "message-passing layers", min=1, max=256)
    dropout: float = opt(0.5, "dropout on fused inputs and between GNN layers", probability=True,
                         tune={"low": 0.0, "high": 0.6})
    mask_missing: bool = opt(False, "true: fusions skip absent modalities; false: they see the fill value")


@dataclass
class TrainConfig:
    rounds: int = opt(50, "communication rounds (maximum, with early stopping)", min=1, max=1_000_000)
    local_epochs: int = opt(3, "full-batch epochs per client per round", min=1, max=100_000,
                            tune={"choices": (1, 2, 3, 4, 5, 10)})
    lr: float = opt(0.005, "Adam learning rate (0 freezes the model: a control)", min=0,
                    tune={"low": 1e-4, "high": 0.1, "log": True})
    weight_decay: float = opt(0.0005, "Adam L2 penalty", min=0.0, tune={"low": 0.0, "high": 0.005})
    grad_clip: float = opt(0.0, "max gradient norm; 0 disables clipping", min=0.0)
    client_fraction: float = opt(1.0, "fraction of clients sampled per round", positive=True, max=1.0)
    eval_every: int = opt(1, "evaluate every N rounds (and at the last round)", min=1, max=1_000_000)
    patience: int = opt(0, "early stop after N evaluations without validation gain; 0 = off", min=0, max=1_000_000)
    min_rounds: int = opt(0, "rounds run before patience may stop a run (a round-1 peak cannot end it); 0 = none",
                          min=0, max=1_000_000)
    checkpoint_every: int = opt(0, "checkpoint every N rounds for resume; 0 = off", min=0, max=1_000_000)
    device: str = opt("auto", "auto (CUDA when present, else CPU), cpu, cuda or cuda:N",
                      pattern=r"auto|cpu|cuda(:[0-9]+)?", pattern_help="auto, cpu, cuda or cuda:N")
    deterministic: bool = opt(True, "torch deterministic algorithms: same seed, same numbers on one GPU")
    matmul_precision: str = opt("highest", "highest (fp32), high (TF32) or medium (bf16) matmuls",
                                choices=("highest", "high", "medium"))
    distance_kernel: str = opt("eager", "KG distance kernels: eager, or triton (CUDA only: training's per-query "
                                        "negatives and evaluation over every entity; sums in another order)",
                               choices=("eager", "triton"))


def _tracker_names() -> tuple[str, ...]:
    """The registered experiment trackers (read when a value is checked: plugins may add some)."""
    from benchmark.trackers import tracker_names

    return tracker_names()


@dataclass
class OutputConfig:
    """Where a run writes, and what it reports to: never part of a config or protocol hash."""

    results_dir: str = opt("results", "where `sweep` appends result records")
    cache_dir: str = opt(".cache/fedmm", "federated artifacts and encoded features")
    checkpoint_dir: str = opt(".cache/fedmm/checkpoints", "resume state of running cells")
    trackers: list[str] = field(default_factory=list, metadata={
        "help": "experiment trackers fed every round: csv, tensorboard, mlflow (the last two: "
                "pip install -e .[track]); empty = off", "choices": _tracker_names})
    tracker_dir: str = opt("runs/trackers", "trackers' output: <tracker_dir>/<algorithm>-<config hash>-seed<seed>/ "
                                            "per run, MLflow's store <tracker_dir>/mlflow.db")


@dataclass
class RunConfig:
    seed: int = opt(0, "one seed for partition, masks, initialization, sampling, dropout", min=0, max=2**32 - 1)
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    missing: MissingConfig = field(default_factory=MissingConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    output: OutputConfig = field(default_factory=OutputConfig)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dict; component params are flattened into their section."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = _section_to_dict(value) if dataclasses.is_dataclass(value) else value
        return out

    def hash(self, exclude: tuple[str, ...] = ("output",)) -> str:
        """Content hash of the config (output paths excluded)."""
        d = {k: v for k, v in self.to_dict().items() if k not in exclude}
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _section_to_dict(section: Any) -> dict[str, Any]:
    d = {f.name: getattr(section, f.name) for f in dataclasses.fields(section) if f.name != "params"}
    if isinstance(section, ComponentConfig):
        d.update(section.params)
    return d


# --------------------------------------------------------------------------- parsing


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping through :mod:`benchmark.safe_yaml` (size, encoding, duplicate keys,
    alias caps); a missing file or malformed YAML is a ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    data = load_file(p)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: top level must be a mapping, got {type(data).__name__}")
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """'a.b=c' -> ('a.b', yaml-parsed c)."""
    if "=" not in text:
        raise ConfigError(f"--set expects key=value, got {short_repr(text)}")
    key, raw = text.split("=", 1)
    try:
        value = loads(raw, f"--set {clip(key)}") if raw != "" else ""
    except YamlSyntaxError:  # not YAML: the text itself (a refused document still raises)
        value = raw
    return key.strip(), value


def set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    """Set d['a']['b'] = value for key 'a.b', creating mappings as needed."""
    parts = key.split(".")
    cur = d
    for p in parts[:-1]:
        nxt = cur.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[p] = nxt
        cur = nxt
    cur[parts[-1]] = value


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Recursive merge; a nested mapping merges, anything else replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def expand_dotted(d: dict[str, Any]) -> dict[str, Any]:
    """{'a.b': 1} -> {'a': {'b': 1}} (keys without dots, and keys that are no strings, stay)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = expand_dotted(v)
        if isinstance(k, str) and "." in k:
            nested: dict[str, Any] = {}
            set_dotted(nested, k, v)
            out = deep_merge(out, nested)
        else:
            out = deep_merge(out, {k: v})
    return out


def _check_type(where: str, value: Any, tp: Any) -> Any:
    """Check a YAML value against a dataclass field type; ints widen to floats."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _check_type(where, value, a)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {short_repr(value)}")
    if tp is Any or tp is typing.Any:
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {short_repr(value)}")
        (inner,) = typing.get_args(tp)[:1] or (Any,)
        return [_check_type(f"{where}[{i}]", v, inner) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {short_repr(value)}")
        args = typing.get_args(tp)
        inner_tp = args[1] if len(args) == 2 else Any
        if args and args[0] is str and not all(isinstance(k, str) for k in value):
            bad = next(k for k in value if not isinstance(k, str))
            raise ConfigError(f"{where}: keys must be strings, got {short_repr(bad)}")
        return {k: _check_type(f"{where}.{clip(str(k))}", v, inner_tp) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {short_repr(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {short_repr(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {short_repr(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {short_repr(value)}")
        return value
    return value


def build_dataclass(cls: type, data: dict[str, Any], where: str) -> Any:
    """Construct ``cls`` from a mapping, rejecting unknown keys with a suggestion."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'}: expected a mapping, got {short_repr(data)}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name != "params"]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{where}.{clip(str(key))}" if where else clip(str(key))
        if key not in names:
            raise ConfigError(f"unknown config key '{path}'{closest(key, names)}; valid keys: {', '.join(names)}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            kwargs[key] = build_dataclass(tp, value, path)
        else:
            kwargs[key] = _check_type(path, value, tp)
    check_fields(cls, kwargs, where)  # declared constraints first; __post_init__ holds cross-field rules
    return cls(**kwargs)


def _build_section(cls: type, data: dict[str, Any], where: str) -> Any:
    """Sections of components: own fields plus any other key as a component param."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {short_repr(data)}")
    own = {f.name for f in dataclasses.fields(cls)} - {"params"}
    base = {k: v for k, v in data.items() if k in own}
    params = {k: v for k, v in data.items() if k not in own}
    obj = build_dataclass(cls, base, where)
    obj.params = dict(params)
    return obj


def build_run_config(data: dict[str, Any], validate_components: bool = True) -> RunConfig:
    """Build and validate a RunConfig from a (merged) mapping."""
    data = expand_dotted(data)
    hints = typing.get_type_hints(RunConfig)
    names = [f.name for f in dataclasses.fields(RunConfig)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(f"unknown config key '{clip(str(key))}'{closest(key, names)}; "
                              f"valid keys: {', '.join(names)}")
        tp = hints[key]
        if isinstance(tp, type) and issubclass(tp, ComponentConfig):
            kwargs[key] = _build_section(tp, value, key)
        elif dataclasses.is_dataclass(tp):
            kwargs[key] = build_dataclass(tp, value, key)
        else:
            kwargs[key] = _check_type(key, value, tp)
    check_fields(RunConfig, {k: v for k, v in kwargs.items() if not dataclasses.is_dataclass(v)}, "")
    cfg = RunConfig(**kwargs)
    if validate_components:
        validate(cfg)
    return cfg


def component_config(registry: Any, section: ComponentConfig, where: str) -> Any:
    """Resolve ``section.name`` in ``registry`` and build its Config from ``section.params``."""
    cls = registry.get(section.name)
    cfg_cls = getattr(cls, "Config", None)
    if cfg_cls is None:
        if section.params:
            raise ConfigError(f"{where} '{section.name}' takes no options, got: "
                              f"{clip(', '.join(map(str, section.params)))}")
        return None
    return build_dataclass(cfg_cls, section.params, f"{where}")


def validate(cfg: RunConfig) -> None:
    """Check names against the registries and component options against their Configs."""
    from benchmark import registry as R

    R.load_plugins()
    component_config(R.DATASETS, cfg.dataset, "dataset")
    component_config(R.PARTITIONERS, cfg.partition, "partition")
    component_config(R.MASKERS, cfg.missing, "missing")
    component_config(R.TASKS, cfg.task, "task")
    component_config(R.ALGORITHMS, cfg.algorithm, "algorithm")
    R.BACKBONES.get(cfg.model.backbone)
    R.FUSIONS.get(cfg.model.fusion)
    if abs(cfg.split.train + cfg.split.val + cfg.split.test - 1.0) > 1e-6:
        raise ConfigError("split.train + split.val + split.test must sum to 1")
    if cfg.output.trackers:
        from benchmark.trackers import check_trackers

        check_trackers(cfg.output.trackers)  # known, and its packages installed


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Defaults <- run YAML <- --set overrides, validated, output folders included (the run
    is about to write to them)."""
    data: dict[str, Any] = {}
    if path is not None:
        data = expand_dotted(load_yaml(path))
    for item in overrides:
        key, value = parse_override(item)
        set_dotted(data, key, value)
    cfg = build_run_config(data)
    check_output_paths(cfg)
    return cfg


def check_output_dir(path: str | Path, where: str) -> None:
    """ConfigError unless ``path`` is a writable folder or one that can be made there: a file
    at that path (or above it) would otherwise fail only once a round has run."""
    p = Path(path)
    try:
        if "\0" in str(p):
            raise ValueError("a NUL byte")
        probe = p
        while not probe.exists():
            if probe.is_symlink():
                raise ConfigError(f"{where}: {clip(str(probe), 200)} is a broken link, not a directory")
            if probe.parent == probe:
                break
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            what = "is a file" if probe == p else f"cannot be created: {clip(str(probe), 200)} is a file"
            raise ConfigError(f"{where}: {clip(str(p), 200)} {what}, not a directory")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise ConfigError(f"{where}: {clip(str(p), 200)} is not writable ({clip(str(probe), 200)} denies writing)")
    except (OSError, ValueError) as e:  # a NUL byte, a name too long, a link loop
        raise ConfigError(f"{where}: {clip(str(p), 200)} is no usable directory ({clip(str(e))})") from None


def check_output_paths(cfg: RunConfig) -> None:
    """Every ``output.*`` folder of a run, checked before any work."""
    for f in dataclasses.fields(OutputConfig):
        if isinstance(getattr(cfg.output, f.name), str):  # a folder (``trackers`` is a list of names)
            check_output_dir(getattr(cfg.output, f.name), f"output.{f.name}")


def defaults_yaml() -> dict[str, Any]:
    """The documented defaults file, parsed."""
    return load_yaml(DEFAULTS_FILE)
