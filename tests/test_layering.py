"""The core (benchmark/) imports nothing from the layers above it (data_prep, baselines,
methods), except the command-line verbs that wire everything together. The data layer
reaches the engine through a registered builder (benchmark.federation.register_builder)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmark import federation
from benchmark.registry import load_plugins

ROOT = Path(__file__).resolve().parents[1]
UPWARD = re.compile(r"^\s*(from|import)\s+(data_prep|baselines|methods)\b", re.M)
VERBS = {"cli.py", "submit.py", "regress.py", "bench.py"}


def test_the_core_imports_no_layer_above_it():
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "benchmark").rglob("*.py"))
                 if p.name not in VERBS or p.parent.name != "benchmark"
                 if UPWARD.search(p.read_text())]
    assert offenders == []


def test_the_engine_builds_through_the_registered_builder(monkeypatch):
    load_plugins()  # data_prep registers its builder on import; replace it only afterwards
    from data_prep.build import build_federation as data_builder

    assert federation._BUILDER == [data_builder]
    calls = []
    monkeypatch.setattr(federation, "_BUILDER", [lambda cfg: calls.append(cfg) or "fed"])
    assert federation.build_federation("cfg") == "fed" and calls == ["cfg"]
    monkeypatch.setattr(federation, "_BUILDER", [])
    with pytest.raises(federation.BenchmarkError, match="no federation builder"):
        federation.build_federation("cfg")
