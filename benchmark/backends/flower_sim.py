"""``run --backend flower``: one cell on Flower's simulation engine, and the run-backend registry.

The federation is built here (or handed in), each virtual SuperNode gets the client of its
``partition-id`` and nothing else, and the ``ServerApp`` runs the engine's round loop
through Flower messages (``benchmark.backends.flower_app``). The record is the one the
in-process engine writes, with ``backend: flower-simulation``; for the same config and seed its
metrics and ledger bytes are the same (``tests/test_flower_backend.py``).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable
from typing import Any

from benchmark.backends import RUN_BACKENDS, require
from benchmark.config import RunConfig
from benchmark.errors import ConfigError
from benchmark.federation import ClientData, FederatedData, FederationMeta, build_federation

#: Flower's simulation gives each virtual node's worker one CPU, with as many workers as
#: clients or cores (the fewer); FEDMM_FLOWER_CPUS sets the pool's CPUs instead
FLOWER_CPUS_ENV = "FEDMM_FLOWER_CPUS"


def flower_cpus_env() -> int:
    """``$FEDMM_FLOWER_CPUS`` as a count (0 or unset: as many as clients or cores); a ConfigError
    naming the variable when it is not a whole number >= 0."""
    raw = os.environ.get(FLOWER_CPUS_ENV, "").strip()
    if not raw:
        return 0
    if not (raw.isascii() and raw.isdigit()):
        raise ConfigError(f"{FLOWER_CPUS_ENV} must be a whole number of CPUs (0 for as many as clients or "
                          f"cores), got '{raw}'")
    return int(raw)


@RUN_BACKENDS.register("inprocess")
def run_inprocess(cfg: RunConfig, fed: FederatedData | None = None, progress: bool = False,
                  resume: bool = True) -> dict[str, Any]:
    """The engine with every client in this process (the default)."""
    from benchmark.engine import Engine

    return Engine(cfg, fed=fed, progress=progress).run(resume=resume)


def quiet_flower() -> None:
    """No telemetry calls (there may be no network to send them to) and no log chatter on stderr."""
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    warnings.filterwarnings("ignore", module="flwr")
    logging.getLogger("flwr").setLevel(logging.CRITICAL)  # a failing node reaches the user as our one-line error


@RUN_BACKENDS.register("flower")
def run_flower(cfg: RunConfig, fed: FederatedData | None = None, progress: bool = False,
               resume: bool = True, cpus: int | None = None,
               prepare: Callable[[], None] | None = None) -> dict[str, Any]:
    """One cell on Flower's simulation engine (``run_simulation``); checkpoints do not apply.
    ``prepare`` runs in every worker before its first message (``submit`` registers the
    submitted method there)."""
    require("flwr", "flower")
    require("ray", "flower")
    env_cpus = flower_cpus_env()  # a bad value fails before the federation is built
    quiet_flower()
    from flwr.simulation import run_simulation

    from benchmark.backends.flower_app import make_client_app, make_server_app

    from benchmark import registry as R

    R.load_plugins()
    if R.ALGORITHMS.get(cfg.algorithm.name).centralized:
        raise ConfigError(f"algorithm '{cfg.algorithm.name}' is a centralized upper bound: it pools every client's "
                          "data, so it has no federated form to run under Flower")
    if cfg.train.checkpoint_every > 0:
        raise ConfigError("--backend flower keeps client states on the nodes, so train.checkpoint_every must be 0")
    if fed is None:
        fed = build_federation(cfg)
    clients = list(fed.clients)
    meta = fed.meta()

    def source(_: RunConfig, pid: int) -> tuple[ClientData, FederationMeta]:
        return clients[pid], meta

    out: dict[str, Any] = {}
    server = make_server_app(lambda ctx: cfg, lambda rec, ctx: out.update(rec), lambda ctx: len(clients),
                             progress=progress)
    n_cpus = cpus or env_cpus or min(len(clients), os.cpu_count() or 1)
    backend = {"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
               # address "local": a new Ray instance of its own. Without it ray.init joins a `ray start`
               # cluster running on this host and refuses num_cpus, and the simulation hung on that error.
               "init_args": {"address": "local", "num_cpus": n_cpus, "num_gpus": 0, "include_dashboard": False,
                             "logging_level": logging.ERROR, "log_to_driver": False}}
    run_simulation(server_app=server, client_app=make_client_app(source, prepare), num_supernodes=len(clients),
                   backend_config=backend)
    if not out:
        raise ConfigError("the Flower simulation ended without a record (see its log above)")
    return out


run_flower.requires = ("flwr", "ray")  # type: ignore[attr-defined]

__all__ = ["FLOWER_CPUS_ENV", "quiet_flower", "run_flower", "run_inprocess"]
