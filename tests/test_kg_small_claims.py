"""The committed small-scale KG results (issue 3's must-show) are complete, generated, and
show what the closing note says of them.

`results/mmfed3_table3|table6|fig8/small.jsonl` come from `sweep <suite> --scale small`
and are committed with their tables, all three re-run to convergence for issue 27 (fig8's
Fed3 finding below reads those cells only, ``ONLY``). These tests read them, so a re-run that
changes a stated finding, a lost cell or a hand-edited table fails here. The findings are the
paper's, checked on our data, whichever way they came out: from the FedE start MMFeD3-HidE
beats MMFedE-HidE and MMFeD3 is the top federated row of every imputer; HidE does NOT beat
the AE imputer under MMFeD3 at this scale; every federated row beats S-Ind; and the FedE
start is not a gain for everyone (it costs the averaging methods on Fed10).
"""

from __future__ import annotations

import pytest
from small_results import assert_complete_and_tables_generated, load_small, mean_metric

ONLY = {"mmfed3_fig8": {"partition.num_clients": 3}}


def _load(name: str) -> tuple[object, list[dict], int]:
    return load_small(name, ONLY.get(name))


def _mrr(records: list[dict], *keys: str) -> dict[tuple, float]:
    return mean_metric(records, "mrr", *keys)


@pytest.fixture(scope="module")
def table3():
    """The table's own cells; MMFeD3's sync_client control runs are in ``sync_control``."""
    suite, records, n = _load("mmfed3_table3")
    return suite, [r for r in records if not r.params.get("algorithm.sync_client")], n


@pytest.fixture(scope="module")
def sync_control() -> list[dict]:
    _, records, _ = _load("mmfed3_table3")
    return [r for r in records if r.params.get("algorithm.sync_client")]


@pytest.mark.parametrize("name", ["mmfed3_table3", "mmfed3_table6", "mmfed3_fig8"])
def test_every_cell_recorded_ok_and_table_generated(name, tmp_path):
    assert_complete_and_tables_generated(name, tmp_path)


CLIENTS = (3, 5, 10)
IMPUTERS = ("ae", "cra", "mmin", "hide")
FEDERATED = ("mmfede", "mmfedec", "mmfedprox", "mmfedlu", "mmfed3")
AVERAGING = ("mmfede", "mmfedec", "mmfedprox")


def _rows(records: list[dict]) -> dict[tuple, float]:
    """Mean client-view test MRR per (imputer, start, FL method, clients)."""
    return _mrr(records, "algorithm.imputer", "algorithm.pretrained", "algorithm.name", "partition.num_clients")


def test_every_federated_row_beats_s_ind_whose_gap_grows_with_clients(table3):
    """Every imputer, start and FL method scores above S-Ind at every client count, and S-Ind
    falls as the relations are cut into more clients (each client's KG gets smaller)."""
    _, records, _ = table3
    mrr = _rows(records)
    s_ind = [mrr[(None, None, "s_ind", c)] for c in CLIENTS]
    assert s_ind[0] > s_ind[1] > s_ind[2], s_ind
    for c, floor in zip(CLIENTS, s_ind):
        federated = {k: v for k, v in mrr.items() if k[2] in FEDERATED and k[3] == c}
        assert len(federated) == 40 and min(federated.values()) > floor + 0.01, (c, min(federated.values()))


def test_the_best_federated_row_is_level_with_mmcen(table3):
    """The centralized MMCen is no ceiling at this scale: the best federated row is within
    0.01 MRR of it at every client count."""
    _, records, _ = table3
    mrr = _rows(records)
    for c in CLIENTS:
        best = max(v for k, v in mrr.items() if k[2] in FEDERATED and k[3] == c)
        assert abs(best - mrr[(None, None, "mmcen", c)]) < 0.01, c


