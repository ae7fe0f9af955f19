"""Command-line interface. Bad input: one line on stderr, exit code 2, nothing written."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.errors import BenchmarkError, closest
from benchmark.record import Record, as_records

DEMO_SUITE = "demo"
EXTRA_VERB_MODULES: tuple[str, ...] = ("benchmark.report.leaderboard.verb", "benchmark.report.fidelity_summary",
                                        "benchmark.report.check_verb", "benchmark.submit", "benchmark.regress",
                                        "benchmark.tune.verb")


class UsageError(BenchmarkError):
    """A command line argparse rejects: printed as one line like any other bad input."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad command line is one line and exit code 2, as every bad input is.

    argparse prints the usage block and then the error; here the error becomes a
    :class:`UsageError` that ``main`` prints as ``error: ...``. Subparsers are built from the
    parser's own class, so every verb behaves alike; ``--help`` is unchanged.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {_suggest(message)} (see {self.prog} --help)")


def _suggest(message: str) -> str:
    """argparse's 'invalid choice' message with the closest valid choice added."""
    import re

    m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if not m:
        return message
    choices = re.findall(r"'([^']*)'", m.group(2))
    return message + closest(m.group(1), choices)


def _add_set(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key (repeatable), e.g. --set missing.rate=0.3")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="run_benchmark.py",
                                description="FedMM-Bench: federated multimodal graph learning with missing modalities. "
                                            "With no arguments, runs the demo suite.")
    sub = p.add_subparsers(dest="verb")

    r = sub.add_parser("run", help="run one config and print its record")
    r.add_argument("config", nargs="?", help="run YAML (defaults if omitted)")
    _add_set(r)
    r.add_argument("--out", help="append the record to this JSON-lines file")
    r.add_argument("--no-resume", dest="resume", action="store_false", help="ignore an existing checkpoint")
    r.add_argument("--backend", default="inprocess",
                   help="inprocess (default) or flower: Flower's simulation engine, a ServerApp and one ClientApp "
                        "per client (needs the scale extra)")

    s = sub.add_parser("sweep", help="run every missing cell of a suite")
    s.add_argument("suite")
    s.add_argument("--scale", choices=("tiny", "small", "paper"))
    s.add_argument("--jobs", type=int, default=1, help="cells in parallel (joblib processes)")
    s.add_argument("--results", default="results", help="results directory")
    s.add_argument("--retry-failed", action="store_true", help="run failed cells again")
    s.add_argument("--keep-stale", action="store_true",
                   help="count stored records made under another protocol or config as done (default: run them again)")
    s.add_argument("--isolate", action="store_true", default=None,
                   help="run every cell in a fresh process (per-cell peak memory); suites may set isolate: true")
    s.add_argument("--backend", default="joblib",
                   help="joblib (local processes, default) or ray: Ray tasks on a local instance or --address")
    s.add_argument("--address", default=None,
                   help="with --backend ray: the address of a running Ray cluster (e.g. 10.0.0.5:6379 or auto)")
    s.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                   help="run only the cells with this grid value or seed (repeatable), e.g. --only partition.num_clients=3")
    s.add_argument("--untuned", action="store_true",
                   help="run the suite's own settings, not the choices of its finished tuning studies "
                        "(results/tuning/SUITE/SCALE.yaml, read by default)")
    s.add_argument("--with-method", default=None, metavar="NAME",
                   help="run a registered method beside the suite's baselines: one more row of its grid, only its "
                        "cells (a method in its own file: submit FILE --suite SUITE)")
    _add_set(s)

    pr = sub.add_parser("prepare", help="build (or load) the federated artifact and print its statistics")
    pr.add_argument("config", nargs="?")
    _add_set(pr)
    pr.add_argument("--json", action="store_true", help="print JSON instead of a table")

    for verb, text in (("table", "write the suite's paper-style table"), ("plot", "write the suite's figures")):
        t = sub.add_parser(verb, help=text)
        t.add_argument("suite")
        t.add_argument("--scale", choices=("tiny", "small", "paper"))
        t.add_argument("--results", default="results")
        t.add_argument("--out", default="tables", help="output directory")

    ls = sub.add_parser("list", help="list registered components with one-line docs")
    ls.add_argument("--options", action="store_true", help="also list each component's options")

    b = sub.add_parser("bench", help="graph (default): seconds per round and peak memory of FedAvg-Zero on a large "
                                      "synthetic graph; kg: KG training positives/s and filtered evaluation time vs "
                                      "a bare PyTorch RotatE")
    b.add_argument("target", nargs="?", choices=("graph", "kg"), default="graph")
    b.add_argument("--nodes", type=int, default=20000, help="graph: nodes of the synthetic graph")
    b.add_argument("--clients", type=int, default=10, help="graph: clients")
    b.add_argument("--rounds", type=int, default=5, help="graph: rounds")
    b.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    b.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    b.add_argument("--matmul-precision", default="highest", choices=("highest", "high", "medium"))
    b.add_argument("--dim", type=int, default=256, help="kg: complex dimension k (entities 2k wide)")
    b.add_argument("--batch", type=int, default=1024, help="kg: training queries per batch")
    b.add_argument("--negatives", type=int, default=256, help="kg: uniform negatives per query")
    b.add_argument("--timed", type=int, default=5, help="kg: timed blocks of 8 batches (median reported)")
    b.add_argument("--warmup", type=int, default=2, help="kg: warm-up blocks")
    b.add_argument("--eval-limit", type=int, default=0, help="kg: test triples evaluated (0 = all)")
    b.add_argument("--data-root", default=None, help="kg: where FB15k-237.tar.gz is (else $FEDMM_DATA_ROOT, the mirror)")
    b.add_argument("--imputers", action="store_true",
                   help="kg: instead, seconds per training batch of MMFedE-AE and MMFeD3-HidE side by side and their "
                        "ratio, on FB15K-237-Fed3 (client 0, r = 50%%) at --dim/--batch/--negatives")
    b.add_argument("--block", type=int, default=8, help="kg: batches per timed block")
    b.add_argument("--profile", type=int, default=0, metavar="N",
                   help="kg --imputers: also profile one block of each method (torch.profiler) and print its N "
                        "costliest ops, device busy time and kernel launches (0: off)")

    d = sub.add_parser("demo", help="run the demo suite, print its table, write table and plot (the default)")
    d.add_argument("--jobs", type=int, default=2)
    d.add_argument("--results", default="results")
    d.add_argument("--out", default="tables")

    # Verbs that live in their own modules register themselves: add_parser(sub) sets `handler`.
    import importlib

    for module in EXTRA_VERB_MODULES:
        importlib.import_module(module).add_parser(sub)
    return p


