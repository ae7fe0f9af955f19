"""What crosses a Flower message, and what a ClientApp keeps in its context.

* Payloads (flat dicts of tensors) travel packed into one byte ``Array`` of an
  ``ArrayRecord`` (:data:`PAYLOAD_ARRAY`), written by :func:`benchmark.checkpoint.dumps`
  (safetensors + JSON, no pickle): the same names, order, dtypes, shapes and bytes on both
  ends, so the ledger counts what it counts in process. One array, not one per tensor,
  because Flower moves every array of a message as its own object, one request each, on
  every hop (ServerApp, SuperLink, SuperNode, ClientApp): a FedProx message of 26 objects
  took about 0.4 s to pull on each hop of a loopback deployment (2-core CPU).
* Scores travel as a ``MetricRecord`` keyed ``split|metric``.
* Control data (the run config, the federation's metadata, the round, audit findings)
  travels as a ``ConfigRecord`` of strings and numbers; it is not an algorithm's payload and
  the ledger does not count it.
* A client's private ``state`` stays on its node, in ``Context.state``, as bytes written by
  :func:`benchmark.checkpoint.dumps` (safetensors + JSON, no pickle) and read back the way a
  checkpoint is: nothing in it can run code or import anything when it is read. The node's
  own ``ClientData`` is an anchor there, named rather than copied.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from benchmark import checkpoint
from benchmark.comm import Payload
from benchmark.federation import FederationMeta

SEP = "|"
STATE_KEY = "fedmm.state"


PAYLOAD_ARRAY = "packed"  # the one array of a payload's ArrayRecord


def payload_to_record(payload: Payload) -> ArrayRecord:
    """A payload packed into one uint8 array, its tensors in their own key order."""
    tensors = {k: t.detach().cpu().contiguous().clone() for k, t in payload.items()}  # no shared storage
    return ArrayRecord({PAYLOAD_ARRAY: Array(np.frombuffer(checkpoint.dumps(tensors), dtype=np.uint8).copy())})


def record_to_payload(record: ArrayRecord, device: torch.device) -> Payload:
    """The inverse of :func:`payload_to_record`, onto ``device``; BadCheckpoint when the record
    is not a packed payload (nothing in it can run code when read)."""
    if list(record.keys()) != [PAYLOAD_ARRAY]:
        raise checkpoint.BadCheckpoint(f"a payload record holds {sorted(record.keys())}, not one '{PAYLOAD_ARRAY}' array")
    payload = checkpoint.loads(record[PAYLOAD_ARRAY].numpy().tobytes(), map_location=device)
    if not isinstance(payload, dict) or not all(isinstance(t, torch.Tensor) for t in payload.values()):
        raise checkpoint.BadCheckpoint("a payload record that is not a flat dict of tensors")
    return payload


def scores_to_record(scores: dict[str, dict[str, float]]) -> MetricRecord:
    """``{split: {metric: value}}`` as one flat MetricRecord (ints stay ints)."""
    out = MetricRecord()
    for split, metrics in scores.items():
        for name, v in metrics.items():
            out[f"{split}{SEP}{name}"] = int(v) if isinstance(v, (bool, int, np.integer)) else float(v)
    return out


def record_to_scores(record: MetricRecord) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key, v in record.items():
        split, name = key.split(SEP, 1)
        out.setdefault(split, {})[name] = v  # type: ignore[assignment]
    return out


def meta_to_json(meta: FederationMeta) -> str:
    return json.dumps(dataclasses.asdict(meta))  # key order kept: feature_dims order is modality order


def meta_from_json(text: str) -> FederationMeta:
    d = json.loads(text)
    d["client_ids"] = [int(c) for c in d["client_ids"]]
    return FederationMeta(**d)


def control(**values: Any) -> ConfigRecord:
    """A ConfigRecord of control values (strings, numbers, lists of one type)."""
    return ConfigRecord({k: v for k, v in values.items() if v is not None})


def load_state(records: RecordDict, device: torch.device, client: Any = None) -> dict:
    """The client's private state from its context ({} before its first message)."""
    if STATE_KEY not in records:
        return {}
    blob = records[STATE_KEY]["blob"]  # type: ignore[index]
    state = checkpoint.loads(bytes(blob), map_location=device, anchors={"client": client})  # type: ignore[arg-type]
    if not isinstance(state, dict):
        raise checkpoint.BadCheckpoint("a client state that is not a dict")
    return state


def save_state(records: RecordDict, state: dict, client: Any = None) -> None:
    records[STATE_KEY] = ConfigRecord({"blob": checkpoint.dumps(state, anchors={"client": client})})


__all__ = ["PAYLOAD_ARRAY", "control", "load_state", "meta_from_json", "meta_to_json", "payload_to_record",
           "record_to_payload", "record_to_scores", "save_state", "scores_to_record"]
