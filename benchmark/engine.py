"""The round loop: sample clients, local update, aggregate, evaluate, select, stop.

One seed drives everything (artifact, initialization, client sampling, dropout). The best
round is chosen on the size-weighted validation score of the task's primary metric, and
the test scores of that round are reported. Checkpoints hold the whole simulation state,
so a killed run resumes at its last checkpoint with the same numbers it would have had.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from benchmark import checkpoint, stages
from benchmark import registry as R
from benchmark.algorithm import AlgoContext, Algorithm, Broadcast, NonFiniteLoss
from benchmark.channel import Channel, LocalChannel, Upload
from benchmark.comm import Ledger, Payload
from benchmark.config import RunConfig, component_config
from benchmark.cost import CostLog, RoundTimer
from benchmark.determinism import DeterminismWatch, configure as configure_determinism
from benchmark.precision import apply_matmul_precision
from benchmark.kge.triton_training import select_distance_kernel
from benchmark.errors import BenchmarkError
from benchmark.guard import verdict as guard_verdict
from benchmark.federation import FederatedData, FederationMeta, build_federation
from benchmark.memory import PeakMemory
from benchmark.record import Record
from benchmark.metrics import client_weighted_scores
from benchmark.results import now_iso, provenance
from benchmark.roles import ClientSide, ServerSide
from benchmark.seeding import seed_globals, seeded_rng
from benchmark.trackers import Trackers


#: what ``train.device: auto`` resolves to when set (the test suite's ``--device`` sets it)
DEVICE_ENV = "FEDMM_DEVICE"


def resolve_device(name: str) -> torch.device:
    """'auto' -> ``$FEDMM_DEVICE`` when set, else CUDA when present, else CPU."""
    source = "train.device"
    if name == "auto" and os.environ.get(DEVICE_ENV, "").strip():
        name, source = os.environ[DEVICE_ENV].strip(), f"${DEVICE_ENV} (train.device: auto)"
    elif name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(name)
    except RuntimeError:
        choices = "auto, cpu, cuda or cuda:N" if source == "train.device" else "cpu, cuda or cuda:N"
        raise BenchmarkError(f"{source} must be {choices}, got '{name}'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BenchmarkError(f"{source} is '{name}' but CUDA is not available; use 'auto' or 'cpu'")
    return dev


def _non_finite_key(payload: Payload) -> str | None:
    """The first floating-point entry holding a NaN or infinity, or None. One device read
    for the whole payload (not one per entry); the slow search runs only when one is bad."""
    floats = [(k, t) for k, t in payload.items() if t.dtype.is_floating_point]
    if not floats:
        return None
    flags = torch.stack([torch.isfinite(t).all().to(floats[0][1].device) for _, t in floats])
    if bool(flags.all()):
        return None
    return next(k for (k, _), ok in zip(floats, flags.tolist()) if not ok)


def aggregate_scores(per_client: dict[int, dict[str, dict[str, float]]], split: str) -> dict[str, float]:
    """Size-weighted mean over clients of every metric of one split (no task-specific pooling)."""
    return client_weighted_scores(per_client, split)


def _pad_history(history: dict[str, list]) -> None:
    """Give every curve one entry per round run (None where it was not measured)."""
    n = len(history.get("round", []))
    for curve in history.values():
        curve.extend([None] * (n - len(curve)))


@dataclass
class SimState:
    """Everything that a checkpoint must hold to resume a run exactly.

    ``algo`` is the server side's algorithm instance; ``states`` the clients' private states
    (in process; a remote channel keeps them on the clients); ``cost`` the rounds' stage
    seconds and the server's held memory (None in a checkpoint written before they were kept).
    """

    algo: Algorithm
    states: dict[int, dict]
    broadcast: Broadcast
    ledger: Ledger
    next_round: int = 0
    history: dict[str, list] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)
    bad_evals: int = 0
    cost: CostLog | None = None


#: builds the channel to the clients from the engine (in process by default); a remote
#: backend passes its own (``benchmark.backends.flower_app``)
ChannelFactory = Callable[["Engine"], Channel]


def _not_a_simulation_of(sim: Any, algo_cls: type[Algorithm]) -> str:
    """Why a decoded checkpoint is not this run's simulation ('' when it is): the engine calls
    the algorithm's hooks on ``sim.algo``, so it must be exactly the configured class."""
    if type(sim) is not SimState:
        return "does not hold a simulation"
    if type(sim.algo) is not algo_cls:
        return f"holds an algorithm of class {type(sim.algo).__name__}, not {algo_cls.__name__}"
    if type(sim.ledger) is not Ledger or not (sim.cost is None or type(sim.cost) is CostLog):
        return "holds a malformed ledger or cost log"
    if not isinstance(sim.states, dict) or not all(isinstance(v, dict) for v in sim.states.values()):
        return "holds malformed client states"
    if not isinstance(sim.next_round, int) or not isinstance(sim.history, dict) or not isinstance(sim.best, dict):
        return "holds a malformed round counter or history"
    return ""


