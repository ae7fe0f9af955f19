"""Method submission: load one file, check it, smoke-run it, run suites, rebuild the leaderboard.

Trust: loading a submission imports the file, which runs its code in this process with the
privileges of the user who runs ``submit``; submit only files you trust. The gates below
check the method's contract, not its safety.

``python run_benchmark.py submit path/to/method.py [--suite NAME]...`` goes through four gates
and stops at the first that fails, with one line saying why (exit code 2):

1. the file imports and registers exactly one algorithm (found by diffing the ALGORITHMS
   registry before and after the import, so helper classes in the file do not count);
2. the class satisfies the Algorithm contract: a concrete subclass of ``Algorithm`` with a
   docstring, the hooks' signatures, a ``tasks`` tuple of registered tasks, declared
   ``upload_keys`` (the ledger audits uploads against them) and a ``Config`` dataclass that
   builds from its defaults;
3. a smoke cell (a tiny CI cell of the method's track, highest missing rate, two rounds) finishes:
   a hook that raises, a non-finite loss, or an upload the ledger audit flags (raw feature
   rows, labels, edges, undeclared names) rejects the method; then the same cell runs under
   the Flower simulation (each client a ``ClientApp`` that rebuilds the client half per
   message and keeps only its ``state``), and must give the same metrics and bytes, so a
   method that only works in one process (memory on ``self``, a state that cannot leave
   the process) is rejected too (``--no-flower`` skips this gate; it needs the scale extra);
4. each requested suite runs with the suite's grid but this algorithm in place of the suite's
   algorithms; every cell runs (a resubmission replaces older results of the same cell) and
   its record, which carries the submission file's sha256, is appended to the store.

Then the leaderboard is rebuilt. A rejected method is removed from the registry again.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import hashlib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmark import registry as R
from benchmark.errors import BenchmarkError
from benchmark.record import Record, failed_record
from benchmark.options import undeclared_numeric_options
from benchmark.stopping import as_interrupted
from benchmark.threads import threads_per_job

SMOKE_SUITE = "ci"
SMOKE_ROUNDS = 2
MODULE_PREFIX = "fedmm_submission_"
# Hook -> positional parameters after self; a mismatch would only surface mid-run otherwise.
HOOKS: dict[str, tuple[str, ...]] = {
    "init_server": (),
    "client_update": ("client", "state", "received", "rnd"),
    "aggregate": ("uploads", "rnd"),
    "evaluate": ("client", "state", "received"),
    "setup_upload": ("client", "state"),
    "setup_aggregate": ("uploads",),
    "setup_receive": ("client", "state", "payload"),
}


class SubmissionRejected(BenchmarkError):
    """A submitted method failed a gate; the message is the one line the user sees."""


@dataclass(frozen=True)
class Submission:
    """A loaded submission: where it came from and what it registered."""

    path: Path
    module_name: str
    name: str
    cls: type
    sha256: str

    @property
    def info(self) -> dict[str, str]:
        """What goes into each record, so the leaderboard names the exact file version."""
        return {"file": self.path.name, "sha256": self.sha256, "algorithm": self.name}


# --------------------------------------------------------------------------- loading


def _module_name(path: Path) -> str:
    stem = re.sub(r"\W", "_", path.stem)
    return MODULE_PREFIX + stem


def _already_imported(path: Path) -> ModuleType | None:
    """The module object if this file was imported already (e.g. a plugin in methods/)."""
    for mod in list(sys.modules.values()):
        file = getattr(mod, "__file__", None)
        if file and Path(file).resolve() == path and not mod.__name__.startswith(MODULE_PREFIX):
            return mod
    return None


def _forget(module_name: str) -> None:
    """Drop a previous load of a same-named submission (registry entries and module)."""
    for name in R.ALGORITHMS.names():
        if getattr(R.ALGORITHMS.get(name), "__module__", None) == module_name:
            R.ALGORITHMS.unregister(name)
    sys.modules.pop(module_name, None)


def _where(exc: BaseException, path: Path) -> str:
    """' in <function> (<file>:<line>)' of the deepest frame inside the submission, else the last."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if Path(f.filename).resolve() == path]
    frame = own[-1] if own else (frames[-1] if frames else None)
    if frame is None:
        return ""
    return f" in {frame.name} ({Path(frame.filename).name}:{frame.lineno})"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _exit_call(exc: SystemExit) -> str:
    """How the user code exited, as it was written: ``sys.exit(3)``."""
    return f"sys.exit({exc.code!r})" if exc.code is not None else "sys.exit()"


