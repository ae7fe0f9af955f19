"""The committed small-scale KG results (issue 3's must-show) are complete, generated, and
show what the closing note says of them.

`results/mmfed3_table3|table6|fig8/small.jsonl` come from `sweep <suite> --scale small`
and are committed with their tables (fig8 re-run to convergence for issue 27; its Fed3
finding below reads those cells only, ``ONLY``). These
tests read them, so a re-run that changes a stated finding, a lost cell or a hand-edited
table fails here. The findings are the ones the paper makes, checked on our data, whichever
way they came out: MMFeD3-HidE beats MMFedE-HidE; HidE does NOT beat the AE imputer under
MMFeD3 at this scale; MMFeD3 beats S-Ind while MMFedE does not.
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


def test_mmfed3_hide_beats_mmfede_hide_at_every_client_count(table3):
    _, records, _ = table3
    mrr = _mrr(records, "algorithm.name", "algorithm.imputer", "partition.num_clients")
    for c in (3, 5, 10):
        assert mrr[("mmfed3", "hide", c)] > mrr[("mmfede", "hide", c)] + 0.03, c


def test_hide_does_not_beat_ae_under_mmfed3_at_small_scale(table3):
    _, records, _ = table3
    mrr = _mrr(records, "algorithm.name", "algorithm.imputer", "partition.num_clients")
    assert all(mrr[("mmfed3", "ae", c)] >= mrr[("mmfed3", "hide", c)] for c in (3, 5, 10))


def test_on_the_client_view_mmfed3_then_mmfede_beat_s_ind_with_ae(table3):
    """Scored on one view (each client's model, KG protocol 2), MMFeD3-AE > MMFedE-AE > S-Ind
    at every client count. Under version 1, where MMFedE was scored on the global model, MMFedE
    fell below S-Ind: that gap was the view, not the method."""
    _, records, _ = table3
    mrr = _mrr(records, "algorithm.name", "algorithm.imputer", "partition.num_clients")
    for c in (3, 5, 10):
        assert mrr[("mmfed3", "ae", c)] > mrr[("mmfede", "ae", c)] > mrr[("s_ind", None, c)], c


def test_hide_pretraining_does_not_help_the_averaging_methods(table3):
    """With HidE (and its FedE pre-training of S^c), MMFedE, MMFedEC and MMFedProx score below
    their AE rows at every client count; MMFeD3 keeps HidE within reach of its AE row at Fed3."""
    _, records, _ = table3
    mrr = _mrr(records, "algorithm.name", "algorithm.imputer", "partition.num_clients")
    for alg in ("mmfede", "mmfedec", "mmfedprox"):
        assert all(mrr[(alg, "hide", c)] < mrr[(alg, "ae", c)] - 0.04 for c in (3, 5, 10)), alg
    assert mrr[("mmfed3", "ae", 3)] - mrr[("mmfed3", "hide", 3)] < 0.02


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
    the global rows every round (``sync_client: true``, Alg. 2 line 5 read literally), its client
    view loses 0.08-0.17 MRR with AE and HidE at every client count, while its server view moves
    by less than 0.04 in every seed: the client-view margin comes from the persistence, not from the rows."""
    _, records, _ = table3
    keep = _mrr([r for r in records if r.params["algorithm.name"] == "mmfed3"],
                "algorithm.imputer", "partition.num_clients")
    sync = _mrr(sync_control, "algorithm.imputer", "partition.num_clients")
    assert len(sync) == 6
    for (imputer, clients), value in sync.items():
        assert keep[(imputer, clients)] > value + 0.05, (imputer, clients)
    for r in sync_control:
        twin = next(x for x in records if x.params["algorithm.name"] == "mmfed3" and x.seed == r.seed
                    and all(x.params.get(k) == v for k, v in r.params.items() if k != "algorithm.sync_client"))
        assert abs(r.metrics["test_server/mrr"] - twin.metrics["test_server/mrr"]) < 0.04


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