# --------------------------------------------------------------------------- verbs


def cmd_run(a: argparse.Namespace) -> int:
    import torch

    from benchmark.backends import run_backend
    from benchmark.config import load_config
    from benchmark.results import ResultStore, failed_on_non_finite
    from benchmark.threads import threads_per_job

    cfg = load_config(a.config, a.overrides)
    if a.out:
        ResultStore(a.out).check_writable()  # a read-only folder is one line now, not after the run
    torch.set_num_threads(threads_per_job(1))   # the count a sweep gives the same cell: same numbers
    record = Record.from_dict(failed_on_non_finite(run_backend(a.backend)(cfg, progress=True, resume=a.resume)))
    record.params = {"config": a.config or "defaults", "overrides": a.overrides}
    record.backend = record.backend or "inprocess"  # the Flower backend names itself
    if a.out:
        ResultStore(a.out).append(record.to_dict())
    summary = {k: getattr(record, k) for k in ("status", "error", "metrics", "best_round", "rounds_run",
                                               "seconds_per_round", "peak_memory_mb", "wall_time_s")}
    summary["artifact_hash"] = record.provenance["artifact_hash"]
    print(json.dumps(summary, indent=2))
    return 0 if record.ok else 1


def cmd_prepare(a: argparse.Namespace) -> int:
    from benchmark.config import load_config
    from data_prep.build import build_federation, prepare_stats_json, prepare_stats_table

    cfg = load_config(a.config, a.overrides)
    fed = build_federation(cfg)
    print(json.dumps(prepare_stats_json(fed), indent=2) if a.json else prepare_stats_table(fed))
    return 0


def cmd_sweep(a: argparse.Namespace) -> int:
    from benchmark.config import parse_override
    from benchmark.results import ensure_writable
    from benchmark.sweep import check_sweep_input, load_suite, run_suite

    from benchmark.report.kg_stats import is_stats_suite, run_stats_suite

    suite = load_suite(a.suite)
    overrides = dict(parse_override(o) for o in a.overrides)
    only = dict(parse_override(o) for o in a.only)
    if a.address and a.backend != "ray":
        raise BenchmarkError("--address is for --backend ray")
    stats = is_stats_suite(suite)
    if stats and (overrides or only or a.with_method):
        flag = "--set" if overrides else "--only" if only else "--with-method"
        raise BenchmarkError(f"suite '{suite.name}' computes dataset statistics; {flag} does not apply")
    tuned_from = None if a.untuned else a.results  # the finished studies' choices (benchmark.tuned)
    cells = None if stats else check_sweep_input(suite, a.scale, overrides, only, a.with_method,
                                                 tuned_from)  # one line before any write
    if a.address:
        from benchmark.backends.ray_sweep import probe

        probe(a.address)  # Ray would retry a dead address forever
    ensure_writable(suite.results_path(a.results, a.scale or suite.default_scale))  # before any cell runs
    if stats:  # statistics of built federations (Table II): nothing to train
        records, ran = run_stats_suite(suite, a.scale, a.results, a.retry_failed)
    else:
        records, ran = run_suite(suite, a.scale, a.jobs, a.results, a.retry_failed, overrides=overrides, only=only,
                                 isolate=a.isolate, backend=a.backend, address=a.address,
                                 keep_stale=a.keep_stale, cells=cells)
    failed = [r for r in records if not r.ok]
    print(f"{suite.name}: {ran} cells run now, {len(records)} recorded, {len(failed)} failed")
    for r in failed[:10]:
        print(f"  failed {r.params} seed {r.seed}: {r.error}")
    return 0