def _user_error(exc: BaseException, path: Path) -> str:
    """One line for an exception raised by the method's code (``sys.exit`` included)."""
    if isinstance(exc, SystemExit):
        return f"the method called {_exit_call(exc)}{_where(exc, path)}"
    return f"{type(exc).__name__}: {_one_line(str(exc))}{_where(exc, path)}"


def load_submission(path: str | Path) -> Submission:
    """Import the file and return the one algorithm it registers (SubmissionRejected otherwise)."""
    R.load_plugins()  # the baselines register first, so the diff below sees only the submission
    p = Path(path).resolve()
    if not p.is_file():
        raise SubmissionRejected(f"{path}: no such file")
    if p.suffix != ".py":
        raise SubmissionRejected(f"{path}: not a Python (.py) file")
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    existing = _already_imported(p)
    if existing is not None:
        new = [n for n in R.ALGORITHMS.names() if getattr(R.ALGORITHMS.get(n), "__module__", None) == existing.__name__]
        module_name = existing.__name__
    else:
        module_name = _module_name(p)
        _forget(module_name)
        before = set(R.ALGORITHMS.names())
        spec = importlib.util.spec_from_file_location(module_name, p)
        if spec is None or spec.loader is None:
            raise SubmissionRejected(f"{p.name}: cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up while the file runs
        try:
            spec.loader.exec_module(module)
        except SystemExit as e:  # sys.exit() in the file would end the CLI with its code and no message
            _forget(module_name)
            raise SubmissionRejected(f"{p.name}: exited during import ({_exit_call(e)}{_where(e, p)}); a "
                                     f"submission must define and register its algorithm, not exit") from None
        except BenchmarkError as e:
            _forget(module_name)
            raise SubmissionRejected(f"{p.name}: import failed: {_one_line(str(e))}") from None
        except Exception as e:  # noqa: BLE001 - any error in user code becomes one readable line
            _forget(module_name)
            raise SubmissionRejected(f"{p.name}: import failed: {type(e).__name__}: {_one_line(str(e))}"
                                     f"{_where(e, p)}") from None
        new = sorted(set(R.ALGORITHMS.names()) - before)
    if not new:
        _forget(module_name)
        raise SubmissionRejected(f"{p.name}: registers no algorithm; decorate one Algorithm subclass with "
                                 f"@ALGORITHMS.register(\"your_name\") (see methods/template.py)")
    if len(new) > 1:
        _forget(module_name)
        raise SubmissionRejected(f"{p.name}: registers {len(new)} algorithms ({', '.join(new)}); "
                                 f"a submission must register exactly one")
    return Submission(path=p, module_name=module_name, name=new[0], cls=R.ALGORITHMS.get(new[0]), sha256=digest)


def withdraw(sub: Submission) -> None:
    """Remove a submission from the registry (after a rejection, or when a test is done)."""
    if sub.module_name.startswith(MODULE_PREFIX):
        _forget(sub.module_name)
    else:
        R.ALGORITHMS.unregister(sub.name)


# --------------------------------------------------------------------------- contract


def check_contract(sub: Submission) -> None:
    """Static checks of the Algorithm contract (benchmark/algorithm.py) on the registered class."""
    from benchmark.algorithm import Algorithm

    cls, name = sub.cls, f"{sub.path.name}: algorithm '{sub.name}'"
    if not (inspect.isclass(cls) and issubclass(cls, Algorithm)):
        raise SubmissionRejected(f"{name} is not a subclass of benchmark.algorithm.Algorithm")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        raise SubmissionRejected(f"{name} does not implement: {missing}")
    if not (cls.__doc__ or "").strip():
        raise SubmissionRejected(f"{name} has no docstring (its first line is what `list` and the leaderboard show)")
    for hook, params in HOOKS.items():
        fn = getattr(cls, hook)
        try:
            inspect.signature(fn).bind(None, *params)
        except TypeError:
            raise SubmissionRejected(f"{name}: {hook} must accept ({', '.join(('self',) + params)})") from None
    for flag in ("personalized", "centralized", "has_setup"):
        if not isinstance(getattr(cls, flag), bool):
            raise SubmissionRejected(f"{name}: {flag} must be True or False")
    tasks = cls.tasks
    if not isinstance(tasks, tuple) or not tasks or not all(isinstance(t, str) for t in tasks):
        raise SubmissionRejected(f"{name}: tasks must be a non-empty tuple of task names")
    unknown = [t for t in tasks if t not in R.TASKS]
    if unknown:
        raise SubmissionRejected(f"{name}: unknown task(s) {', '.join(unknown)}; registered: "
                                 f"{', '.join(R.TASKS.names())}")
    keys = cls.upload_keys
    if keys is None:
        raise SubmissionRejected(f"{name}: declare upload_keys, a tuple of regexes naming every upload "
                                 f"(the ledger audit rejects undeclared names); () if nothing is sent")
    if not isinstance(keys, tuple) or not all(isinstance(k, str) for k in keys):
        raise SubmissionRejected(f"{name}: upload_keys must be a tuple of regex strings")
    for k in keys:
        try:
            re.compile(k)
        except re.error as e:
            raise SubmissionRejected(f"{name}: upload_keys entry {k!r} is not a valid regex ({e})") from None
    cfg_cls = cls.Config
    if cfg_cls is not None:
        if not dataclasses.is_dataclass(cfg_cls):
            raise SubmissionRejected(f"{name}: Config must be a dataclass (or None)")
        try:
            cfg_cls()
        except Exception as e:  # noqa: BLE001 - user code
            raise SubmissionRejected(f"{name}: Config() fails with its defaults: {type(e).__name__}: "
                                     f"{_one_line(str(e))}") from None
        loose = undeclared_numeric_options(cfg_cls)
        if loose:
            raise SubmissionRejected(f"{name}: Config option '{loose[0]}' declares no bound: add metadata such as "
                                     f"{{'min': 0}} or {{'unbounded': True}} so bad values are caught")


# --------------------------------------------------------------------------- running


def _strip_algorithm_options(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """A suite's config with this algorithm and none of the suite algorithms' own options."""
    from benchmark.config import expand_dotted

    out = expand_dotted(copy.deepcopy(cfg))
    out["algorithm"] = {"name": name}
    return out


def smoke_config(sub: Submission) -> Any:
    """A two-round CI cell on a task the method supports, with missing modalities present.

    The CI suites (``ci`` first, then the other tracks' suites it lists) already define tiny,
    fast cells for every track, so a method of any track gets a smoke cell of its own track.
    """
    from benchmark.config import build_run_config
    from benchmark.regress import regress_plan, spec_for
    from benchmark.sweep import load_suite

    plan = regress_plan()
    cells: list[Any] = []
    for name in sorted(plan, key=lambda n: n != SMOKE_SUITE):
        suite = load_suite(name)
        cells = [c for c in suite.cells(spec_for(suite, plan).scale)
                 if (c.config.get("task") or {}).get("name", "node_cls") in sub.cls.tasks]
        if cells:
            break
    if not cells:
        raise SubmissionRejected(f"{sub.path.name}: no CI suite runs any of its tasks ({', '.join(sub.cls.tasks)}), "
                                 f"so there is no smoke cell; CI suites: {', '.join(plan)}")
    cell = max(cells, key=lambda c: float((c.config.get("missing") or {}).get("rate", 0.0) or 0.0))
    cfg = _strip_algorithm_options(cell.config, sub.name)
    cfg["train"] = {**(cfg.get("train") or {}), "rounds": SMOKE_ROUNDS, "checkpoint_every": 0}
    cfg["seed"] = 0
    try:
        return build_run_config(cfg)
    except BenchmarkError as e:
        raise SubmissionRejected(f"{sub.path.name}: smoke config invalid: {_one_line(str(e))}") from None


def smoke_test(sub: Submission) -> Record:
    """Run the smoke cell in this process; any failure is a SubmissionRejected with its reason."""
    from benchmark.engine import Engine

    cfg = smoke_config(sub)
    try:
        with checked_hooks(sub):
            record = Record.from_dict(Engine(cfg).run(resume=False))
    except HookContractError:
        raise
    except BenchmarkError as e:
        raise SubmissionRejected(f"{sub.path.name}: smoke cell failed: {_one_line(str(e))}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a hook that raises is the method's fault; say where
        raise SubmissionRejected(f"{sub.path.name}: smoke cell failed: {_user_error(e, sub.path)}") from None
    if not record.ok:
        err = record.error if isinstance(record.error, dict) else {}
        reason = _one_line(record.reason or "unknown error")
        if reason.startswith("ledger audit: "):
            raise SubmissionRejected(f"{sub.path.name}: rejected by the ledger audit: {reason[len('ledger audit: '):]}")
        raise SubmissionRejected(f"{sub.path.name}: smoke cell failed at round {err.get('round')}: {reason}")
    return record


#: hooks whose result is a dict (a payload, one payload per client, or scores); setup_receive returns None
DICT_HOOKS = tuple(h for h in HOOKS if h != "setup_receive")


class HookContractError(SubmissionRejected):
    """A hook returned something the engine cannot use."""


@contextmanager
def checked_hooks(sub: Submission) -> Iterator[None]:
    """During the smoke cell, every hook's result is checked to be a dict, so a hook that
    returns None (an unfinished skeleton) is named, instead of an AttributeError deep in the
    ledger. The class is restored afterwards."""
    cls = sub.cls
    saved = {h: cls.__dict__[h] for h in DICT_HOOKS if h in cls.__dict__}
    try:
        for hook in DICT_HOOKS:
            setattr(cls, hook, _returns_dict(getattr(cls, hook), hook, sub))
        yield
    finally:
        for hook in DICT_HOOKS:
            if hook in saved:
                setattr(cls, hook, saved[hook])
            else:
                delattr(cls, hook)


def _returns_dict(fn: Any, hook: str, sub: Submission) -> Any:
    @functools.wraps(fn)  # keeps the signature (evaluate's optional rnd is read from it)
    def checked(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if not isinstance(out, dict):
            got = "None" if out is None else f"a {type(out).__name__}"
            raise HookContractError(f"{sub.path.name}: {hook} of '{sub.name}' returned {got} in the smoke cell; "
                                    f"it must return a dict ({HOOK_RETURNS[hook]})")
        return out

    return checked


HOOK_RETURNS = {
    "init_server": "the first broadcast: name -> tensor, or client id -> payload",
    "client_update": "the upload: name -> tensor",
    "aggregate": "the broadcast: name -> tensor, or client id -> payload",
    "evaluate": "split -> {metric: value, 'n': size}",
    "setup_upload": "the setup upload: name -> tensor",
    "setup_aggregate": "client id -> setup payload",
}

FLOWER_TOLERANCE = 1e-6


def flower_gate(sub: Submission, smoke: Record) -> Record:
    """Run the smoke cell under the Flower simulation; reject when it fails or disagrees with
    the in-process record (metrics to 1e-6, ledger bytes exactly)."""
    from benchmark.backends import run_backend

    if sub.cls.centralized:
        return smoke  # an upper bound that pools the data has no federated form to check
    cfg = smoke_config(sub)
    try:
        record = Record.from_dict(run_backend("flower")(cfg, prepare=functools.partial(_ensure_registered,
                                                                                       str(sub.path), sub.name)))
    except BenchmarkError as e:
        if "pip install" in str(e):
            raise
        raise SubmissionRejected(f"{sub.path.name}: fails under the Flower simulation: {_one_line(str(e))}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever a ClientApp raised
        raise SubmissionRejected(f"{sub.path.name}: fails under the Flower simulation: "
                                 f"{_user_error(e, sub.path)}") from None
    if record.status != smoke.status:
        raise SubmissionRejected(f"{sub.path.name}: status {record.status} under the Flower simulation "
                                 f"({_one_line(record.reason)}), {smoke.status} in process")
    mine, theirs = smoke.metrics, record.metrics
    off = sorted(k for k in set(mine) | set(theirs)
                 if k not in mine or k not in theirs or abs(mine[k] - theirs[k]) > FLOWER_TOLERANCE)
    if off:
        k = off[0]
        raise SubmissionRejected(f"{sub.path.name}: works only in one process: {k} is {mine.get(k)} in process "
                                 f"but {theirs.get(k)} under the Flower simulation (keep every client's memory in "
                                 f"its `state` dict, never on self)")
    for key in ("bytes_up", "bytes_down"):
        if smoke.comm[key] != record.comm[key]:
            raise SubmissionRejected(f"{sub.path.name}: sends {record.comm[key]} {key} under the Flower simulation "
                                     f"but {smoke.comm[key]} in process")
    return record


def _ensure_registered(path: str, name: str) -> None:
    """In a worker process: plugins, then the submission file, unless already registered."""
    R.load_plugins()
    if name not in R.ALGORITHMS:
        load_submission(path)


def run_submitted_cell(path: str, name: str, info: dict[str, str], cell: Any, results_path: str,
                       threads: int = 1) -> Record:
    """Run one suite cell of the submission and append its record (ok or failed).

    Mirrors ``sweep.run_cell`` but loads the submission first (worker processes do not have
    it) and stamps the record with the file's hash, the code version git cannot see.
    """
    import torch

    from benchmark.config import build_run_config
    from benchmark.engine import Engine
    from benchmark.results import ResultStore, now_iso
    from benchmark.sweep import thread_lock_for_bars

    torch.set_num_threads(max(1, threads))
    thread_lock_for_bars()
    _ensure_registered(path, name)
    try:
        record = Engine(build_run_config(cell.config)).run(resume=False)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a failing cell is recorded, the suite goes on
        tb = traceback.extract_tb(e.__traceback__)
        where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
        record = failed_record(cell.seed, f"{type(e).__name__}: {e}{where}", -1, now_iso()).to_dict()
    stamped = Record.from_dict(record).stamped(suite=cell.suite, scale=cell.scale, cell_id=cell.cell_id,
                                               params=cell.params, seed=cell.seed, submission=dict(info))
    ResultStore(results_path).append(stamped.to_dict())
    return stamped


def submission_cells(sub: Submission, suite: Any, scale: str | None) -> list[Any]:
    """The suite's cells with this algorithm as one more row beside the suite's methods
    (:func:`benchmark.sweep.method_cells`: the settings of its reference rows, the method's own
    options at their defaults), so its records sit beside the stored baselines."""
    from benchmark.sweep import method_cells

    try:
        return method_cells(suite, scale, sub.name)
    except BenchmarkError as e:
        raise SubmissionRejected(f"{sub.path.name}: suite '{suite.name}' cannot run it: {_one_line(str(e))}") from None


def estimated_seconds(store: Path, cells: int) -> str:
    """What ``cells`` new cells cost, from the wall time of the store's stored cells: one line,
    or '' when the store holds none to go by."""
    from benchmark.results import ResultStore

    walls = [float(r.wall_time_s) for r in (ResultStore(store).read() if store.is_file() else [])
             if r.ok and isinstance(r.wall_time_s, (int, float)) and r.wall_time_s > 0]
    if not walls:
        return ""
    mean = sum(walls) / len(walls)
    total = mean * cells
    shown = f"{total:.0f} CPU-seconds" if total < 120 else f"{total / 60:.0f} CPU-minutes"
    return f"about {shown} ({cells} cells at the {mean:.0f} s mean of {len(walls)} stored cells)"


def run_submission_suite(sub: Submission, suite_name: str, scale: str | None, jobs: int,
                         results_dir: str | Path, progress: bool = True,
                         only: dict[str, Any] | None = None) -> tuple[list[Record], str, str]:
    """Run every cell of one suite for the submission (those matching ``only``, as ``sweep
    --only`` selects); returns (records, suite name, scale)."""
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    from benchmark.sweep import closing_parallel, load_suite, select_cells

    suite = load_suite(suite_name)
    scale = scale or suite.default_scale
    cells = select_cells(submission_cells(sub, suite, scale), only or {})
    # a mixed-task suite runs the cells of the tasks the method declares (the others print N/A,
    # as for every built-in method); a suite with none of its tasks is a mistake
    def task_of(c: Any) -> str:
        return (c.config.get("task") or {}).get("name", "node_cls")

    supported = [c for c in cells if task_of(c) in sub.cls.tasks]
    if not supported:
        tasks = sorted({task_of(c) for c in cells})
        raise SubmissionRejected(f"suite '{suite.name}' uses task(s) {', '.join(tasks)}, which "
                                 f"'{sub.name}' does not support (tasks = {sub.cls.tasks})")
    cells = supported
    out = str(suite.results_path(results_dir, scale))
    cost = estimated_seconds(Path(out), len(cells))
    print(f"{suite.name}[{scale}]: {len(cells)} cells beside the stored baselines"
          f"{'; ' + cost if cost else ''}", flush=True)
    jobs = max(1, min(jobs, len(cells)))
    threads = threads_per_job(jobs)  # FEDMM_THREADS overrides
    args = (str(sub.path), sub.name, sub.info)
    bar = tqdm(total=len(cells), desc=f"{sub.name} on {suite.name}[{scale}]", disable=not progress, unit="cell")
    records = []
    if jobs == 1:
        for c in cells:
            records.append(run_submitted_cell(*args, c, out, threads))
            bar.update(1)
    else:
        gen = Parallel(n_jobs=jobs, return_as="generator_unordered")(
            delayed(run_submitted_cell)(*args, c, out, threads) for c in cells)
        with closing_parallel(gen):
            for rec in gen:
                records.append(rec)
                bar.update(1)
    bar.close()
    return records, suite.name, scale


# --------------------------------------------------------------------------- CLI


def submit(path: str | Path, suites: list[str] | None = None, scale: str | None = None, jobs: int = 1,
           results_dir: str | Path = "results", out_dir: str | Path = "tables", leaderboard: bool = True,
           progress: bool = True, flower: bool = True,
           only: dict[str, Any] | None = None) -> tuple[Submission, list[dict[str, Any]]]:
    """All gates, then the suites, then the leaderboard; returns the submission and its records.

    Importing the file runs its code with the user's privileges: submit only files you trust.
    An interrupt (Ctrl-C, SIGTERM) says what it left: nothing during the checks; during the
    suites, the cells recorded so far (a new submit runs every cell again).
    """
    progress_note = SubmitProgress(str(path), str(results_dir))
    try:
        sub = load_submission(path)
        smoke = _gates(sub, flower)
        _print_accepted(sub, smoke, flower)
        progress_note.start_suites(sub, suites or [], scale)
        records: list[Record] = []
        for name in suites or []:
            recs, suite_name, sc = run_submission_suite(sub, name, scale, jobs, results_dir, progress, only)
            _print_suite(suite_name, sc, recs)
            records += recs
        if not suites:
            print("no --suite given: nothing recorded (add e.g. --suite demo --scale tiny)")
        if leaderboard and suites:
            from benchmark.report.leaderboard import build_leaderboard

            progress_note.stage = "leaderboard"
            res = build_leaderboard(results_dir, out_dir)
            print(f"leaderboard: {res.html}")
    except KeyboardInterrupt as e:
        raise as_interrupted(e, progress_note.message()) from None
    return sub, records


def _gates(sub: Submission, flower: bool) -> Record:
    """Contract, smoke cell, Flower gate; a rejection withdraws the method. Returns the smoke record."""
    try:
        check_contract(sub)
        smoke = smoke_test(sub)
        if flower:
            flower_gate(sub, smoke)
    except BenchmarkError:
        withdraw(sub)
        raise
    return smoke


def _print_accepted(sub: Submission, smoke: Record, flower: bool) -> None:
    m = smoke.metrics
    shown = ", ".join(f"{k} {v:.3f}" for k, v in m.items() if k.startswith("test/") and isinstance(v, float))
    print(f"accepted: algorithm '{sub.name}' from {sub.path.name} (sha256 {sub.sha256[:12]}); "
          f"smoke cell ok ({smoke.rounds_run} rounds{', ' + shown if shown else ''})"
          f"{'; same under the Flower simulation' if flower else ''}")


def _print_suite(suite_name: str, scale: str, recs: list[Record]) -> None:
    failed = [r for r in recs if not r.ok]
    print(f"{suite_name}[{scale}]: {len(recs)} cells run, {len(failed)} failed")
    for r in failed[:10]:
        print(f"  failed {r.params} seed {r.seed}: {r.reason}")


@dataclass
class SubmitProgress:
    """Where a submission is, so an interrupt can say what is true: the checks write nothing,
    each finished suite cell is appended at once, the leaderboard is rebuilt last."""

    file: str
    results_dir: str
    stage: str = "checks"
    stores: tuple[Path, ...] = ()
    sha256: str = ""
    before: int = 0

    def start_suites(self, sub: Submission, suites: list[str], scale: str | None) -> None:
        from benchmark.sweep import load_suite

        self.stage, self.sha256 = "suites", sub.sha256
        self.stores = tuple(s.results_path(self.results_dir, scale or s.default_scale)
                            for s in (load_suite(n) for n in suites))
        self.before = self._recorded()

    def _recorded(self) -> int:
        from benchmark.results import ResultStore

        return sum(1 for store in self.stores if store.exists() for r in ResultStore(store).read()
                   if (r.submission or {}).get("sha256") == self.sha256)

    def message(self) -> str:
        name = Path(self.file).name
        if self.stage == "checks":
            return f"submit stopped during the checks of {name}: nothing was recorded"
        saved = self._recorded() - self.before
        if self.stage == "leaderboard":
            return (f"submit stopped while rebuilding the leaderboard: the {saved} cells of {name} are recorded "
                    f"in {self.results_dir}/; rebuild it with: python run_benchmark.py leaderboard")
        return (f"submit stopped: {saved} cells of {name} recorded in {self.results_dir}/, the rest not run, the "
                f"leaderboard not rebuilt; submitting again runs every cell again")


def cmd_submit(a: argparse.Namespace) -> int:
    """`submit`: exit 0 when accepted and every suite cell succeeded, 1 when a cell failed."""
    from benchmark.config import parse_override

    _, records = submit(a.file, a.suites, a.scale, a.jobs, a.results, a.out, leaderboard=a.leaderboard,
                        flower=a.flower, only=dict(parse_override(o) for o in a.only))
    return 0 if all(r.ok for r in records) else 1


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the `submit` verb with the CLI."""
    p = sub.add_parser("submit", help="check a method file, smoke-run it, run suites with it, rebuild the leaderboard")
    p.add_argument("file", help="a Python file registering exactly one algorithm (see methods/template.py)")
    p.add_argument("--suite", dest="suites", action="append", default=[], metavar="NAME",
                   help="run this suite with the method in place of the suite's algorithms (repeatable)")
    p.add_argument("--scale", choices=("tiny", "small", "paper"), help="scale of the suites (default: each suite's)")
    p.add_argument("--jobs", type=int, default=1, help="cells in parallel (joblib processes)")
    p.add_argument("--only", action="append", default=[], metavar="KEY=VALUE",
                   help="run only the suite's cells with this grid value or seed (repeatable), as sweep --only")
    p.add_argument("--results", default="results", help="results directory")
    p.add_argument("--out", default="tables", help="leaderboard output directory")
    p.add_argument("--no-leaderboard", dest="leaderboard", action="store_false", help="do not rebuild the leaderboard")
    p.add_argument("--no-flower", dest="flower", action="store_false",
                   help="skip the gate that runs the smoke cell under the Flower simulation (needs the scale extra)")
    p.set_defaults(handler=cmd_submit)
