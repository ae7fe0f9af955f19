"""The core (benchmark/) imports nothing from the layers above it (data_prep, baselines,
methods, fedmm_bench): the command line that wires every layer together lives above them,
in fedmm_bench/. The data layer reaches the engine through a registered builder
(benchmark.federation.register_builder)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from benchmark import federation
from benchmark.registry import load_plugins

ROOT = Path(__file__).resolve().parents[1]
UPWARD = re.compile(r"^\s*(from|import)\s+(data_prep|baselines|methods|fedmm_bench)\b", re.M)


def test_the_core_imports_no_layer_above_it():
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "benchmark").rglob("*.py"))
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


def _py(*dirs: str) -> list[Path]:
    return [p for d in dirs for p in sorted((ROOT / d).rglob("*.py"))]


def test_algorithms_import_nothing_from_the_data_layer():
    """Client types (ClientData, KGClientData) live in the core; an algorithm reads them there."""
    pattern = re.compile(r"^\s*(from|import)\s+data_prep\b", re.M)
    assert [str(p.relative_to(ROOT)) for p in _py("baselines", "methods") if pattern.search(p.read_text())] == []


def test_algorithms_ask_the_task_instead_of_testing_its_class():
    """An algorithm reads a task's capabilities (``classifies_nodes``, ``paired``,
    ``holds_out_edges``), never ``isinstance(task, SomeTask)``: a new task that declares the
    same capabilities then works with every algorithm unchanged."""
    from benchmark import registry as R
    from benchmark.tasks.base import Task

    load_plugins()
    task_classes = {R.TASKS.get(name).__name__ for name in R.TASKS.names()} | {c.__name__ for c in _subclasses(Task)}
    offenders = []
    for path in _py("baselines", "methods"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                    and len(node.args) == 2):
                names = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} | {
                    n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
                if names & task_classes:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub} | _subclasses(sub)
    return out


def test_one_answer_to_which_algorithm_runs_which_task(tmp_path):
    """registry.applicable is what the engine, the sweep and the tables ask; they agree."""
    from benchmark import registry as R
    from benchmark.config import build_run_config
    from benchmark.engine import Engine
    from benchmark.errors import BenchmarkError
    from benchmark.sweep import Cell, applicable

    load_plugins()
    assert R.applicable("fedavg", "node_cls") and not R.applicable("fedproto", "link_pred")
    assert R.applicable("no_such_method", "node_cls")  # fails loudly on the name, not N/A
    for algo, task in (("fedavg", "node_cls"), ("fedproto", "link_pred"), ("mmfede", "node_cls")):
        cell = Cell("s", "tiny", {}, 0, {"algorithm": {"name": algo}, "task": {"name": task}})
        assert applicable(cell) == R.applicable(algo, task)
    cfg = build_run_config({"dataset": {"name": "synthetic", "num_nodes": 60}, "algorithm": {"name": "fedproto"},
                            "task": {"name": "link_pred"}, "output": {"cache_dir": str(tmp_path)}})
    with pytest.raises(BenchmarkError, match="not defined for task 'link_pred'"):
        Engine(cfg)


REPORT_MODULE_LINES = 400  # a report module over this does more than one job


def test_no_report_module_outgrows_one_job():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in sorted((ROOT / "benchmark" / "report").rglob("*.py"))}
    assert {p: n for p, n in sizes.items() if n > REPORT_MODULE_LINES} == {}


def _imports(tree: ast.AST) -> list[str]:
    """Every module an import statement names, anywhere in the file (lazy imports in functions
    too), except under ``if TYPE_CHECKING:``, which never runs."""
    out: list[str] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out += [m for n in node.orelse for m in _imports(ast.Module(body=[n], type_ignores=[]))]
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        out += _imports(node)
    return out


def test_no_import_circle_between_the_projects_modules():
    """Module A imports B (at any depth) and B imports A: neither can be understood, tested or
    moved alone. Strongly connected components of the import graph over the five packages."""
    mods: dict[str, Path] = {}
    for pkg in ("benchmark", "data_prep", "baselines", "methods", "fedmm_bench"):
        for p in (ROOT / pkg).rglob("*.py"):
            name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
            mods[name.removesuffix(".__init__")] = p
    graph: dict[str, set[str]] = {}
    for m, p in mods.items():
        graph[m] = {t for t in _imports(ast.parse(p.read_text())) if t in mods and t != m}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def _only_raises(fn: ast.FunctionDef) -> bool:
    body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and not any(
        isinstance(d, ast.Name) and d.id == "abstractmethod" for d in fn.decorator_list)


def test_no_registered_component_has_a_method_that_only_raises():
    """A component that does not fit a dataset kind says so through ``only_for`` (the builder
    refuses it with that line); it does not carry a graph method whose whole body is a raise."""
    import inspect
    import textwrap

    from benchmark import registry as R

    load_plugins()
    offenders = []
    for reg in (R.DATASETS, R.PARTITIONERS, R.MASKERS, R.TASKS, R.MODELS, R.FUSIONS, R.BACKBONES, R.ALGORITHMS,
                R.TRACKERS):
        for name in reg.names():
            obj = reg.get(name)
            if not inspect.isclass(obj):
                continue
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
            except (OSError, TypeError):
                continue
            cls = tree.body[0]
            offenders += [f"{reg.kind} '{name}'.{f.name}" for f in cls.body
                          if isinstance(f, ast.FunctionDef) and _only_raises(f) and not f.name.startswith("_")]
    assert offenders == []


RECORD_FIELD = ("params|metrics|status|seed|cell_id|curves|per_client|config|provenance|guard|availability|coverage|"
                "comm|cost|algorithm|error|best_round|rounds_run|submission|timestamp|worker_pid|sweep_backend")
DICT_READ = re.compile(r"\b(r|rec|record|records\[\w+\])(\.get\(|\[)[\"'](" + RECORD_FIELD + r")[\"']")


def test_every_reader_of_results_takes_a_record():
    """Issue 29: a result is shaped in one place (``Record``) and read as one everywhere: no
    report module, nor the guard, regress, submit, sweep or trackers, indexes a record as a dict."""
    readers = [*sorted((ROOT / "benchmark" / "report").rglob("*.py")),
               *(ROOT / "benchmark" / f for f in ("guard.py", "regress.py", "submit.py", "sweep.py", "results.py")),
               *sorted((ROOT / "benchmark" / "trackers").glob("*.py")), *sorted((ROOT / "fedmm_bench").glob("*.py")),
               ROOT / "deploy" / "flower" / "run_cell.py"]
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in readers
             for n, line in enumerate(p.read_text().splitlines(), 1) if DICT_READ.search(line)]
    assert not found, "records read as dicts:\n" + "\n".join(found)
    assert DICT_READ.search('x = rec.get("metrics") or {}') and DICT_READ.search("r['status']")


def test_a_dataset_kind_picks_its_federation_builder(tmp_path):
    """Issue 30: one builder registry keyed by the loaded dataset's ``kind``; build_federation
    asks it instead of testing the dataset's class, and a loader whose result declares no kind
    is one line naming the loader."""
    import types

    from benchmark import registry as R
    from benchmark.config import build_run_config
    from benchmark.errors import ContractError
    from benchmark.federation import GraphDataset
    from data_prep import build
    from data_prep.amfl.source import AMFLSource
    from data_prep.kg.dataset import KGDataset

    load_plugins()
    assert {c.kind for c in (GraphDataset, KGDataset, AMFLSource)} == set(R.FEDERATION_BUILDERS.names()) == {
        "graph", "kg", "amfl"}
    source = (ROOT / "data_prep" / "build.py").read_text()
    assert "isinstance(dataset, AMFLSource)" not in source and "isinstance(dataset, KGDataset)" not in source
    seen = []
    R.FEDERATION_BUILDERS.register("probe")(lambda cfg, ds, loader: seen.append((ds, loader)) or "built")
    synthetic = R.DATASETS.get("synthetic")
    try:
        cfg = build_run_config({"dataset": {"name": "synthetic", "num_nodes": 200}, "partition": {"num_clients": 3},
                                "output": {"cache_dir": str(tmp_path)}})
        graph = synthetic(synthetic.Config(num_nodes=200)).load()
        probe = types.new_class("ProbeDataset", (), exec_body=lambda ns: ns.update(kind="probe"))
        original = synthetic.load
        synthetic.load = lambda self, root=None: probe()
        assert build.build_federation(cfg) == "built" and seen[0][1] is synthetic
        synthetic.load = lambda self, root=None: {"not": "a dataset"}
        with pytest.raises(ContractError, match=r"synthetic.*\.load\) returned a dict; expected a GraphDataset"):
            build.build_federation(cfg)
        synthetic.load = original
        assert build.build_federation(cfg).clients and graph.kind == "graph"
    finally:
        synthetic.load = original
        R.FEDERATION_BUILDERS.unregister("probe")


def test_one_move_to_a_device_for_every_client_type():
    """Issue 30: ``ClientData.to`` is the only ``to``; graph, KG and AMFL clients keep their
    class and every field, tensors in dict fields included."""
    import dataclasses

    import torch

    from benchmark.amfl.client import AMFLClientData
    from benchmark.amfl.spec import ArchSpec, BlockSpec
    from benchmark.federation import ClientData
    from benchmark.kg_client import KGClientData

    defs = [f"{p.relative_to(ROOT)}:{n.name}" for p in _py("benchmark", "baselines", "methods", "data_prep")
            for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.ClassDef) and "ClientData" in n.name
            and any(isinstance(f, ast.FunctionDef) and f.name == "to" for f in n.body)]
    assert defs == ["benchmark/federation.py:ClientData"]
    n = 4
    base = dict(cid=1, global_ids=torch.arange(n), features={"text": torch.randn(n, 3)},
                available=torch.ones(n, 1, dtype=torch.bool), edge_index=torch.tensor([[0, 1], [1, 0]]),
                y=torch.zeros(n, dtype=torch.long), train_mask=torch.ones(n, dtype=torch.bool),
                val_mask=torch.zeros(n, dtype=torch.bool), test_mask=torch.zeros(n, dtype=torch.bool), num_classes=2)
    kg = KGClientData(**{**base, "y": None}, relations=torch.tensor([3, 5]), train_triples=torch.tensor([[0, 0, 1]]))
    arch = ArchSpec(encoders=(("text", BlockSpec.make("mlp")),), fusion=None, trunk=BlockSpec.make("mlp"))
    amfl = AMFLClientData(**base, arch=arch, token_dims={"text": 3})
    for client in [ClientData(**base), kg, amfl]:
        moved = client.to("cpu")
        assert type(moved) is type(client) and moved is not client
        for f in dataclasses.fields(client):
            a, b = getattr(client, f.name), getattr(moved, f.name)
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b), f.name
            elif isinstance(a, dict):
                assert a.keys() == b.keys() and b is not a, f.name
            else:
                assert a == b, f.name


def test_no_backend_imports_the_sweep_that_picks_it():
    """Issue 30: ``sweep`` finds its backends by name (importlib, which the import-circle test
    cannot see); a backend that imported ``benchmark.sweep`` back would close a hidden circle.
    What a backend needs of a cell is in ``benchmark.cell``."""
    pattern = re.compile(r"^\s*(from\s+benchmark\.sweep\s+import|from\s+benchmark\s+import\s+.*\bsweep\b|"
                         r"import\s+benchmark\.sweep)", re.M)
    assert [str(p.relative_to(ROOT)) for p in _py("benchmark/backends") if pattern.search(p.read_text())] == []
    assert pattern.search("from benchmark.sweep import Cell")


def test_every_partitioner_and_masker_implements_its_kinds_contract():
    """Issue 30: each built-in partitioner and masker implements its kind's one-method ABC
    (``data_prep/component_kinds.py``), or carries only options a KG or AMFL builder reads and
    declares that kind; a graph build refuses a component of another kind with one line."""
    import inspect

    from benchmark import registry as R
    from data_prep.component_kinds import GraphMasker, GraphPartitioner, KGPartitioner, component_kind

    load_plugins()
    contracts = {(R.PARTITIONERS, "graph"): GraphPartitioner, (R.MASKERS, "graph"): GraphMasker,
                 (R.PARTITIONERS, "kg"): KGPartitioner}
    options_only = []
    for reg in (R.PARTITIONERS, R.MASKERS):
        for name in reg.names():
            cls = reg.get(name)
            abc = contracts.get((reg, component_kind(cls)))
            if abc is None:
                options_only.append(name)
                assert component_kind(cls) in ("kg", "amfl") and getattr(cls, "only_for", ""), name
            else:
                assert issubclass(cls, abc) and not inspect.isabstract(cls), name
    assert sorted(options_only) == ["amfl_population", "kg_items"]


def test_the_model_is_built_through_its_registry(monkeypatch):
    """Issue 30: ``ModelAlgorithm.build_model`` reads ``registry.MODELS`` (the name in
    ``model_name``) instead of importing one class: a registered model is the one clients get."""
    from torch import nn

    from benchmark import registry as R
    from benchmark.algorithm import ModelAlgorithm

    load_plugins()
    assert ModelAlgorithm.model_name in R.MODELS
    built = []

    class Probe(nn.Module):
        def __init__(self, dims, out, cfg):  # noqa: ANN001
            super().__init__()
            built.append((dict(dims), out))
            self.lin = nn.Linear(1, 1)

    R.MODELS.register("probe_model")(Probe)
    try:
        fedavg = R.ALGORITHMS.get("fedavg")
        assert issubclass(fedavg, ModelAlgorithm)
        algo = object.__new__(fedavg)
        monkeypatch.setattr(fedavg, "model_name", "probe_model")
        import types

        import torch

        task = types.SimpleNamespace(out_dim=lambda n: n + 1)
        algo.ctx = types.SimpleNamespace(feature_dims={"text": 4}, task=task, num_classes=3, device=torch.device("cpu"),
                                         run=types.SimpleNamespace(model=None))
        assert isinstance(algo.build_model(), Probe) and built == [({"text": 4}, 4)]
    finally:
        R.MODELS.unregister("probe_model")


# Seed arithmetic written before benchmark/seeding.py existed. Each draws into committed
# stores (named), so moving it onto seeding.seeded_rng changes those stores' numbers: it moves
# with their next re-run under a protocol change. Each entry must still exist (test below).
LEGACY_SEED_ARITHMETIC = {
    ("baselines/advanced/fedpub.py", "self.ctx.seed + 7919"): "efficiency, fedmpo_*, partition_effect",
    ("baselines/basic/fedgcn.py", "self.ctx.seed * 1009 + modality_index"): "demo, fedmpo_*, structure_control*",
    ("baselines/multimodal/fedmvp.py", "self.ctx.seed + 104729"): "fedmpo_*, fedmgs_*, structure_control*",
    ("baselines/multimodal/pepsy.py", "self.ctx.seed * 100003 + rnd"): "fedmgs_*, structure_control*",
    ("methods/fedmbridge/tahn.py", "(self.head_seed * 1000003 + size) % 2 ** 63"): "fedmbridge_*",
    ("data_prep/partition/dirichlet_items.py", "seed * 7919 + c + 1"): "every KG store (mmfed3_*)",
    ("data_prep/partition/dirichlet_items.py", "seed * 1000 + i"): "every KG store (mmfed3_*)",
    # not a run stream: fixed multipliers of the ledger's row hash, keyed by the row width
    ("benchmark/comm.py", "_SEED + d"): "the ledger's raw-data audit",
    ("benchmark/comm.py", "_SEED + 7 * d"): "the ledger's raw-data audit",
}
_SEED_NAME = re.compile(r"(?i)(^|_)seed$")


def _seed_derivations() -> list[tuple[str, str]]:
    """Every place outside benchmark/seeding.py that derives a stream its own way: a numpy
    generator from a literal key list, a SeedSequence, or arithmetic on a seed."""
    found = []
    for path in _py("benchmark", "baselines", "methods", "data_prep", "deploy"):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "benchmark/seeding.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = ast.unparse(node.func)
                if func.endswith("default_rng") and node.args and isinstance(node.args[0], (ast.List, ast.Tuple)):
                    found.append((rel, ast.unparse(node)))
                if func.endswith("SeedSequence"):
                    found.append((rel, ast.unparse(node)))
            elif isinstance(node, ast.BinOp):
                operands = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)] + [
                    n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)]
                if any(_SEED_NAME.search(x) for x in operands):
                    found.append((rel, ast.unparse(node)))
    return found


def test_seeds_are_derived_in_one_module():
    """benchmark/seeding.py is the one place a stream is derived from a run seed; elsewhere
    only its functions are called (outer expressions of a listed legacy site count as it)."""
    legacy = {path: [expr for p, expr in LEGACY_SEED_ARITHMETIC if p == path] for path, _ in LEGACY_SEED_ARITHMETIC}
    new = [(path, expr) for path, expr in _seed_derivations()
           if not any(old in expr or expr in old for old in legacy.get(path, []))]
    assert new == [], "derive seeds through benchmark.seeding"


def test_every_listed_legacy_seed_site_still_exists():
    found = _seed_derivations()
    gone = [site for site in LEGACY_SEED_ARITHMETIC if site not in found]
    assert gone == [], "a legacy site moved onto benchmark.seeding: take it off LEGACY_SEED_ARITHMETIC"