class Engine:
    """Runs one configured cell end to end and returns its result record.

    ``fed`` is an already-built federation (else the registered builder makes it from the
    config); ``channel`` replaces the in-process clients with a remote engine's, in which
    case no federation is built here at all: the server side knows only ``channel.meta``.
    """

    def __init__(self, cfg: RunConfig, fed: FederatedData | None = None, progress: bool = False,
                 audit: bool = True, channel: ChannelFactory | None = None,
                 on_eval: Callable[[int, float], bool] | None = None) -> None:
        R.load_plugins()
        self.cfg = cfg
        # told (round, validation score) after each evaluation; True ends the run there (a tuner's
        # pruner: benchmark/tune). It sees validation only, never a test number.
        self.on_eval = on_eval
        self.device = resolve_device(cfg.train.device)
        configure_determinism(cfg.train.deterministic)
        apply_matmul_precision(cfg.train.matmul_precision)
        select_distance_kernel(cfg.train.distance_kernel, self.device)
        seed_globals(cfg.seed)
        self.progress = progress
        self.audit = audit
        task_cls = R.TASKS.get(cfg.task.name)
        self.task = task_cls(component_config(R.TASKS, cfg.task, "task"))
        self.algo_cls = R.ALGORITHMS.get(cfg.algorithm.name)
        if not R.applicable(cfg.algorithm.name, cfg.task.name):
            raise BenchmarkError(f"algorithm '{cfg.algorithm.name}' is not defined for task '{cfg.task.name}' "
                                 f"(it supports: {', '.join(self.algo_cls.tasks)})")
        self.algo_cfg = component_config(R.ALGORITHMS, cfg.algorithm, "algorithm")
        # output.trackers (benchmark/trackers): built now, so a missing package fails before any data is built
        self.trackers = Trackers.from_config(cfg)
        self.fed: FederatedData | None = None
        if channel is not None:
            self.channel = channel(self)
        else:
            if fed is None:
                fed = build_federation(cfg)  # the builder data_prep registered (the core does not import it)
            self.fed = fed
            self.clients = [c.to(self.device) for c in fed.clients]
            if self.algo_cls.centralized:
                if fed.pooled is None:
                    raise BenchmarkError("this federated artifact has no pooled view for a centralized run")
                self.train_clients = [fed.pooled.to(self.device)]
            else:
                self.train_clients = self.clients
            self.channel = LocalChannel(fed, ClientSide(self.algo_cls, self.algo_cfg, self.context(fed.meta())),
                                        self.clients, self.train_clients, self.algo_cls.upload_keys, audit)
        self.meta: FederationMeta = self.channel.meta

    # ------------------------------------------------------------------ helpers
    def context(self, meta: FederationMeta, train_ids: list[int] | None = None) -> AlgoContext:
        """What both halves of the algorithm know of the federation (metadata only)."""
        ids = train_ids if train_ids is not None else ([-1] if self.algo_cls.centralized else meta.client_ids)
        return AlgoContext(run=self.cfg, task=self.task, modalities=meta.modalities, feature_dims=meta.feature_dims,
                           num_classes=meta.num_classes, num_clients=len(ids), client_ids=list(ids),
                           num_global_nodes=meta.num_global_nodes, device=self.device, seed=self.cfg.seed)

    def _context(self) -> AlgoContext:
        return self.context(self.meta, self.channel.train_ids)

    def _checkpoint_path(self) -> Path:
        return Path(self.cfg.output.checkpoint_dir) / f"{self.cfg.hash()}{checkpoint.SUFFIX}"

    def anchors(self, algo: Algorithm) -> dict[str, Any]:
        """What a checkpoint names instead of copying: objects this engine builds itself from
        the config (the server algorithm's context and config, the task, the clients' data)."""
        anchors: dict[str, Any] = {"ctx": algo.ctx, "algo_cfg": algo.cfg, "task": self.task, "run": self.cfg}
        anchors.update({f"client{i}": c for i, c in enumerate(self.clients)})
        anchors.update({f"train{i}": c for i, c in enumerate(self.train_clients)})
        return anchors

    def _save_checkpoint(self, sim: SimState, server: ServerSide) -> None:
        checkpoint.save(self._checkpoint_path(), sim, self.cfg.hash(), self.anchors(server.algo))

    def _load_checkpoint(self, server: ServerSide) -> SimState | None:
        path = self._checkpoint_path()
        sim = checkpoint.load(path, self.cfg.hash(), map_location=self.device, anchors=self.anchors(server.algo))
        if sim is None:
            return None
        why = _not_a_simulation_of(sim, self.algo_cls)
        if why:
            checkpoint.quarantine(path, why)
            return None
        return sim

    @staticmethod
    def _for_client(broadcast: Broadcast, cid: int) -> Payload:
        if broadcast and all(isinstance(k, int) for k in broadcast):
            return broadcast[cid]  # type: ignore[index]
        return broadcast  # type: ignore[return-value]

    def _sample(self, rnd: int) -> list[int]:
        ids = self.channel.train_ids
        k = len(ids)
        m = max(1, int(round(self.cfg.train.client_fraction * k)))
        if m >= k:
            return list(ids)
        rng = seeded_rng(self.cfg.seed, rnd)
        idx = sorted(rng.choice(k, size=m, replace=False).tolist())
        return [ids[i] for i in idx]

    def _evaluate(self, sim: SimState, rnd: int) -> dict[int, dict[str, dict[str, float]]]:
        pooled = self.algo_cls.centralized
        sends = {cid: self._for_client(sim.broadcast, -1 if pooled else cid) for cid in self.channel.eval_ids}
        if self.channel.remote:
            for cid, payload in sends.items():
                sim.ledger.record(rnd, "down", cid, payload, phase="eval")
        return self.channel.evaluate(rnd, sends)

    @staticmethod
    def _append(sim: SimState, key: str, value: float | None) -> None:
        """One value of this round on curve ``key`` (earlier rounds without one read None)."""
        curve = sim.history.setdefault(key, [])
        curve.extend([None] * (len(sim.history["round"]) - 1 - len(curve)))
        curve.append(value)

    def _record_train_loss(self, sim: SimState, ups: dict[int, Upload]) -> None:
        """The round's training loss: the mean over the clients that measured one of their local
        training's last-epoch loss (a channel that measures none leaves the round None)."""
        losses = [u.train_loss for u in ups.values() if u.train_loss is not None and math.isfinite(u.train_loss)]
        self._append(sim, "train/loss", sum(losses) / len(losses) if losses else None)

    def _record_round_metrics(self, sim: SimState, per_client: dict[int, dict[str, dict[str, float]]],
                              val: dict[str, float], test: dict[str, float]) -> None:
        """Every metric the task reports at this evaluation (the primary one is already kept),
        and the spread of the primary validation score across clients (population std)."""
        primary = self.task.primary_metric
        for split, scores in (("val", val), ("test", test)):
            for metric, value in scores.items():
                if metric != primary and metric != "n" and not metric.startswith("_") \
                        and isinstance(value, (int, float)) and math.isfinite(value):
                    self._append(sim, f"{split}/{metric}", float(value))
        values = [pc["val"][primary] for pc in per_client.values()
                  if "val" in pc and isinstance(pc["val"].get(primary), (int, float))]
        if values:
            self._append(sim, f"val/{primary}_client_std", float(np.std(values)))

    def _record_extra_splits(self, sim: SimState, per_client: dict[int, dict[str, dict[str, float]]]) -> None:
        """Per-round primary metric of every split besides val/test that all clients report
        (e.g. a method's server and client views, ``val_server``/``val_client``), so that
        convergence figures can be drawn from ``record["curves"]``; earlier rounds read None."""
        if not per_client:
            return
        splits = [s for s in next(iter(per_client.values())) if s not in ("val", "test")]
        metric = self.task.primary_metric
        for split in splits:
            if not all(split in pc and metric in pc[split] for pc in per_client.values()):
                continue
            self._append(sim, f"{split}/{metric}", self.task.aggregate(per_client, split)[metric])

    def _take_upload(self, sim: SimState, rnd: int, cid: int, up: Upload, phase: str = "train") -> Payload:
        """Check, record and audit one upload as the server receives it."""
        if phase == "train":
            bad = _non_finite_key(up.payload)
            if bad is not None:
                raise NonFiniteLoss(f"non-finite values in upload '{bad}' of client {cid}")
        sim.ledger.record(rnd, "up", cid, up.payload, phase=phase)
        if self.audit:
            sim.ledger.add_findings(up.findings)
        return up.payload

    def _setup_exchange(self, sim: SimState, server: ServerSide) -> None:
        ups = self.channel.setup_uploads(list(self.channel.train_ids))
        uploads = {cid: self._take_upload(sim, -1, cid, ups[cid], phase="setup") for cid in self.channel.train_ids}
        replies = server.setup_aggregate(uploads)
        for cid in self.channel.train_ids:
            sim.ledger.record(-1, "down", cid, replies[cid], phase="setup")
        self.channel.setup_replies({cid: replies[cid] for cid in self.channel.train_ids})

    def _warm_start(self, server: ServerSide, sim: SimState) -> None:
        """Start from the pre-training stage the algorithm asks for (``benchmark.stages``):
        cached or run now on this federation; the server half gets its tensors, each client
        its own under ``state["warm_start"]``. Runs before ``init_server`` of a fresh run
        only (a resumed run's checkpoint already holds what the stage gave)."""
        overrides = server.algo.pretraining()
        self.pretraining = None
        if overrides is None:
            return
        if self.channel.client_states() is None or self.fed is None:
            raise BenchmarkError(f"algorithm '{self.cfg.algorithm.name}' starts from a pre-training stage, which "
                                 f"runs in process only; use the in-process backend")
        stage = stages.obtain(overrides, self.cfg, type(self), self.fed, self.meta.artifact_hash, self.device,
                              self.audit)
        server.algo.start_from(stage.server)
        for cid, state in sim.states.items():
            if cid in stage.clients:
                state["warm_start"] = stage.clients[cid]
        self.pretraining = stage.info

    # ------------------------------------------------------------------ main loop
    def run(self, resume: bool = True) -> dict[str, Any]:
        try:
            return self._run(resume)
        finally:
            self.channel.close()

    def _run(self, resume: bool) -> dict[str, Any]:
        cfg = self.cfg
        primary = f"val/{self.task.primary_metric}"
        trackers = self.trackers
        if trackers:  # the config as params, the record's provenance as tags; before the clock and memory watch
            trackers.start(cfg, provenance(cfg, self.meta.artifact_hash, self.meta.artifact_recipe, self.device))
        start = time.perf_counter()
        status, error = "ok", None
        states = self.channel.client_states()  # None: the clients keep their states on their own nodes
        local = states is not None
        with trackers.closed_on_error(), PeakMemory(self.device) as mem, \
                DeterminismWatch(cfg.train.deterministic) as watch:
            server = ServerSide(self.algo_cls, self.algo_cfg, self._context())
            sim = self._load_checkpoint(server) if resume and local and cfg.train.checkpoint_every > 0 else None
            if sim is None:
                sim = SimState(algo=server.algo, states=states if states is not None else {},
                               broadcast={}, ledger=Ledger(),
                               history={k: [] for k in ("round", primary, f"test/{self.task.primary_metric}",
                                                        "bytes_up", "bytes_down", "seconds")},
                               best={"score": -math.inf, "round": -1})
                self._warm_start(server, sim)
                sim.broadcast = server.init_server()
                if self.algo_cls.has_setup:
                    self._setup_exchange(sim, server)
            else:
                server.algo = sim.algo
                assert states is not None  # a checkpoint is read only in process
                states.clear()  # the channel's own dict, refilled: its clients read and write it
                states.update(sim.states)
                sim.states = states
                trackers.replay(sim.history)  # the rounds before the checkpoint
            cost = sim.cost = sim.cost or CostLog()
            cost.note_server(server.algo, sim.broadcast)
            rounds = range(sim.next_round, cfg.train.rounds)
            bar = tqdm(rounds, desc=f"{cfg.algorithm.name} seed {cfg.seed}", disable=not self.progress, leave=False)
            for rnd in bar:
                t0 = time.perf_counter()
                n_up = len(sim.ledger.entries)
                timer = RoundTimer(self.device)
                try:
                    sampled = self._sample(rnd)
                    with timer.stage("download_s"):
                        sends = {cid: self._for_client(sim.broadcast, cid) for cid in sampled}
                        for cid, received in sends.items():
                            sim.ledger.record(rnd, "down", cid, received)
                    with timer.stage("client_s"):
                        ups = self.channel.train(rnd, sends)
                    timer.split_exchange(self.channel.last_exchange)
                    with timer.stage("upload_s"):
                        uploads = {cid: self._take_upload(sim, rnd, cid, ups[cid]) for cid in sends}
                    with timer.stage("server_s"):
                        sim.broadcast = server.aggregate(uploads, rnd)
                except NonFiniteLoss as e:
                    status, error = "failed", {"round": rnd, "reason": str(e)}
                    break
                seconds = time.perf_counter() - t0
                new = [e for e in sim.ledger.entries[n_up:] if e.phase == "train"]
                sim.history["round"].append(rnd)
                sim.history["bytes_up"].append(sum(e.nbytes for e in new if e.direction == "up"))
                sim.history["bytes_down"].append(sum(e.nbytes for e in new if e.direction == "down"))
                sim.history["seconds"].append(seconds)
                self._record_train_loss(sim, ups)
                cost.add_round(rnd, timer, seconds, sim.history["bytes_down"][-1], sim.history["bytes_up"][-1])
                cost.note_server(server.algo, sim.broadcast)
                last = rnd == cfg.train.rounds - 1
                told_to_stop = False  # the on_eval hook (a tuner's pruner) ends the run after this round
                if rnd % cfg.train.eval_every == 0 or last:
                    per_client = self._evaluate(sim, rnd)
                    val = self.task.aggregate(per_client, "val")
                    test = self.task.aggregate(per_client, "test")
                    score = val[self.task.primary_metric]
                    sim.history[primary].append(score)
                    sim.history[f"test/{self.task.primary_metric}"].append(test[self.task.primary_metric])
                    self._record_extra_splits(sim, per_client)
                    self._record_round_metrics(sim, per_client, val, test)
                    bar.set_postfix({"val": f"{score:.3f}"})
                    if score > sim.best["score"]:
                        sim.best = {"score": score, "round": rnd, "val": val, "test": test,
                                    "per_client": per_client}
                        sim.bad_evals = 0
                    else:
                        sim.bad_evals += 1
                    told_to_stop = self.on_eval is not None and self.on_eval(rnd, score)
                else:
                    sim.history[primary].append(None)
                    sim.history[f"test/{self.task.primary_metric}"].append(None)
                _pad_history(sim.history)
                trackers.log_round(sim.history)
                sim.next_round = rnd + 1
                if local and cfg.train.checkpoint_every > 0 and sim.next_round % cfg.train.checkpoint_every == 0:
                    self._save_checkpoint(sim, server)
                if told_to_stop or (cfg.train.patience > 0 and sim.bad_evals >= cfg.train.patience
                                    and sim.next_round >= cfg.train.min_rounds):  # no stop before min_rounds
                    break
        record: Record | None = None
        try:
            if self.audit and sim.ledger.violations and status == "ok":
                status, error = "failed", {"round": -1, "reason": "ledger audit: " + sim.ledger.violations[0]}
            ckpt = self._checkpoint_path()
            if local and ckpt.exists():
                ckpt.unlink()
            self.sim = sim
            record = self._record(sim, status, error, time.perf_counter() - start, mem.peak_mb, mem.growth_mb,
                                  watch.summary())
        finally:
            trackers.finish(record)  # final metrics and status; None (this raised): only closed
        return record.to_dict()

    def _record(self, sim: SimState, status: str, error: dict | None, wall: float, peak_mb: float,
                growth_mb: float, determinism: dict[str, Any]) -> Record:
        best = sim.best
        metrics: dict[str, float] = {}
        per_client_out: dict[str, list] = {}
        sizes: list[float] = []
        eval_sizes: dict[str, float] = {}
        if best.get("round", -1) >= 0:
            for split in ("val", "test"):
                for k, v in best[split].items():
                    metrics[f"{split}/{k}"] = v
            # other views a method reports (val_server, test_client...), at the same best round
            first = best["per_client"][min(best["per_client"])]
            for split in (s for s in first if s not in ("val", "test")):
                if all(split in pc for pc in best["per_client"].values()):
                    for k, v in self.task.aggregate(best["per_client"], split).items():
                        metrics[f"{split}/{k}"] = v
            cids = sorted(best["per_client"])
            for k in best["per_client"][cids[0]]["test"]:
                if k != "n" and not k.startswith("_"):
                    per_client_out[f"test/{k}"] = [best["per_client"][c]["test"][k] for c in cids]
            sizes = [best["per_client"][c]["test"]["n"] for c in cids]
            eval_sizes = {split: float(sum(best["per_client"][c][split].get("n", 0.0) for c in cids))
                          for split in ("val", "test") if all(split in best["per_client"][c] for c in cids)}
        elif status == "ok":
            status, error = "failed", {"round": -1, "reason": "no evaluation happened"}
        rounds_run = len(sim.history.get("round", []))
        secs = sim.history.get("seconds", [])
        record = Record(
            status=status, seed=self.cfg.seed, error=error, metrics=metrics,
            best_round=best.get("round", -1), rounds_run=rounds_run,
            per_client=per_client_out, client_sizes=sizes, eval_sizes=eval_sizes, curves=sim.history, comm=sim.ledger.summary(),
            seconds_per_round=float(np.median(secs)) if secs else None,
            cost=sim.cost.summary(type(self.channel).__name__) if sim.cost else None,
            server_memory_mb=sim.cost.server_memory_mb if sim.cost else None,
            bytes_per_round=(sim.ledger.total_bytes("up", "train") + sim.ledger.total_bytes("down", "train"))
            / max(rounds_run, 1),
            algorithm={"name": self.cfg.algorithm.name, "display_name": R.display_name(self.cfg.algorithm.name),
                       "personalized": self.algo_cls.personalized,
                       "constant_scores": bool(getattr(self.algo_cls, "constant_scores", False))},
            config=self.cfg.to_dict(),
            provenance=provenance(self.cfg, self.meta.artifact_hash, self.meta.artifact_recipe, self.device),
            determinism=determinism, availability=dict(self.meta.availability), coverage=dict(self.meta.coverage),
            peak_memory_mb=peak_mb, memory_growth_mb=growth_mb, wall_time_s=wall, timestamp=now_iso(),
            # the stage this run started from (benchmark.stages)
            pretraining=getattr(self, "pretraining", None) or None,
        )
        record.guard = guard_verdict(record)  # collapsed / converged, benchmark/guard.py
        return record


def run_config(cfg: RunConfig, progress: bool = False) -> dict[str, Any]:
    """Build the artifact (cached) and run one cell."""
    return Engine(cfg, progress=progress).run()
