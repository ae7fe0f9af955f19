"""The KG track end to end: KG federation builder, kg_completion task, and the S-Ind, MMInd,
FedE and MMFedE algorithms through the same Engine, ledger audit and config system."""

from __future__ import annotations

import pytest
import torch

from benchmark.config import build_run_config
from benchmark.engine import Engine
from benchmark.errors import ConfigError
from benchmark.kge import FilterIndex, build_decoder
from benchmark.kge.evaluation import both_directions
from data_prep.build import build_federation
from benchmark.kg_client import KGClientData

torch.set_num_threads(1)

ALGOS = ("s_ind", "mmind", "fede", "mmfede")


def kg_cfg(tmp, alg: str = "s_ind", seed: int = 0, rounds: int = 8, algo_params: dict | None = None, **task):
    return build_run_config({
        "seed": seed,
        "dataset": {"name": "synthetic_kg", "num_entities": 200},
        "partition": {"name": "relation_id", "num_clients": 3},
        "missing": {"name": "kg_items", "fill": "random", "rate": 0.5},
        "task": {"name": "kg_completion", "dim": 16, "num_negatives": 32, "batch_size": 256, **task},
        "algorithm": {"name": alg, **(algo_params or {})},
        "train": {"rounds": rounds, "local_epochs": 2, "lr": 0.05, "device": "auto"},
        "output": {"cache_dir": str(tmp / "cache"), "checkpoint_dir": str(tmp / "ckpt")},
    })


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("kg_track")


@pytest.fixture(scope="module")
def fed(tmp):
    return build_federation(kg_cfg(tmp))


@pytest.fixture(scope="module")
def records(tmp, fed):
    out = {}
    for alg in ALGOS:
        eng = Engine(kg_cfg(tmp, alg), fed=fed)
        out[alg] = (eng.run(), eng)
    return out


def random_mrr(fed) -> float:
    """Expected filtered MRR of a random scorer: a query with m remaining candidates has a
    uniform rank in 1..m, so E[1/rank] = H_m / m; weighted like the engine (by test triples)."""
    total, weight = 0.0, 0.0
    for c in fed.clients:
        index = FilterIndex(c.known_triples(), c.num_entities, c.num_relations)
        vals = []
        for q in both_directions(c.test_triples, c.num_relations):
            rows, _ = index.answers(q[:, 0], q[:, 1])
            others = torch.bincount(rows, minlength=len(q)) - 1
            for m in (c.num_entities - others).tolist():
                vals.append(sum(1.0 / k for k in range(1, m + 1)) / m)
        total += sum(vals) / len(vals) * c.test_triples.shape[0]
        weight += c.test_triples.shape[0]
    return total / weight


def test_builder_makes_kg_clients_with_local_ids(tmp, fed):
    assert len(fed.clients) == 3 and fed.num_global_nodes == 200 and fed.modalities == ["text", "image"]
    seen_rel = set()
    for c in fed.clients:
        assert isinstance(c, KGClientData) and c.y is None
        for t in (c.train_triples, c.valid_triples, c.test_triples):
            assert int(t[:, [0, 2]].max()) < c.num_entities and int(t[:, 1].max()) < c.num_relations
        assert c.edge_index.shape == (2, c.num_train)
        assert c.available.shape == (c.num_entities, 2) and c.features["text"].shape == (c.num_entities, 32)
        assert torch.equal(c.global_ids, torch.sort(c.global_ids).values)
        assert not (seen_rel & set(c.relations.tolist())), "clients must never share a relation"
        seen_rel |= set(c.relations.tolist())
        moved = c.to("cpu")
        assert isinstance(moved, KGClientData) and torch.equal(moved.test_triples, c.test_triples)
    again = build_federation(kg_cfg(tmp))
    assert again.stats["artifact_reused"] and again.artifact_hash == fed.artifact_hash
    for a, b in zip(fed.clients, again.clients):
        assert torch.equal(a.features["image"], b.features["image"]) and torch.equal(a.available, b.available)
    other = build_federation(kg_cfg(tmp, seed=1))
    assert other.artifact_hash != fed.artifact_hash
    assert other.stats["artifact_recipe"] == fed.stats["artifact_recipe"]


