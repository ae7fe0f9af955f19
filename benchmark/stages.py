"""Pre-training stages: a run that another run starts from, made once and cached.

Why a stage of its own: a method that starts from a pre-trained state (MMFeD3-HidE
initializes S^c from a FedE pre-training, seed Sec. IV-A) must not spend its own round
budget on it, or a table ranks methods by how fast they start; and every cell that shares
the pre-training (each imputer and FL method at one federation, seed and decoder setting)
should run it once, not once per cell.

A stage is an ordinary engine run of another algorithm on the same federation and seed,
asked for by the method (``Algorithm.pretraining`` returns the config overrides, e.g.
``{"algorithm": {"name": "fede"}, "train": {"rounds": 20}}``). Its end state, as named
tensors (``Algorithm.export_server`` and ``Algorithm.export_client``), is written as one
safetensors file under ``{output.cache_dir}/stages/<stage config hash>.safetensors`` with
its provenance (config hash, rounds, bytes, seconds) as JSON metadata; nothing read back
runs code. The method's run receives it before ``init_server``: the server side through
``Algorithm.start_from``, each client's private state under ``state["warm_start"]``. The
stage's communication is not in the method's ledger (the round budget and bytes per round
stay the method's own); the record names the stage under ``pretraining``.

In-process only: a remote channel holds the clients' states where this process cannot
put them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from benchmark.config import RunConfig, build_run_config, deep_merge
from benchmark.errors import BenchmarkError

STAGE_DIR = "stages"
SUFFIX = ".safetensors"


@dataclass
class StageState:
    """A finished stage: the server's tensors, each client's tensors, and what made them."""

    server: dict[str, Tensor]
    clients: dict[int, dict[str, Tensor]]
    info: dict[str, Any] = field(default_factory=dict)


def stage_config(run: RunConfig, overrides: dict[str, Any]) -> RunConfig:
    """The stage's config: the run's, with the overrides merged in; the ``algorithm``
    section is replaced whole (the stage's algorithm has its own options), checkpoints
    are off (a stage is short and cached) and so is early stopping unless asked for."""
    base = run.to_dict()
    over = dict(overrides)
    if "algorithm" in over:
        base["algorithm"] = dict(over.pop("algorithm"))
    base["train"] = {**base["train"], "checkpoint_every": 0, "patience": 0}
    return build_run_config(deep_merge(base, over))


def stage_path(cfg: RunConfig, artifact_hash: str) -> Path:
    """Where the stage of ``cfg`` (on the federation ``artifact_hash``) is cached."""
    return Path(cfg.output.cache_dir) / STAGE_DIR / f"{cfg.hash()}-{artifact_hash[:12]}{SUFFIX}"


def save(path: Path, state: StageState) -> None:
    """Write atomically (two sweep workers may make the same stage: the last rename wins,
    and both wrote the same numbers)."""
    from safetensors.torch import save_file

    tensors = {f"server.{k}": v.detach().cpu().contiguous() for k, v in state.server.items()}
    for cid, part in state.clients.items():
        tensors.update({f"client.{cid}.{k}": v.detach().cpu().contiguous() for k, v in part.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    save_file(tensors, str(tmp), metadata={"info": json.dumps(state.info, sort_keys=True)})
    os.replace(tmp, path)


def load(path: Path, device: torch.device) -> StageState | None:
    """The cached stage, or None when there is none or it cannot be read (it is then made
    again; a bad file is never half-used)."""
    if not path.exists():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            info = json.loads((f.metadata() or {}).get("info", "{}"))
            server: dict[str, Tensor] = {}
            clients: dict[int, dict[str, Tensor]] = {}
            for key in f.keys():
                scope, _, rest = key.partition(".")
                if scope == "server":
                    server[rest] = f.get_tensor(key).to(device)
                elif scope == "client":
                    cid, _, name = rest.partition(".")
                    clients.setdefault(int(cid), {})[name] = f.get_tensor(key).to(device)
                else:
                    return None
    except Exception:  # noqa: BLE001 - any unreadable file is remade, not trusted
        return None
    return StageState(server, clients, {**info, "cached": True})


def run_stage(cfg: RunConfig, engine_cls: Any, fed: Any, audit: bool) -> StageState:
    """Run the stage on the same federation and export its end state."""
    eng = engine_cls(cfg, fed=fed, progress=False, audit=audit)
    record = eng.run(resume=False)
    if record["status"] != "ok":
        reason = (record.get("error") or {}).get("reason", "unknown")
        raise BenchmarkError(f"pre-training stage '{cfg.algorithm.name}' failed: {reason}")
    sim = eng.sim
    clients = {cid: sim.algo.export_client(eng.channel.trainers[cid], sim.states[cid])
               for cid in eng.channel.train_ids}
    info = {"algorithm": cfg.algorithm.name, "config_hash": cfg.hash(), "rounds_run": record["rounds_run"],
            "bytes_up": record["comm"].get("bytes_up"), "bytes_down": record["comm"].get("bytes_down"),
            "wall_time_s": record["wall_time_s"], "val": {k: v for k, v in record["metrics"].items()
                                                            if k.startswith("val/")}}
    return StageState(sim.algo.export_server(), clients, info)


def obtain(overrides: dict[str, Any], run: RunConfig, engine_cls: Any, fed: Any, artifact_hash: str,
           device: torch.device, audit: bool = True) -> StageState:
    """The stage the run asks for: from the cache, else run and cache it."""
    cfg = stage_config(run, overrides)
    path = stage_path(cfg, artifact_hash)
    state = load(path, device)
    if state is not None:
        return state
    state = run_stage(cfg, engine_cls, fed, audit)
    save(path, state)
    state.info["cached"] = False
    return state