def test_from_the_fede_start_mmfed3_is_the_top_row_of_every_imputer(table3):
    """For each imputer and client count, MMFeD3 from the FedE stage is above every other FL
    method from either start."""
    _, records, _ = table3
    mrr = _rows(records)
    for imputer in IMPUTERS:
        for c in CLIENTS:
            top = mrr[(imputer, "fede", "mmfed3", c)]
            others = [v for k, v in mrr.items() if k[0] == imputer and k[3] == c and k[1:3] != ("fede", "mmfed3")]
            assert len(others) == 9 and top > max(others), (imputer, c)


def test_the_fede_start_lifts_mmfed3_and_mmfedlu_and_costs_the_averaging_methods_on_fed10(table3):
    """The FedE stage is not a gain for everyone: it lifts MMFeD3 and MMFedLU (the methods with
    a persistent local model or unlearning) for every imputer at every client count, while
    MMFedE, MMFedEC and MMFedProx, which overwrite the client rows with the average every
    round, score lower from it on Fed10 for every imputer."""
    _, records, _ = table3
    mrr = _rows(records)
    for imputer in IMPUTERS:
        for c in CLIENTS:
            for alg in ("mmfed3", "mmfedlu"):
                assert mrr[(imputer, "fede", alg, c)] > mrr[(imputer, "none", alg, c)], (imputer, alg, c)
        for alg in AVERAGING:
            assert mrr[(imputer, "fede", alg, 10)] < mrr[(imputer, "none", alg, 10)], (imputer, alg)


def test_from_the_fede_start_mmfed3_hide_beats_mmfede_hide_at_every_client_count(table3):
    """The paper's HidE comparison (S^c initialized from FedE): MMFeD3-HidE above MMFedE-HidE
    by 0.01 MRR or more at every client count; from a cold start the gap shrinks to
    0.002-0.010, inside two seed deviations."""
    _, records, _ = table3
    mrr = _rows(records)
    for c in CLIENTS:
        assert mrr[("hide", "fede", "mmfed3", c)] > mrr[("hide", "fede", "mmfede", c)] + 0.009, c
        assert 0 < mrr[("hide", "none", "mmfed3", c)] - mrr[("hide", "none", "mmfede", c)] < 0.015, c


def test_hide_does_not_beat_ae_under_mmfed3_at_small_scale(table3):
    _, records, _ = table3
    mrr = _rows(records)
    for start in ("none", "fede"):
        assert all(mrr[("ae", start, "mmfed3", c)] >= mrr[("hide", start, "mmfed3", c)] for c in CLIENTS), start


def test_cold_mmfedlu_is_the_lowest_federated_row(table3):
    _, records, _ = table3
    mrr = _rows(records)
    for imputer in IMPUTERS:
        for c in CLIENTS:
            row = {k[1:3]: v for k, v in mrr.items() if k[0] == imputer and k[3] == c}
            assert min(row, key=row.get) == ("none", "mmfedlu"), (imputer, c)


def test_fig8_mmfed3_hide_above_mmfede_at_every_rate_on_fed3():
    """Fed3, client view, at convergence (issue 27's re-run: early stopping, FedE stage outside
    the rounds): MMFeD3-HidE is above MMFedE (no imputer) at every availability rate, as in the
    paper, by 0.005-0.017 MRR. Before the re-run (8 rounds) the two tied within 0.015 with
    neither above at every rate."""
    _, records, _ = _load("mmfed3_fig8")
    mrr = _mrr(records, "algorithm.name", "missing.rate")
    rates = sorted({r for _, r in mrr})
    assert len(rates) == 6
    gaps = [mrr[("mmfed3", r)] - mrr[("mmfede", r)] for r in rates]
    assert all(0.004 < g < 0.02 for g in gaps), gaps


