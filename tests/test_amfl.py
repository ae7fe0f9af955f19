"""AMFL track core: architecture specs and block kinds, the graph A_i, the population,
the simulations, and the one-line errors for bad input (FedMBridge, docs/protocols.md Track 4)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmark.amfl import BLOCKS, AMFLNet, ArchSpec, BlockSpec, build_graph
from benchmark.amfl.client import AMFLClientData
from benchmark.amfl.graph import FEATURES, vocab_sizes
from fedmm_bench.cli import main
from benchmark.config import build_run_config
from benchmark.errors import ConfigError
from benchmark.federation import build_federation
from benchmark.options import check_option
from benchmark.registry import load_plugins

load_plugins()
ROOT = Path(__file__).resolve().parents[1]
DIMS = {"image": 64, "image2": 64, "signal": 40}
TOKENS = {"image": 8, "image2": 8, "signal": 8}
FUSIONS = ("avg_align", "concat", "sum", "tensor", "cross_attn")


def _spec(fusion: str | None, mods=("image", "image2", "signal"), encoders=("mlp", "attn", "mlp")) -> ArchSpec:
    enc = {"mlp": BlockSpec.make("mlp", widths=[48, 32]), "attn": BlockSpec.make("attn", depth=2, width=32)}
    return ArchSpec(tuple((m, enc[e]) for m, e in zip(mods, encoders)),
                    None if fusion is None else BlockSpec.make(fusion), BlockSpec.make("mlp", widths=[64, 32]))


def amfl_cfg(**partition) -> object:
    return build_run_config({
        "dataset": {"name": "av_digits"}, "task": {"name": "amfl_cls"}, "missing": {"name": "none"},
        "partition": {"name": "amfl_population", "num_clients": 6, "samples_mean": 30, **partition},
        "algorithm": {"name": "amfl_local"}, "train": {"device": "cpu"}})


@pytest.mark.parametrize("fusion", FUSIONS)
def test_every_fusion_builds_runs_and_its_graph_owns_every_parameter(fusion):
    torch.manual_seed(0)
    net = AMFLNet(_spec(fusion), DIMS, TOKENS, num_classes=4)
    x = {m: torch.randn(5, d) for m, d in DIMS.items()}
    assert net(x).shape == (5, 4)
    g = build_graph(net, list(DIMS))
    assert g.features.shape[1] == len(FEATURES)
    assert bool((g.features < torch.tensor(vocab_sizes(len(DIMS)))).all()) and bool((g.features >= 0).all())
    assert int(g.edges.max()) < g.num_nodes and g.edges.shape[1] >= g.num_nodes - 1
    # every parameter tensor is owned by a node, and the shapes add up to the model
    assert g.param_node.numel() == len(list(net.parameters()))
    assert int(g.param_shape[:, 0].sum()) == sum(p.numel() for p in net.parameters())
    # data flow: every non-input node is reached from an input; the head (last node) from all three inputs
    reach = {v: {v} for v in range(3)}
    for s, t in sorted(g.edges.t().tolist(), key=lambda e: e[1]):
        for origin, seen in reach.items():
            if s in seen:
                seen.add(t)
    assert all(g.num_nodes - 1 in seen for seen in reach.values())


def test_the_graph_is_derived_from_the_architecture():
    """Depth, width and fusion show up in the graph: more layers, more nodes; a different
    fusion, different operator nodes; a wider layer, a larger shape scale."""
    shallow = build_graph(AMFLNet(_spec("concat"), DIMS, TOKENS, 4), list(DIMS))
    deeper_spec = dataclasses.replace(_spec("concat"), trunk=BlockSpec.make("mlp", widths=[64, 64, 32]))
    deeper = build_graph(AMFLNet(deeper_spec, DIMS, TOKENS, 4), list(DIMS))
    assert deeper.num_nodes == shallow.num_nodes + 1
    other = build_graph(AMFLNet(_spec("tensor"), DIMS, TOKENS, 4), list(DIMS))
    assert not torch.equal(other.features[:, 2].sort().values, shallow.features[:, 2].sort().values)
    wide_spec = dataclasses.replace(_spec("concat"), trunk=BlockSpec.make("mlp", widths=[256, 32]))
    wide = build_graph(AMFLNet(wide_spec, DIMS, TOKENS, 4), list(DIMS))
    assert int(wide.features[:, 6].max()) > int(shallow.features[:, 6].max())


def test_a_new_fusion_is_one_registered_class():
    @BLOCKS.register("_test_max")
    class MaxFusion(BLOCKS.get("sum")):
        """Element-wise max of the modality features."""

        def forward(self, xs):
            return torch.stack(xs).max(0).values

    try:
        net = AMFLNet(_spec("_test_max"), DIMS, TOKENS, 3)
        assert net({m: torch.randn(2, d) for m, d in DIMS.items()}).shape == (2, 3)
        assert build_graph(net, list(DIMS)).num_nodes > 3
    finally:
        BLOCKS.unregister("_test_max")


def test_block_options_declare_help_and_constraints():
    for name in BLOCKS.names():
        for f in dataclasses.fields(BLOCKS.get(name).Options):
            assert f.metadata.get("help"), (name, f.name)
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            check_option(f"{name}.{f.name}", default, f.metadata)
    with pytest.raises(ConfigError, match="heads"):
        AMFLNet(_spec("cross_attn"), DIMS, TOKENS, 4).__class__(
            ArchSpec(_spec("concat").encoders, BlockSpec.make("cross_attn", heads=5), _spec("concat").trunk),
            DIMS, TOKENS, 4)


def test_unknown_block_and_bad_specs_are_one_line_config_errors():
    with pytest.raises(ConfigError, match=r"unknown block 'concatt' \(did you mean 'concat'\?\)"):
        AMFLNet(_spec("concatt"), DIMS, TOKENS, 4)
    with pytest.raises(ConfigError, match="can serve as fusion, not encoder"):
        AMFLNet(ArchSpec((("image", BlockSpec.make("concat")),), None, BlockSpec.make("mlp")), DIMS, TOKENS, 4)
    with pytest.raises(ConfigError, match="no fusion block"):
        AMFLNet(_spec(None), DIMS, TOKENS, 4)
    with pytest.raises(ConfigError, match="unknown config key 'block 'mlp'.depth'"):
        AMFLNet(ArchSpec((("image", BlockSpec.make("mlp", depth=2)),), None, BlockSpec.make("mlp")), DIMS, TOKENS, 4)
    spec = ArchSpec.from_dict(_spec("sum").to_dict())
    assert spec == _spec("sum") and spec.key() == _spec("sum").key()


def test_client_whose_modalities_do_not_match_its_data_is_rejected():
    spec = _spec("concat", mods=("image", "signal"), encoders=("mlp", "mlp"))
    n = 4
    kw = dict(cid=3, global_ids=torch.arange(n), available=torch.ones(n, 1, dtype=torch.bool),
              edge_index=torch.empty(2, 0, dtype=torch.long), y=torch.zeros(n, dtype=torch.long),
              train_mask=torch.ones(n, dtype=torch.bool), val_mask=torch.zeros(n, dtype=torch.bool),
              test_mask=torch.zeros(n, dtype=torch.bool), num_classes=2, arch=spec)
    with pytest.raises(ConfigError, match="client 3: its architecture takes image\\+signal but its data holds image$"):
        AMFLClientData(features={"image": torch.zeros(n, 64)}, **kw)


def test_population_groups_counts_and_determinism():
    fed = build_federation(amfl_cfg(num_clients=10, fusions=["concat", "tensor"], depths=[1, 2]))
    info = fed.stats["partition_info"]
    assert info["combinations"] == {"image": 2, "signal": 2, "image+signal": 6}   # weights 1 : 1 : 3
    n = {c.cid: c.num_nodes for c in fed.clients}
    image = sum(n[c.cid] for c in fed.clients if "image" in c.features) / sum(n.values())
    assert fed.availability()["image"] == round(image, 4) and 0.5 < image < 1.0
    multi = {g: n for g, n in info["groups"].items() if g.startswith("image+signal")}
    assert sorted(multi) == ["image+signal|concat|d1", "image+signal|concat|d2", "image+signal|tensor|d1",
                             "image+signal|tensor|d2"] and sorted(multi.values()) == [1, 1, 2, 2]
    # clients hold only their modalities, disjoint samples, relative labels 0..C-1
    ids = torch.cat([c.global_ids for c in fed.clients])
    assert ids.unique().numel() == ids.numel()
    for c, row in zip(fed.clients, fed.stats["clients"]):
        assert sorted(c.features) == sorted(c.arch.modalities) and c.num_classes == 4
        assert set(c.y.tolist()) <= set(range(4)) and row["group"].split("|")[0] == "+".join(c.arch.modalities)
        assert not (c.train_mask & c.test_mask).any() and c.train_mask.any() and c.test_mask.any()
    again = build_federation(amfl_cfg(num_clients=10, fusions=["concat", "tensor"], depths=[1, 2]))
    assert again.artifact_hash == fed.artifact_hash
    assert all(torch.equal(a.features[m], b.features[m]) and a.arch == b.arch
               for a, b in zip(fed.clients, again.clients) for m in a.features)
    other = build_federation(dataclasses.replace(amfl_cfg(num_clients=10, fusions=["concat", "tensor"], depths=[1, 2]),
                                                 seed=1))
    assert other.stats["artifact_recipe"] == fed.stats["artifact_recipe"] and other.artifact_hash != fed.artifact_hash


def test_population_larger_than_the_data_is_an_error():
    with pytest.raises(ConfigError, match=r"AMFL population larger than 'av_digits' can fill: its 40 clients need"):
        build_federation(amfl_cfg(num_clients=40, samples_mean=200))


def test_amfl_protocol_errors():
    with pytest.raises(ConfigError, match="missing.name must be none"):
        build_federation(dataclasses.replace(amfl_cfg(), missing=build_run_config(
            {"missing": {"name": "node_level"}}).missing))
    with pytest.raises(ConfigError, match="unknown block 'tensorr'"):
        build_federation(amfl_cfg(fusions=["tensorr"]))


def test_trimodal_simulation_states_its_substitution():
    cfg = dataclasses.replace(amfl_cfg(num_clients=7, modality_sets=["image+image2+signal", "image"]),
                              dataset=build_run_config({"dataset": {"name": "multiview_digits"}}).dataset)
    fed = build_federation(cfg)
    assert fed.modalities == ["image", "image2", "signal"]
    assert "MNIST-1D" in fed.stats["caption"] and "stand-in" in fed.stats["caption"]
    assert sum(len(c.features) == 3 for c in fed.clients) == 5


def test_list_shows_the_amfl_task_blocks_simulations_and_algorithms(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("amfl_cls", "av_digits", "multiview_digits", "amfl_population", "amfl_local", "amfl_feddistill", "amfl_fedgkd", "amfl_heterofl", "amfl_hyperpfl", "amfl_apfl",
                 "fedmbridge", *FUSIONS, "mlp", "attn", "head"):
        assert f"  {name} " in out, name
    assert "\nblocks:\n" in out


def test_unknown_block_through_the_real_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "run_benchmark.py"), "run", "--set", "dataset.name=av_digits",
                           "--set", "task.name=amfl_cls", "--set", "partition.name=amfl_population",
                           "--set", "missing.name=none", "--set", "algorithm.name=amfl_local",
                           "--set", "partition.fusions=[concat,crossattn]"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "unknown block 'crossattn'" in lines[0] and "cross_attn" in lines[0]


@pytest.mark.parametrize("name, cells", [("fedmbridge_table2", 35), ("fedmbridge_table3", 30)])
def test_amfl_suites_validate_at_their_scales_and_their_small_populations_fit(name, cells):
    from benchmark.sweep import load_suite

    suite = load_suite(name)
    for scale in ("tiny", "small"):
        built = suite.cells(scale)   # builds and validates every config
        assert len({c.cell_id for c in built}) == len(built) == cells
        cfg = build_run_config(built[0].config)
        assert cfg.task.name == "amfl_cls" and cfg.missing.name == "none"
    for seed in range(5):   # the data can fill the small population of every seed
        fed = build_federation(build_run_config({**suite.cells("small")[0].config, "seed": seed}))
        assert fed.num_clients == 24 and len(fed.stats["partition_info"]["combinations"]) == 7
