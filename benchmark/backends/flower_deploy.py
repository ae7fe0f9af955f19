"""The ``ServerApp`` and ``ClientApp`` that ``flwr run deploy/flower`` starts on real nodes.

Each SuperNode is one silo: started with ``--node-config "partition-id=N"``, it holds the
client of that partition and no other (here built from the run config through the
registered federation builder, whose cache makes that cheap; a silo with its own data
registers a builder that loads it). The ServerApp reads the run config from the app's run
config (``config``: a run YAML, ``overrides``: ``key=value`` pairs separated by ``;``),
waits for ``num-clients`` nodes, runs the cell, and appends the record to ``results`` when
that is set. See ``deploy/flower/README.md``.
"""

from __future__ import annotations

from typing import Any

from flwr.app import Context

from benchmark.backends.flower_app import make_client_app, make_server_app
from benchmark.backends.flower_sim import quiet_flower
from benchmark.config import RunConfig, load_config
from benchmark.federation import ClientData, FederationMeta, build_federation

quiet_flower()


def run_config_of(context: Context) -> RunConfig:
    """The cell a deployment runs: ``config`` (a YAML path, or empty for the defaults) plus ``overrides``."""
    rc = context.run_config
    path = str(rc.get("config", "") or "") or None
    overrides = [o.strip() for o in str(rc.get("overrides", "") or "").split(";") if o.strip()]
    return load_config(path, overrides)


def silo_data(cfg: RunConfig, pid: int) -> tuple[ClientData, FederationMeta]:
    """This silo's client: partition ``pid`` of the federation the config describes."""
    fed = build_federation(cfg)
    if not 0 <= pid < fed.num_clients:
        raise ValueError(f"partition-id {pid} is outside this federation's {fed.num_clients} clients")
    return fed.clients[pid], fed.meta()


def write_record(record: dict[str, Any], context: Context) -> None:
    """Append the record to the run config's ``results`` store (when set) and print a summary line."""
    from benchmark.results import ResultStore

    path = str(context.run_config.get("results", "") or "")
    if path:
        ResultStore(path).append(record)
    tests = {k: round(v, 4) for k, v in (record.get("metrics") or {}).items() if k.startswith("test/")}
    name = (record.get("algorithm") or {}).get("name") or (record.get("config") or {}).get("algorithm", {}).get("name")
    print(f"fedmm: {record['status']} {name} seed {record['seed']}: {tests or record.get('error')}")


def num_clients(context: Context) -> int:
    """How many SuperNodes to wait for: ``num-clients``, else the config's partition.num_clients."""
    n = int(context.run_config.get("num-clients", 0) or 0)
    return n or run_config_of(context).partition.num_clients


server_app = make_server_app(run_config_of, write_record, num_clients, backend="flower-deployment")
client_app = make_client_app(silo_data)

__all__ = ["client_app", "run_config_of", "server_app", "silo_data"]
