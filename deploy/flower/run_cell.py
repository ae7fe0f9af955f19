"""Run one benchmark cell on a running Flower deployment and exit with its status.

    python deploy/flower/run_cell.py local-deployment --config deploy/flower/run.yaml \
        --results deployed/deployed.jsonl [--set train.rounds=20 ...]

Why a wrapper around ``flwr run deploy/flower CONNECTION --stream``: that command exits 0
even when the ServerApp fails, and it resolves ``config``/``results`` against the SuperLink's
working directory. This script waits (bounded) for the SuperLink named in
``$FLWR_HOME/config.toml``, passes absolute paths, streams the run, and then reads the record
the ServerApp appended to ``--results``: exit 0 when it is ``ok``, 1 with its reason when the
run failed or wrote nothing, 2 for bad input or an unreachable SuperLink.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from typing import Any
from pathlib import Path

APP = Path(__file__).resolve().parent


def flwr_home() -> Path:
    return Path(os.environ.get("FLWR_HOME") or Path.home() / ".flwr")


def connection_address(name: str) -> str:
    """HOST:PORT of connection ``name`` in ``$FLWR_HOME/config.toml`` (one line if missing)."""
    path = flwr_home() / "config.toml"
    if not path.is_file():
        raise SystemExit(_fail(2, f"no Flower config at {path}: copy deploy/flower/flwr-config.toml there "
                                  "(deploy/flower/README.md, step 0)"))
    links = tomllib.loads(path.read_text()).get("superlink", {})
    entry = links.get(name)
    if not isinstance(entry, dict) or "address" not in entry:
        known = ", ".join(k for k, v in links.items() if isinstance(v, dict)) or "(none)"
        raise SystemExit(_fail(2, f"connection '{name}' is not in {path}; it has: {known}"))
    return str(entry["address"])


def wait_for(address: str, seconds: float) -> None:
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(1.0)
            if s.connect_ex((host.strip("[]") or "127.0.0.1", int(port))) == 0:
                return
        time.sleep(0.5)
    raise SystemExit(_fail(2, f"no SuperLink answers at {address} within {seconds:.0f} s: start it first "
                              "(deploy/flower/README.md, step 1)"))


def _fail(code: int, message: str) -> int:
    print(f"run_cell: {message}", file=sys.stderr)
    return code


def read_records(path: Path) -> list[Any]:
    """The store's records (``benchmark.record.Record``), none when it does not exist yet."""
    from benchmark.results import ResultStore

    return ResultStore(path).read() if path.is_file() else []


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("connection", help="a [superlink.NAME] entry of $FLWR_HOME/config.toml")
    ap.add_argument("--config", default="", help="run YAML (on this machine; passed as an absolute path)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="config override (repeatable)")
    ap.add_argument("--results", required=True, help="JSON-lines store the ServerApp appends the record to")
    ap.add_argument("--num-clients", type=int, default=0, help="SuperNodes to wait for (0: partition.num_clients)")
    ap.add_argument("--link-wait", type=float, default=60.0, help="seconds to wait for the SuperLink")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds before the run is given up")
    a = ap.parse_args(argv)

    flwr = shutil.which("flwr", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if flwr is None:
        return _fail(2, "the flwr CLI is not installed: pip install -e '.[scale]'")
    config = Path(a.config).resolve() if a.config else None
    if config is not None and not config.is_file():
        return _fail(2, f"run config {config} not found")
    for o in a.overrides:
        if "=" not in o or ";" in o or '"' in o:
            return _fail(2, f"--set takes KEY=VALUE without ';' or '\"', got {o!r}")
    results = Path(a.results).resolve()
    results.parent.mkdir(parents=True, exist_ok=True)
    wait_for(connection_address(a.connection), a.link_wait)

    before = len(read_records(results))
    run_config = (f'config="{config or ""}" overrides="{"; ".join(a.overrides)}" '
                  f'results="{results}" num-clients={a.num_clients}')
    cmd = [flwr, "run", str(APP), a.connection, "--stream", "--run-config", run_config]
    try:
        proc = subprocess.run(cmd, timeout=a.timeout)
    except subprocess.TimeoutExpired:
        return _fail(1, f"the run did not finish within {a.timeout:.0f} s")
    new = read_records(results)[before:]
    if not new:
        return _fail(1, f"no record was written to {results} (flwr run exited {proc.returncode}); "
                        "the stream above says why")
    rec = new[-1]
    if not rec.ok:
        return _fail(1, f"the run failed: {rec.reason}")
    tests = {k: round(v, 4) for k, v in rec.metrics.items() if k.startswith("test/")}
    print(f"run_cell: ok, {rec.rounds_run} rounds, {tests}, record in {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