def _suite_records(suite_name: str, scale: str | None, results_dir: str) -> tuple[Any, list[Record], str]:
    from benchmark.report.suite_tables import suite_records
    from benchmark.sweep import load_suite

    suite = load_suite(suite_name)
    scale = scale or suite.default_scale
    records = suite_records(suite, scale, results_dir)
    if not records:
        raise BenchmarkError(f"no records for suite '{suite.name}' at scale '{scale}' in {results_dir}/; "
                             f"run: python run_benchmark.py sweep {suite.name} --scale {scale}")
    return suite, records, scale


def write_suite_tables(suite: Any, records: Sequence[Record | Mapping[str, Any]], scale: str,
                       out: str, pending: bool = False) -> list[tuple[str, str]]:
    """Write every table of a suite; returns (stem, markdown) pairs. ``pending``: the store
    awaits a re-run, which each caption then says."""
    from benchmark.report.suite_tables import make_suite_tables
    from benchmark.report.tables import write_table

    written = []
    for table in make_suite_tables(suite, records, scale, pending):
        write_table(table.output, Path(out), table.stem)
        written.append((table.stem, table.output.markdown))
    return written


def write_suite_plots(suite: Any, records: Sequence[Record | Mapping[str, Any]], scale: str, out: str) -> list[Path]:
    """Every figure of the suite's ``plots:`` (robustness curves, heatmaps; see report.plots)."""
    from benchmark.report.suite_plots import suite_plots
    from benchmark.report.record_filters import under_condition

    records = as_records(records)
    where = (suite.spec.get("control") or {}).get("where")
    if where:  # a control run is no point of a curve; tables print it beside the cells instead
        records = [r for r in records if not under_condition(r, where)]
    return suite_plots(suite.name, suite.spec.get("plots"), records, Path(out) / f"{suite.name}_{scale}")


def cmd_table(a: argparse.Namespace) -> int:
    from benchmark.report.kg_stats import is_stats_suite, run_stats_suite
    from benchmark.report.suite_tables import is_pending
    from benchmark.sweep import load_suite

    stats_suite = load_suite(a.suite)
    if is_stats_suite(stats_suite):  # cheap to compute: build what the store lacks, then print
        run_stats_suite(stats_suite, a.scale, a.results)
    suite, records, scale = _suite_records(a.suite, a.scale, a.results)
    for stem, md in write_suite_tables(suite, records, scale, a.out, is_pending(suite, scale, a.results)):
        print(md)
        print(f"\nwrote {a.out}/{stem}.md and .tex")
    return 0


def cmd_plot(a: argparse.Namespace) -> int:
    suite, records, scale = _suite_records(a.suite, a.scale, a.results)
    paths = write_suite_plots(suite, records, scale, a.out)
    if not paths:
        raise BenchmarkError(f"suite '{suite.name}' declares no plots")
    for p in paths:
        print(f"wrote {p}")
    return 0


