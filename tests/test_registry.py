"""Registries: decorator registration, lookup errors, the `list` verb."""

import pytest

from benchmark import registry as R
from fedmm_bench.cli import main
from benchmark.errors import ConfigError
from benchmark.registry import Registry


def test_register_and_get():
    reg: Registry = Registry("thing", listed=False)

    @reg.register("alpha")
    class Alpha:
        """First thing."""

    assert reg.get("alpha") is Alpha and "alpha" in reg
    assert reg.describe() == [("alpha", "First thing.")]
    with pytest.raises(ConfigError, match="did you mean 'alpha'"):
        reg.get("alpah")


def test_double_registration_is_error():
    reg: Registry = Registry("thing", listed=False)
    reg.register("x")(type("A", (), {}))
    with pytest.raises(ConfigError):
        reg.register("x")(type("B", (), {}))


def test_foundation_components_registered():
    R.load_plugins()
    for name in ("local", "centralized", "fedavg", "fedprox", "fedgcn", "fedgraphsage", "fedproto"):
        assert name in R.ALGORITHMS
    for name in ("iid", "dirichlet_label", "louvain"):
        assert name in R.PARTITIONERS
    for name in ("none", "node_level", "client_level"):
        assert name in R.MASKERS
    assert "synthetic" in R.DATASETS and "node_cls" in R.TASKS
    assert {"gcn", "sage", "gat", "mlp"} <= set(R.BACKBONES.names())
    assert {"concat", "mean", "attention"} <= set(R.FUSIONS.names())


def test_list_prints_docs(capsys):
    assert main(["list", "--options"]) == 0
    out = capsys.readouterr().out
    assert "fedprox" in out and "FedProx" in out and "mu = 0.001" in out and "demo" in out


def test_list_shows_every_registry_wherever_it_is_defined(capsys):
    from benchmark import registry as R

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert {"kge decoders", "kg fusions", "kg imputers"} <= set(R.ALL_REGISTRIES)  # defined outside registry.py
    for kind, reg in R.ALL_REGISTRIES.items():
        assert f"\n{kind}:\n" in f"\n{out}", kind
        for name in reg.names():
            assert f"  {name} " in out, (kind, name)
    assert "thing" not in R.ALL_REGISTRIES  # throwaway registries (listed=False) stay out


@pytest.mark.parametrize("bad", ["has space", "a|b", "<b>", "x`y`", "dotted.name", "", "ünï", "a/b", "tab\t"])
def test_register_rejects_names_that_are_not_identifiers(bad):
    reg: Registry = Registry("thing", listed=False)
    with pytest.raises(ConfigError, match="invalid: use only letters, digits"):
        reg.register(bad)(type("A", (), {}))
    assert reg.names() == []


def test_register_accepts_identifier_names():
    reg: Registry = Registry("thing", listed=False)
    for good in ("fedavg", "mh_pflid", "s-ind", "Bili_Dance2", "_leaky_test"):
        reg.register(good)(type(good.replace("-", "_"), (), {}))
    assert reg.names() == sorted(["fedavg", "mh_pflid", "s-ind", "Bili_Dance2", "_leaky_test"])


def test_every_registered_name_is_an_identifier():
    R.load_plugins()
    names = [n for reg in R.ALL_REGISTRIES.values() for n in reg.names()]
    assert len(names) > 50
    assert all(R.NAME_PATTERN.fullmatch(n) for n in names), [n for n in names if not R.NAME_PATTERN.fullmatch(n)]


def test_a_second_listed_registry_of_one_kind_is_an_error():
    with pytest.raises(ConfigError, match="a registry of kind 'dataset' already exists"):
        Registry("dataset")
    assert R.ALL_REGISTRIES["datasets"] is R.DATASETS
    Registry("dataset", listed=False)  # a throwaway one may share the kind


# Runs in a fresh interpreter, so only what load_plugins() creates is there (no test's throwaway
# registries): every Registry object alive, found through the garbage collector rather than
# through ALL_REGISTRIES, and what `list` prints.
_EVERY_REGISTRY = """
import contextlib, gc, io, json
from benchmark import registry as R
from fedmm_bench.cli import main
R.load_plugins()
regs = [r for r in gc.get_objects() if isinstance(r, R.Registry)]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = main(["list"])
print(json.dumps({"rc": rc, "list": out.getvalue(), "registries": [[r.kind, r.names()] for r in regs]}))
"""


def test_list_shows_every_registry_that_exists_after_load_plugins():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", _EVERY_REGISTRY], cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["rc"] == 0
    kinds = [kind for kind, _ in res["registries"]]
    assert len(kinds) >= 12 and {"kge decoder", "kg fusion", "kg imputer"} <= set(kinds)
    lines = res["list"].splitlines()
    for kind, names in res["registries"]:
        assert f"{kind}s:" in lines, f"`list` has no heading for the registry of {kind!r}"
        head = lines.index(f"{kind}s:")
        listed = [ln.split()[0] for ln in lines[head + 1:head + 1 + len(names)]]
        assert listed == names, kind