def test_every_kg_algorithm_runs_audited_and_beats_random(fed, records):
    ref = random_mrr(fed)
    assert 0.02 < ref < 0.2
    for alg, (rec, _) in records.items():
        assert rec["status"] == "ok", (alg, rec["error"])
        assert not rec["comm"]["violations"]
        mrr = rec["metrics"]["test/mrr"]
        assert mrr > 2.0 * ref, f"{alg}: test MRR {mrr:.3f} is not clearly above random ({ref:.3f})"
        assert set(rec["metrics"]) >= {f"test/{m}" for m in ("mrr", "hits@1", "hits@3", "hits@10")}
        assert rec["metrics"]["test/hits@1"] <= rec["metrics"]["test/hits@3"] <= rec["metrics"]["test/hits@10"]
        assert rec["client_sizes"] == [float(c.test_triples.shape[0]) for c in fed.clients]


def test_uploads_hold_entities_and_projections_never_relations(records):
    assert records["s_ind"][0]["comm"]["bytes_up"] == 0 and records["mmind"][0]["comm"]["bytes_up"] == 0
    fede = set(records["fede"][0]["comm"]["upload_names"])
    mm = set(records["mmfede"][0]["comm"]["upload_names"])
    assert fede == {"entity_ids", "entity", "num_train"}
    assert {"entity", "proj.text.weight", "proj.image.weight", "fusion.logits"} <= mm
    for names in (fede, mm):
        assert not any("relation" in n or "decoder" in n for n in names)
    eng = records["mmfede"][1]
    for e in eng.sim.ledger.entries:
        if e.direction == "up" and e.name == "entity":
            client = next(c for c in eng.clients if c.cid == e.cid)
            assert e.shape[0] == client.num_entities  # its own rows only


def test_server_means_entities_over_holders_and_weights_projections(records):
    eng = records["mmfede"][1]
    algo = eng.sim.algo
    ids = algo.client_ids_seen
    dev = algo.table.device  # uploads arrive on the server's device (CUDA under --device cuda)
    ups = {}
    for k, cid in enumerate(sorted(ids)):
        n = len(ids[cid])
        ups[cid] = {"entity": torch.full((n, algo.table.shape[1]), float(k), device=dev),
                    "num_train": torch.tensor([10.0 * (k + 1)], device=dev),
                    **{name: torch.full_like(v, float(k)) for name, v in algo.shared.items()}}
    out = algo.aggregate(ups, 99)
    holders = torch.zeros(algo.table.shape[0])
    value = torch.zeros(algo.table.shape[0])
    for k, cid in enumerate(sorted(ids)):
        holders[ids[cid].cpu()] += 1
        value[ids[cid].cpu()] += k
    expect = value[holders > 0] / holders[holders > 0]
    assert torch.allclose(algo.table[holders > 0, 0].cpu(), expect)
    alpha = torch.tensor([10.0, 20.0, 30.0]) / 60.0
    assert torch.allclose(algo.shared["fusion.logits"].cpu(), torch.full((3,), float((alpha * torch.arange(3.0)).sum())))
    assert set(out) == set(ids) and torch.equal(out[0]["entity"], algo.table[ids[0]])


def test_kg_runs_are_deterministic(tmp, fed, records):
    again = Engine(kg_cfg(tmp, "mmfede"), fed=fed).run()
    assert again["metrics"] == records["mmfede"][0]["metrics"]
    assert again["curves"]["val/mrr"] == records["mmfede"][0]["curves"]["val/mrr"]


def test_kg_config_errors(tmp):
    with pytest.raises(ConfigError, match="task.loss"):
        kg_cfg(tmp, loss="hinge")
    cfg = build_run_config({"dataset": {"name": "synthetic", "num_nodes": 100}, "partition": {"num_clients": 2},
                            "missing": {"name": "kg_items"}, "output": {"cache_dir": str(tmp / "c2")}})
    with pytest.raises(ConfigError, match="knowledge-graph"):
        build_federation(cfg)


