"""A warm task executor for a Flower SuperNode: torch imported once, a fork per message.

Flower 1.42's SuperNode (``--isolation subprocess``, its default) starts a fresh
``flwr-clientapp`` process for every message, and each imports torch and the benchmark
again: seconds per message, most of a deployment's wall time (issue 31 measured 11 min for
20 rounds that take 0.7 s of engine time). Started with ``--isolation process``, a SuperNode
leaves launching to a separate executor; this module is that executor. It runs Flower's own
SuperExec loop (``run_superexec``: acquire a task from the SuperNode's runtime API, launch
it) with one change: a ClientApp task runs in a ``fork`` of this process, which imported
torch, the benchmark and its plugins once at start, instead of a new interpreter. The child
runs Flower's ``run_clientapp`` unchanged (pull the message, run the app, push the reply)
and exits; the parent reaps it. Other task types go to Flower's subprocess executor as
before. POSIX only (``os.fork``).

    flower-supernode --insecure --isolation process --port 9094 ... &
    python -m benchmark.backends.flower_warm --runtime-api-address 127.0.0.1:9094 --insecure &

``python -m benchmark.backends.flower_warm supernode ARGS`` runs ``flower-supernode ARGS``
with its idle wait cut from 3 s to ``NODE_IDLE_S``: a SuperNode that pulled nothing sleeps
3 s before asking the SuperLink again, and every message of a round waits for that.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from flwr.supercore.constant import TaskType
from flwr.supercore.superexec import run_superexec as superexec
from flwr.supercore.superexec.executor.subprocess_executor import SubprocessExecutor
from flwr.supercore.superexec.executor.types import ExecutionSpec, LaunchResult

from benchmark.backends.flower_pulls import quick_object_pulls


def _child(spec: ExecutionSpec) -> int:
    """Run one ClientApp task in this (forked) process; its exit code."""
    from flwr.supernode.runtime.run_clientapp import run_clientapp  # imported by warm_up already

    certs = Path(spec.root_certificates_path).read_bytes() if spec.root_certificates_path else None
    try:
        run_clientapp(runtime_api_address=spec.runtime_api_address, token=spec.token, insecure=spec.insecure,
                      certificates=certs, parent_pid=None,
                      runtime_dependency_install=spec.runtime_dependency_install)
    except SystemExit as e:  # run_clientapp ends with flwr_exit
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


class ForkExecutor(SubprocessExecutor):
    """Flower's subprocess executor, except that a ClientApp task runs in a fork of this warm process."""

    def __init__(self) -> None:
        self.children: set[int] = set()

    def launch(self, spec: ExecutionSpec) -> LaunchResult:
        if spec.task_type != TaskType.CLIENT_APP or not hasattr(os, "fork"):
            return super().launch(spec)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the parent's loop
            code = 1
            try:
                code = _child(spec)
            finally:
                os._exit(code)
        self.children.add(pid)
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        """Reap the children that have finished (no zombies over a long deployment)."""
        for pid in list(self.children):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.children.discard(pid)


def warm_up() -> None:
    """Import what every ClientApp message needs, once, before the first fork."""
    import torch  # noqa: F401
    from flwr.supernode.runtime import run_clientapp  # noqa: F401

    from benchmark import registry
    from benchmark.backends import flower_app, flower_deploy  # noqa: F401

    registry.load_plugins()
    quick_object_pulls()  # the forks pull each message from the SuperNode


NODE_IDLE_S = 0.2  # how long a SuperNode that pulled no message waits before asking again


class _NodeClock:
    """The ``time`` module as Flower's SuperNode loop sees it, with sleeps capped."""

    def __getattr__(self, name: str):
        import time

        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        import time

        time.sleep(min(seconds, NODE_IDLE_S))


def supernode(argv: list[str]) -> int:
    """``flower-supernode`` with the idle wait capped at ``NODE_IDLE_S``."""
    from flwr.supernode import start_client_internal
    from flwr.supernode.cli import flower_supernode

    start_client_internal.time = _NodeClock()  # type: ignore[assignment]
    quick_object_pulls()  # the node pulls each message from the SuperLink
    sys.argv = ["flower-supernode", *argv]
    flower_supernode()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["supernode"]:
        return supernode(argv[1:])
    ap = argparse.ArgumentParser(description="warm task executor for a Flower SuperNode started with --isolation process")
    ap.add_argument("--runtime-api-address", required=True, help="the SuperNode's --host:--port (e.g. 127.0.0.1:9094)")
    ap.add_argument("--insecure", action="store_true", help="plain HTTP to the SuperNode (loopback)")
    ap.add_argument("--root-certificates", default=None, help="CA bundle of the SuperNode's runtime API (TLS)")
    a = ap.parse_args(argv)
    if not a.insecure and a.root_certificates is None:
        ap.error("give --insecure (loopback) or --root-certificates")
    warm_up()
    # Flower polls the SuperNode for a task once a second; a fork costs milliseconds, so a
    # second per message would be most of a round: poll every 0.1 s unless told otherwise
    os.environ.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.1")
    executor = ForkExecutor()
    superexec.get_executor = lambda *args, **kwargs: executor  # Flower's loop, this executor
    superexec.run_superexec(runtime_api_address=a.runtime_api_address, insecure=a.insecure,
                            root_certificates_path=a.root_certificates, runtime_dependency_install=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