def test_fig8_mmfed3_hide_stays_above_mmfede_with_more_clients():
    """Fed5 and Fed10: MMFeD3-HidE stays above MMFedE at every rate (Fed5 by 0.001-0.011 MRR,
    inside the seed spread of about 0.007 at most rates; Fed10 by 0.006-0.018). Before the
    re-run MMFedE was above at every rate there: that was HidE's pre-training eating its
    8-round budget, not the method."""
    _, records, _ = load_small("mmfed3_fig8")
    mrr = _mrr(records, "partition.num_clients", "algorithm.name", "missing.rate")
    for n, (low, high) in {5: (0.0, 0.012), 10: (0.005, 0.02)}.items():
        gaps = [mrr[(n, "mmfed3", r)] - mrr[(n, "mmfede", r)] for (c, a, r) in mrr if c == n and a == "mmfede"]
        assert len(gaps) == 6 and all(low < g < high for g in gaps), (n, gaps)


def test_mmfed3_client_view_is_its_persistent_local_model(table3, sync_control):
    """MMFeD3's client view is a persistent local model (``sync_client: false``). Restarted from
    the global rows every round (``sync_client: true``, Alg. 2 line 5 read literally; the
    control runs from the FedE start), its client view loses 0.01-0.05 MRR with AE and HidE at
    every client count, more with more clients (0.013-0.016 on Fed3, 0.041-0.044 on Fed10),
    while its server view moves by less than 0.015 in every seed: the client-view margin comes
    from the persistence, not from the rows. (Before issue 27's re-run, at 8 rounds, the loss
    was 0.08-0.17.)"""
    _, records, _ = table3
    keep = _mrr([r for r in records if r.params["algorithm.name"] == "mmfed3"
                 and r.params["algorithm.pretrained"] == "fede"], "algorithm.imputer", "partition.num_clients")
    sync = _mrr(sync_control, "algorithm.imputer", "partition.num_clients")
    assert len(sync) == 6
    for (imputer, clients), value in sync.items():
        assert 0.01 < keep[(imputer, clients)] - value < 0.05, (imputer, clients)
    for imputer in ("ae", "hide"):
        losses = [keep[(imputer, c)] - sync[(imputer, c)] for c in CLIENTS]
        assert losses[0] < losses[1] < losses[2], (imputer, losses)
    for r in sync_control:
        twin = next(x for x in records if x.params["algorithm.name"] == "mmfed3" and x.seed == r.seed
                    and all(x.params.get(k) == v for k, v in r.params.items() if k != "algorithm.sync_client"))
        assert abs(r.metrics["test_server/mrr"] - twin.metrics["test_server/mrr"]) < 0.015


# --------------------------------------------------------------------------- Table VI (issue 27)


@pytest.fixture(scope="module")
def table6():
    _, records, _ = _load("mmfed3_table6")
    return records, _mrr(records, "algorithm.name", "algorithm.fusion", "partition.num_clients")


def test_table6_fully_available_means_every_held_entity_has_its_modalities(table6):
    """r = 100% with every holder of an entity dealt one of its items (``missing.cover:
    every_holder``): in every run each modality reaches at least 0.95 of the entities the data
    gives it (1.0 measured; it was 0.32-0.48 before issue 27)."""
    records, _ = table6
    for r in records:
        assert r.coverage, (r.params, r.seed)
        for modality, covered in r.coverage.items():
            assert r.availability[modality] >= 0.95 * covered, (r.params, r.seed, modality)


def test_table6_mmcen_leads_and_split_fusion_trails(table6):
    """At convergence the first three rows at every client count are MMCen's; Split is the
    lowest fusion of MMInd, MMFedE and MMCen alike, and every other fusion is over 0.025 MRR
    above S-Ind (MMInd- and MMFedE-Split fall to S-Ind's level or below)."""
    _, mrr = table6
    fusions = ("average", "weighted", "concat", "split", "gated")
    for n in (3, 5, 10):
        rows = {k[:2]: v for k, v in mrr.items() if k[2] == n}
        top = sorted(rows, key=rows.get, reverse=True)[:3]
        assert all(alg == "mmcen" for alg, _ in top), (n, top)
        for alg in ("mmind", "mmfede", "mmcen"):
            own = {f: rows[(alg, f)] for f in fusions}
            assert min(own, key=own.get) == "split", (n, alg)
            assert all(own[f] > rows[("s_ind", None)] + 0.025 for f in fusions if f != "split"), (n, alg)