def test_missing_availability_effective_is_its_own_artifact_and_raises_the_measured_share(tmp_path):
    nominal = build_federation(kg_cfg(tmp_path))
    cfg = kg_cfg(tmp_path)
    cfg.missing.params["availability"] = "effective"
    effective = build_federation(cfg)
    assert effective.artifact_hash != nominal.artifact_hash
    assert effective.stats["artifact_recipe"] != nominal.stats["artifact_recipe"]
    explicit = kg_cfg(tmp_path)
    explicit.missing.params["availability"] = "nominal"  # the default adds nothing to the hash
    assert build_federation(explicit).artifact_hash == nominal.artifact_hash
    for m, share in effective.availability().items():
        assert share > nominal.availability()[m]
    bad = kg_cfg(tmp_path)
    bad.missing.params["availability"] = "sometimes"
    with pytest.raises(ConfigError, match="missing.availability"):
        build_federation(bad)


@pytest.mark.parametrize("alg", ["fede", "mmfede", "mmfed3"])
def test_every_fl_record_reports_the_client_view_and_carries_the_server_view(tmp_path, alg):
    rec = Engine(kg_cfg(tmp_path, alg, rounds=3)).run()
    assert rec["status"] == "ok", rec["error"]
    m = rec["metrics"]
    for view in ("server", "client"):
        for split in ("val", "test"):
            assert 0.0 < m[f"{split}_{view}/mrr"] <= 1.0
    # every federated KG method reports (and selects its best round on) the client view
    assert m["test/mrr"] == m["test_client/mrr"] and m["val/mrr"] == m["val_client/mrr"]
    assert m["test_server/mrr"] != m["test_client/mrr"]  # two different models were scored
    assert len(rec["curves"]["val_client/mrr"]) == len(rec["curves"]["round"])


def test_kg_records_of_the_server_view_protocol_carry_another_hash():
    """KG protocol version 1 scored some FL methods on the server view; a version-2 config
    hashes differently, so a table never averages the two."""
    import dataclasses

    from benchmark.config import build_run_config
    from benchmark.results import protocol_hash
    from benchmark.tasks.kg_completion import KGCompletion

    cfg = build_run_config({"task": {"name": "kg_completion"}, "dataset": {"name": "synthetic_kg"},
                            "partition": {"name": "relation_id"}, "missing": {"name": "kg_items"},
                            "algorithm": {"name": "mmfede"}})
    assert KGCompletion.protocol_version == 2
    now = protocol_hash(cfg)
    try:
        KGCompletion.protocol_version = 1
        assert protocol_hash(cfg) != now
    finally:
        KGCompletion.protocol_version = 2
    assert dataclasses.is_dataclass(cfg)


def test_a_client_with_an_empty_split_gets_an_empty_triple_table():
    """A relation-id client can hold no validation or test triple; its split is a [0, 3] table."""
    import torch

    from data_prep.kg.federation import make_kg_client

    none = torch.empty(0, 3, dtype=torch.long)
    c = make_kg_client(0, torch.tensor([1, 2, 3]), torch.tensor([0]), (torch.tensor([[1, 0, 2]]), none, none),
                       {"text": torch.zeros(3, 2)}, torch.ones(3, 1, dtype=torch.bool))
    assert isinstance(c, KGClientData) and c.num_train == 1
    assert c.valid_triples.shape == (0, 3) and c.test_triples.dtype == torch.long


def test_kg_records_carry_a_score_spread_the_guard_judges(records, fed):
    """Every KG record reports ``spread`` (each query's candidate scores, averaged), so the
    guard judges KG cells for collapse as it does graph cells: the trained runs are not
    collapsed, and a client model that scores every candidate alike (an all-zero entity
    table under TransE) has spread 0, which the guard flags."""
    from benchmark.guard import SPREAD_EPSILON, verdict
    from benchmark.record import Record

    for alg, (rec, _) in records.items():
        assert rec["metrics"]["test/spread"] > SPREAD_EPSILON, alg
        assert rec["guard"]["collapsed"] is False, alg
    _, eng = records["s_ind"]
    task = eng.task
    client = fed.clients[0]
    decoder = build_decoder("transe", client.num_relations, 16)
    flat = task.scores_from_entities(decoder, torch.zeros(client.num_entities, 16), client)
    assert flat["test"]["spread"] == 0.0
    rec = Record.from_dict({**records["s_ind"][0], "metrics": {"test/mrr": flat["test"]["mrr"],
                                                             "test/spread": flat["test"]["spread"]}})
    assert verdict(rec)["collapsed"] is True