def cmd_list(a: argparse.Namespace) -> int:
    import dataclasses

    from benchmark import registry as R
    from benchmark.options import describe
    from benchmark.sweep import SUITES_DIR

    R.load_plugins()
    for kind, reg in R.ALL_REGISTRIES.items():
        print(f"{kind}:")
        for name, doc in reg.describe():
            print(f"  {name:<18} {doc}")
            cfg_cls = getattr(reg.get(name), "Config", None)
            if a.options and cfg_cls is not None and dataclasses.is_dataclass(cfg_cls):
                for f in dataclasses.fields(cfg_cls):
                    default = f.default if f.default is not dataclasses.MISSING else (
                        f.default_factory() if f.default_factory is not dataclasses.MISSING else None)  # type: ignore[misc]
                    rule = describe(f.metadata)
                    print(f"      {f.name} = {default!r}  {f.metadata.get('help', '')}{f' [{rule}]' if rule else ''}")
    print("suites:")
    from benchmark.config import load_yaml

    for p in sorted(SUITES_DIR.glob("*.yaml")):
        desc = str(load_yaml(p).get("description", "")).strip().splitlines()
        print(f"  {p.stem:<18} {desc[0] if desc else ''}")
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    import os

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts
    import torch

    from benchmark.precision import apply_matmul_precision

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    apply_matmul_precision(a.matmul_precision)
    if a.target == "kg":
        from fedmm_bench.bench import run_bench_kg
        from benchmark.bench_kg import KGSizes

        if min(a.dim, a.batch, a.negatives, a.timed, a.block) < 1 or min(a.warmup, a.eval_limit, a.profile) < 0:
            raise BenchmarkError("bench kg: --dim, --batch, --negatives, --timed and --block must be >= 1; --warmup, "
                                 "--eval-limit and --profile >= 0")
        if a.profile and not a.imputers:
            raise BenchmarkError("bench kg: --profile profiles the --imputers steps; add --imputers")
        if a.imputers:
            from benchmark.bench_kg import IMPUTER_DATA, bench_imputers

            root = () if a.data_root is None else (f"dataset.root={a.data_root}",)
            bench_imputers(KGSizes(dim=a.dim, batch=a.batch, negatives=a.negatives, timed=a.timed, warmup=a.warmup,
                                   block=a.block), a.device, (*IMPUTER_DATA, *root), profile_top=a.profile)
            return 0
        run_bench_kg(a.device, KGSizes(dim=a.dim, batch=a.batch, negatives=a.negatives, timed=a.timed, warmup=a.warmup,
                                   eval_limit=a.eval_limit, block=a.block), root=a.data_root)
        return 0
    from fedmm_bench.bench import bench_fedavg

    bench_fedavg(num_nodes=a.nodes, num_clients=a.clients, rounds=a.rounds, device=a.device)
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    from benchmark.sweep import load_suite, run_suite

    suite = load_suite(DEMO_SUITE)
    scale = suite.default_scale
    records, ran = run_suite(suite, scale, a.jobs, a.results)
    for stem, md in write_suite_tables(suite, records, scale, a.out):
        print(md)
        print(f"\nwrote {a.out}/{stem}.md and .tex")
    for p in write_suite_plots(suite, records, scale, a.out):
        print(f"wrote {p}")
    return 0


VERBS = {"run": cmd_run, "sweep": cmd_sweep, "prepare": cmd_prepare, "table": cmd_table, "plot": cmd_plot,
         "list": cmd_list, "bench": cmd_bench, "demo": cmd_demo}


def main(argv: list[str] | None = None) -> int:
    from benchmark.stopping import stop_on_signals

    argv = list(sys.argv[1:] if argv is None else argv)
    verb = "the command"
    try:
        a = build_parser().parse_args(argv or ["demo"])
        if a.verb is None:
            raise UsageError("run_benchmark.py: name a verb (see run_benchmark.py --help)")
        verb, handler = a.verb, getattr(a, "handler", None) or VERBS[a.verb]
        with stop_on_signals():  # SIGTERM/SIGINT unwind through the code that owns the workers
            code = handler(a)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit flush
        return code
    except BenchmarkError as e:
        one_line = " ".join(str(e).splitlines())  # a value quoted in the message must not break the one-line rule
        print(f"error: {one_line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return _interrupted(e, verb)
    except BrokenPipeError:
        return _closed_pipe()


def _interrupted(exc: KeyboardInterrupt, verb: str) -> int:
    """One line on stderr saying what the stop left behind; 128 + the signal as exit code.

    A sweep, a submission or a regress run says itself what it saved (the message of its
    :class:`benchmark.stopping.Interrupted`); for any other verb only the generic advice holds.
    """
    signum = int(getattr(exc, "signum", 2))
    message = getattr(exc, "message", "") or f"{verb} stopped before its end; run the same command again"
    name = getattr(exc, "signal_name", "SIGINT")
    print(f"interrupted ({name}): {' '.join(str(message).split())}", file=sys.stderr)
    return 128 + signum


SIGPIPE_EXIT = 141  # what a shell reports for a process ended by SIGPIPE (128 + 13)


def _closed_pipe() -> int:
    """The reader of stdout went away (``... | head``): stop quietly, as Unix tools do.

    stdout is pointed at /dev/null so that the interpreter's final flush of the
    unwritten buffer cannot raise a second BrokenPipeError on the way out.
    """
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (stdout replaced in-process)
        pass
    return SIGPIPE_EXIT
