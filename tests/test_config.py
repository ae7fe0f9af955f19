"""Config: defaults file agrees with the dataclasses; overrides; unknown keys; types."""

import dataclasses

import pytest

from benchmark import registry as R
from benchmark.config import (DEFAULTS_FILE, RunConfig, build_run_config, defaults_yaml, load_config,
                              parse_override)
from benchmark.errors import ConfigError


def test_defaults_yaml_matches_dataclasses():
    assert defaults_yaml() == RunConfig().to_dict()


def test_every_default_is_commented():
    text = DEFAULTS_FILE.read_text()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and ":" in stripped and not stripped.endswith(":"):
            assert "#" in line, f"option without a comment in defaults.yaml: {line!r}"


def test_every_component_option_has_help():
    R.load_plugins()
    for kind, reg in R.ALL_REGISTRIES.items():
        for name in reg.names():
            cfg_cls = getattr(reg.get(name), "Config", None)
            if cfg_cls is None or not dataclasses.is_dataclass(cfg_cls):
                continue
            for f in dataclasses.fields(cfg_cls):
                assert f.metadata.get("help"), f"{kind} '{name}' option '{f.name}' has no help text"


def test_set_overrides_and_types(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("train:\n  rounds: 7\nalgorithm:\n  name: fedprox\n  mu: 0.1\n")
    cfg = load_config(run, ["train.lr=0.1", "missing.rate=0.3", "model.mask_missing=true"])
    assert cfg.train.rounds == 7 and cfg.train.lr == 0.1
    assert cfg.algorithm.params == {"mu": 0.1}
    assert cfg.missing.params == {"rate": 0.3}
    assert cfg.model.mask_missing is True


def test_unknown_key_lists_valid_and_suggests():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["train.rouns=3"])
    msg = str(e.value)
    assert "did you mean 'rounds'" in msg and "valid keys" in msg and "local_epochs" in msg


def test_unknown_component_option_is_error():
    with pytest.raises(ConfigError, match="did you mean 'mu'"):
        load_config(None, ["algorithm.name=fedprox", "algorithm.mu_=0.1"])


def test_unknown_name_suggests_closest():
    with pytest.raises(ConfigError, match="did you mean 'fedavg'"):
        load_config(None, ["algorithm.name=fedavgg"])


def test_wrong_type_is_error():
    with pytest.raises(ConfigError, match="expected an integer"):
        load_config(None, ["train.rounds=abc"])
    with pytest.raises(ConfigError, match="true or false"):
        load_config(None, ["model.mask_missing=yes please"])


def test_malformed_yaml(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: [1, 2\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(bad)


def test_parse_override():
    assert parse_override("a.b=0.5") == ("a.b", 0.5)
    assert parse_override("a=true") == ("a", True)
    with pytest.raises(ConfigError):
        parse_override("novalue")


def test_config_hash_changes_with_seed():
    a = build_run_config({"seed": 0})
    b = build_run_config({"seed": 1})
    assert a.hash() != b.hash() and a.hash() == build_run_config({"seed": 0}).hash()
