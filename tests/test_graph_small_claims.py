"""The committed small-scale graph results (issue 4's must-show) are complete, generated, and
show what the closing note says of them.

`results/<suite>/small.jsonl` for fedmpo_table1, fedmpo_table2, fedmgs_table2, fedmgs_table3,
fedmgs_table6, efficiency and partition_effect come from `sweep <suite> --scale small` and
are committed with their tables. The findings are the papers' claims checked on our
offline stand-ins, whichever way they came out; a re-run that changes one fails here.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from small_results import assert_complete_and_tables_generated, load_small, mean_metric

SUITES = ["fedmpo_table1", "fedmpo_table2", "fedmgs_table2", "fedmgs_table3", "fedmgs_table6", "efficiency",
          "partition_effect", "structure_control", "structure_control_content"]


@pytest.mark.parametrize("name", SUITES)
def test_every_cell_recorded_ok_and_table_generated(name, tmp_path):
    assert_complete_and_tables_generated(name, tmp_path)


@pytest.fixture(scope="module")
def table1() -> dict[tuple, float]:
    """(metric, setting, missing.content, method) -> mean over seeds; 'keep' for the table's own
    cells, 'shuffle' for the shuffled-content control of the retrieval columns."""
    _, records, _ = load_small("fedmpo_table1")
    for r in records:
        r.params.setdefault("missing.content", "keep")
    out = {}
    for metric in ("accuracy", "auc", "recall@5"):
        rows = [r for r in records if f"test/{metric}" in r.metrics]
        out.update({(metric, *k): v for k, v in
                    mean_metric(rows, metric, "setting", "missing.content", "algorithm.name").items()})
    return out


def test_table1_fedmpo_is_not_best_on_fb15k_typing(table1):
    """Personalized prototype/mixing methods lead node classification on the label-skewed
    clients (FedPub 55.7, FedProto 55.1, FedIIH 52.9), over 5 points above FedMPO (43.5) and
    above the centralized GNN (44.9)."""
    fedmpo = table1[("accuracy", "ele_fashion", "keep", "fedmpo")]
    central = table1[("accuracy", "ele_fashion", "keep", "centralized")]
    for leader in ("fedproto", "fedpub", "fediih"):
        assert table1[("accuracy", "ele_fashion", "keep", leader)] > fedmpo + 0.05, leader
        assert table1[("accuracy", "ele_fashion", "keep", leader)] > central, leader


def test_table1_fedmpo_below_fedavg_on_tiktok_link_prediction(table1):
    """FedMPO is 11 points below FedAvg-Zero on TikTok link prediction (54.5 against 65.8)."""
    assert table1[("auc", "dy", "keep", "fedmpo")] < table1[("auc", "dy", "keep", "fedavg")] - 0.10


LP_METHODS1 = ("fedavg", "fedgcn", "fedgraphsage", "fedpub", "fedmvp", "fedmac", "fedlap", "s2fgl", "fedspa", "fedmpo")


def test_table1_link_prediction_learned_fedgcn_first(table1):
    """With hard negatives drawn per positive and never a known training edge (issue 26; the
    shared 256-node pool had FedSPA below chance in every seed and 4 cells collapsed), every
    method is above chance on both graphs, FedGCN first among the methods on both (74.1 TikTok,
    73.3 synthetic). The features alone (the linear reference) are near chance on TikTok (51.6)
    but not on the synthetic graph (63.0), where FedMPO and FedSPA are below them (58.3, 58.5)."""
    for setting in ("dy", "bili_dance"):
        col = {a: table1[("auc", setting, "keep", a)] for a in LP_METHODS1}
        assert min(col.values()) > 0.515 and max(col, key=col.get) == "fedgcn", setting
    assert table1[("auc", "dy", "keep", "linear")] < 0.53
    lin = table1[("auc", "bili_dance", "keep", "linear")]
    assert lin > 0.6 and all(table1[("auc", "bili_dance", "keep", a)] < lin for a in ("fedmpo", "fedspa"))


def _retrieval(table1: dict[tuple, float], setting: str, content: str) -> dict[str, float]:
    return {a: v for (m, s, c, a), v in table1.items() if m == "recall@5" and s == setting and c == content}


def test_table1_synthetic_retrieval_is_content_fedmpo_first(table1):
    """On the synthetic Flickr30k stand-in every method retrieves at least 0.25 above its
    shuffled control, and every shuffled score is within 0.03 of chance (content, not graph
    position, under the content protocol); FedMPO leads (84.9 R@5) by over 10 points (S2FGL
    73.2); the linear reference is at chance (19.1 against 17.8): these pairs need the graph."""
    real, shuffled = _retrieval(table1, "flickr30k", "keep"), _retrieval(table1, "flickr30k", "shuffle")
    chance, linear = real["chance"], real["linear"]
    methods = {a: v for a, v in real.items() if a not in REFERENCE_ROWS}
    assert all(methods[a] > shuffled[a] + 0.25 for a in methods), (methods, shuffled)
    assert all(abs(v - chance) < 0.03 for v in shuffled.values()), shuffled
    ranked = sorted(methods, key=methods.get, reverse=True)
    assert ranked[0] == "fedmpo" and methods["fedmpo"] > methods[ranked[1]] + 0.10
    assert abs(linear - chance) < 0.03


@pytest.fixture(scope="module")
def table2() -> dict[tuple, float]:
    _, records, _ = load_small("fedmpo_table2")
    return mean_metric(records, "accuracy", "algorithm.name", "missing.rate", "partition.alpha")


RATES = (0.3, 0.4, 0.5, 0.6, 0.7)


SHARED2 = ("fedavg", "fedgcn", "fedgraphsage", "fedmvp", "fedmac", "fedlap", "s2fgl", "fedspa", "fedmpo")


def test_table2_personalized_prototype_methods_lead_fedmpo_at_every_rate(table2):
    """FedProto and FedPub lead FedMPO by over 10 points at every missing rate (FedProto 55.1 ->
    49.8 against FedMPO 43.5 -> 33.4) and stay above the centralized GNN (44.9 -> 41.9)."""
    for r in RATES:
        for leader in ("fedproto", "fedpub"):
            assert table2[(leader, r, 0.5)] > table2[("fedmpo", r, 0.5)] + 0.10, (leader, r)
            assert table2[(leader, r, 0.5)] > table2[("centralized", r, 0.5)], (leader, r)


def test_table2_fedmpo_is_never_the_first_shared_model_method(table2):
    """Among the shared-model methods FedMVP is first at 30-50% missing (46.7, 45.0, 42.0) and
    FedGCN at 60-70% (39.4, 39.0); FedMPO (43.5 -> 33.4) is first in no column, where the paper
    has it first in every one. FedMVP is above the centralized GNN at 30% (46.7 against 44.9)."""
    first = [max(SHARED2, key=lambda a: table2[(a, r, 0.5)]) for r in RATES]
    assert first == ["fedmvp", "fedmvp", "fedmvp", "fedgcn", "fedgcn"], first
    assert table2[("fedmvp", 0.3, 0.5)] > table2[("centralized", 0.3, 0.5)]


def test_table2_fedgcn_is_flat_over_the_missing_rate_the_others_fall(table2):
    """From 30% to 70% missing FedGCN, which fills a missing modality from its neighbours' mean,
    loses 2.4 points (41.4 -> 39.0) and ends within 3 points of the centralized GNN (41.9); every
    other shared-model method loses at least 9.9 (FedMAC 9.9, FedMPO 10.1, FedAvg-Zero 16.5,
    FedLAP 17.3). FedMPO's lead over FedAvg-Zero grows with the rate (1.7 -> 8.1 points)."""
    drop = {a: table2[(a, 0.3, 0.5)] - table2[(a, 0.7, 0.5)] for a in SHARED2}
    assert drop["fedgcn"] < 0.03, drop
    assert all(drop[a] > 0.09 for a in SHARED2 if a != "fedgcn"), drop
    assert table2[("centralized", 0.7, 0.5)] - table2[("fedgcn", 0.7, 0.5)] < 0.03
    over_avg = [table2[("fedmpo", r, 0.5)] - table2[("fedavg", r, 0.5)] for r in RATES]
    assert over_avg[-1] > over_avg[0] + 0.05, over_avg


def test_table2_label_skew_helps_personalized_methods_only(table2):
    """At alpha 0.1 each client sees few classes: the personalized models gain about 29 points
    over alpha 1.0 (FedProto 49.7 -> 79.9); FedAvg-Zero and FedGCN lose about 10 (42.1 -> 32.0,
    43.6 -> 33.7). The other shared models spread over seeds at alpha 0.1 (std 6-12 points)."""
    for a in ("fedproto", "fedpub", "fediih"):
        assert table2[(a, 0.3, 0.1)] > table2[(a, 0.3, 1.0)] + 0.2, a
    for a in ("fedavg", "fedgcn"):
        assert table2[(a, 0.3, 0.1)] < table2[(a, 0.3, 1.0)] - 0.05, a


def _with_content(records: list[dict]) -> list[dict]:
    """Records with ``missing.content`` in their params ('keep' unless the cell is a control)."""
    for r in records:
        r.params.setdefault("missing.content", "keep")
    return records


@pytest.fixture(scope="module")
def table3() -> dict[tuple, float]:
    """(setting, clients, missing.content, method) -> mean AUC over seeds."""
    _, records, _ = load_small("fedmgs_table3")
    return mean_metric(_with_content(records), "auc", "setting", "partition.num_clients", "missing.content",
                       "algorithm.name")


METHODS3 = ("fedavg", "fedmac", "fedmvp", "fedlap", "fedgta", "mh_pflid", "pepsy", "fedmgs")


def test_table3_fedmgs_never_leads_link_prediction(table3):
    """Re-run under conditioned features and budgets to convergence: on link prediction FedMGS
    is first in no column. MH-pFLID leads TikTok (DY) at both client counts (AUC 72.8 and
    72.6), FedMVP the synthetic Bili Dance (71.8 and 67.4), where FedMGS is also below FedAvg.
    (Before: FedLAP led DY by over 3 points; its lead is gone, 70.4 at both counts.)"""
    for setting, leader in (("dy", "mh_pflid"), ("bili_dance", "fedmvp")):
        for k in (5, 10):
            col = {a: table3[(setting, k, "keep", a)] for a in METHODS3}
            assert max(col, key=col.get) == leader, (setting, k)
    for k in (5, 10):
        assert table3[("bili_dance", k, "keep", "fedmgs")] < table3[("bili_dance", k, "keep", "fedavg")], k


def test_table3_centralized_gnn_trails_the_federated_methods_on_tiktok_link_prediction(table3):
    """The centralized reference, trained on the pooled graph's union split (every client's
    training edges and the edges between clients) and scored on each client's graph, is below
    every federated method on TikTok link prediction (AUC 65.4 and 64.3 against 68.1-72.8), but
    level with the best on the synthetic Bili Dance (72.2 and 67.3)."""
    for k in (5, 10):
        cen = table3[("dy", k, "keep", "centralized")]
        assert all(cen < table3[("dy", k, "keep", a)] - 0.02 for a in METHODS3), k
        best = max(table3[("bili_dance", k, "keep", a)] for a in METHODS3)
        assert abs(table3[("bili_dance", k, "keep", "centralized")] - best) < 0.005, k


def test_table3_the_features_alone_barely_predict_links(table3):
    """The linear reference for link prediction (a bilinear score of the two nodes' features,
    fitted on the pooled training edges) is within 4 points of chance in every column (50.9-53.9
    AUC) and over 10 points below every federated method: on both graphs the links are
    structural, and the GNNs' scores come from message passing."""
    for setting in ("dy", "bili_dance"):
        for k in (5, 10):
            lin = table3[(setting, k, "keep", "linear")]
            assert 0.5 <= lin < 0.54, (setting, k)
            assert all(table3[(setting, k, "keep", a)] > lin + 0.08 for a in METHODS3), (setting, k)


def test_table3_fedmgs_far_ahead_on_synthetic_matching(table3):
    """On the synthetic Bili_Food stand-in, whose modalities share a latent, FedMGS's graph-free
    paired readout leads every rival by more than 0.13 AUC (94.7 and 95.2 against at most 81.3),
    the centralized GNN (78.2, 80.1) and the linear model (65.5, 63.4) too, and its own
    shuffled-content control by more than 0.35."""
    for k in (5, 10):
        fedmgs = table3[("bili_food", k, "keep", "fedmgs")]
        rivals = [a for a in METHODS3 if a not in ("fedmgs", "fedlap")] + ["linear", "centralized"]
        assert all(fedmgs > table3[("bili_food", k, "keep", a)] + 0.13 for a in rivals), k
        assert fedmgs > table3[("bili_food", k, "shuffle", "fedmgs")] + 0.35, k


def test_table3_tiktok_matching_measures_content_at_the_linear_level(table3):
    """KU (TikTok visual-acoustic matching) now measures content: every method is at least 3.5
    points above its shuffled control (55.6-60.1 against 47.8-52.4), and none beats the linear
    reference by more than a point (59.4 at 5 clients, 62.0 at 10, where every method trails
    it). Before the re-run this column was at chance (the shared model collapsed on raw rows)."""
    methods = [a for a in METHODS3 if a != "fedlap"]
    for k in (5, 10):
        for a in methods:
            assert table3[("ku", k, "keep", a)] > table3[("ku", k, "shuffle", a)] + 0.035, (k, a)
        lin = table3[("ku", k, "keep", "linear")]
        assert all(table3[("ku", k, "keep", a)] < lin + 0.01 for a in methods), k
    assert all(table3[("ku", 10, "keep", a)] < table3[("ku", 10, "keep", "linear")] for a in methods)


@pytest.fixture(scope="module")
def table6() -> dict[tuple, float]:
    """(setting, rho, missing.content, method) -> mean over seeds of the column's metric."""
    _, records, _ = load_small("fedmgs_table6")
    out = {}
    for setting, metric in (("movies", "accuracy"), ("dy", "auc"), ("ku", "auc"), ("toys", "recall@5")):
        rows = [r for r in _with_content(records) if r.params["setting"] == setting]
        out.update({(setting, *k): v for k, v in
                    mean_metric(rows, metric, "missing.rate", "missing.content", "algorithm.name").items()})
    return out


RHOS = (0.3, 0.5, 0.7)


METHODS6 = ("fedavg", "fedproto", "fedmvp", "fedmac", "fedlap", "fedgta", "mh_pflid", "pepsy", "fedmgs")


def test_table6_fedmgs_flat_over_rho_and_its_margin_over_fedavg_grows(table6):
    """Re-run under issue 26's conditioning and budgets. Movies stand-in (FB15K-237 typing,
    client-level missing, 5 Louvain clients): FedMGS is flat over rho (42.4, 42.7, 42.1) while
    FedAvg-Zero falls from 45.4 to 38.2, so FedMGS's margin over it goes from -3.0 to +3.9."""
    fedmgs = [table6[("movies", r, "keep", "fedmgs")] for r in RHOS]
    assert max(fedmgs) - min(fedmgs) < 0.02, fedmgs
    assert table6[("movies", 0.3, "keep", "fedavg")] - table6[("movies", 0.7, "keep", "fedavg")] > 0.05
    margin = [table6[("movies", r, "keep", "fedmgs")] - table6[("movies", r, "keep", "fedavg")] for r in RHOS]
    assert margin[0] < 0 < margin[-1] and margin[-1] > margin[0] + 0.05, margin


def test_table6_node_classification_below_the_centralized_gnn_and_no_personalized_lead(table6):
    """On Louvain clients (no label skew) every method is below the centralized GNN at every
    rho (47.4, 46.2, 46.3), and at rho = 0.3 all nine lie within 3.5 points (42.2-45.4): the
    personalized methods' lead of the older records (FedProto, MH-pFLID over 4 points above
    FedMGS) is gone (44.6 and 44.6 against 42.4)."""
    for r in RHOS:
        scores = [table6[("movies", r, "keep", a)] for a in METHODS6]
        assert max(scores) < table6[("movies", r, "keep", "centralized")], r
    at3 = [table6[("movies", 0.3, "keep", a)] for a in METHODS6]
    assert max(at3) - min(at3) < 0.035, at3
    for leader in ("fedproto", "mh_pflid"):
        assert table6[("movies", 0.3, "keep", leader)] < table6[("movies", 0.3, "keep", "fedmgs")] + 0.04, leader


#: the methods of Table 6 that define the paired tasks (FedProto's prototypes need labels;
#: FedLAP's spectral features would enter both views of a pair)
PAIRED6 = tuple(a for a in METHODS6 if a not in ("fedproto", "fedlap"))


def test_table6_matching_reads_content_and_fedmgs_leads_at_the_lowest_rate(table6):
    """KU stand-in (TikTok visual-acoustic matching, node-level missing): every method's AUC is
    above its shuffled-content control at every rho, every control within 4 points of 50
    (chance), and FedMGS is first at rho = 0.3 (64.3, the next 59.8), level with the linear
    reference (CCA, 64.3)."""
    for r in RHOS:
        for a in PAIRED6:
            keep, shuffled = table6[("ku", r, "keep", a)], table6[("ku", r, "shuffle", a)]
            assert keep > shuffled and abs(shuffled - 0.5) < 0.04, (a, r, keep, shuffled)
    at3 = {a: table6[("ku", 0.3, "keep", a)] for a in PAIRED6}
    assert max(at3, key=at3.get) == "fedmgs" and at3["fedmgs"] > sorted(at3.values())[-2] + 0.03
    assert abs(at3["fedmgs"] - table6[("ku", 0.3, "keep", "linear")]) < 0.01


def test_table6_fedmgs_first_on_retrieval_at_every_rate(table6):
    """Toys stand-in (TikTok visual-to-acoustic retrieval, client-level missing): FedMGS is
    first at every rho (R@5 7.5, 6.3, 4.9), at least a point ahead of the next method (at most
    3.6) and over 3 points above its shuffled-content control (1.5-1.8), but within a point of
    the linear reference (CCA: 7.5, 6.8, 4.4)."""
    for r in RHOS:
        scores = {a: table6[("toys", r, "keep", a)] for a in PAIRED6}
        assert max(scores, key=scores.get) == "fedmgs", r
        assert scores["fedmgs"] > sorted(scores.values())[-2] + 0.01, r
        assert scores["fedmgs"] > table6[("toys", r, "shuffle", "fedmgs")] + 0.03, r
        assert abs(scores["fedmgs"] - table6[("toys", r, "keep", "linear")]) < 0.01, r


@pytest.fixture(scope="module")
def fedmgs_table2() -> dict[tuple, float]:
    """(setting, clients, missing.content, method) -> mean over seeds of the column's metric."""
    _, records, _ = load_small("fedmgs_table2")
    out = {}
    for setting, metric in (("movies", "accuracy"), ("grocery", "accuracy"), ("toys", "recall@5"),
                            ("flickr30k", "recall@5")):
        rows = [r for r in _with_content(records) if r.params["setting"] == setting]
        out.update({(setting, *k): v for k, v in
                    mean_metric(rows, metric, "partition.num_clients", "missing.content", "algorithm.name").items()})
    return out


METHODS2 = ("fedavg", "fedproto", "fedmac", "fedmvp", "fedlap", "fedgta", "mh_pflid", "pepsy", "fedmgs")
#: the methods that define retrieval (FedProto's prototypes need labels; FedLAP's spectral
#: features would enter both views of a pair)
RETRIEVERS2 = tuple(a for a in METHODS2 if a not in ("fedproto", "fedlap"))


def test_fedmgs_table2_retrieval_first_on_synthetic(fedmgs_table2):
    """FedMGS retrieves by content on the synthetic Flickr30k stand-in (R@5 87.9 and 94.4),
    at least 0.25 above every rival and the centralized GNN (31.6 and 48.7), and more than
    0.5 above its shuffled-content control. The linear reference (CCA on each node's own rows)
    is at its shuffled level there: this graph's pairs need the graph."""
    t = fedmgs_table2
    for k in (5, 10):
        fedmgs = t[("flickr30k", k, "keep", "fedmgs")]
        rivals = [a for a in RETRIEVERS2 if a != "fedmgs"] + ["centralized", "linear"]
        assert all(fedmgs > t[("flickr30k", k, "keep", a)] + 0.25 for a in rivals), k
        assert fedmgs > t[("flickr30k", k, "shuffle", "fedmgs")] + 0.5, k
        assert abs(t[("flickr30k", k, "keep", "linear")] - t[("flickr30k", k, "shuffle", "linear")]) < 0.01, k


def test_fedmgs_table2_tiktok_retrieval_fedmgs_first_at_the_linear_level(fedmgs_table2):
    """Toys -> TikTok visual-to-acoustic retrieval, re-run under conditioned features and budgets
    to convergence: FedMGS is first among the methods at both client counts (R@5 6.3 and 11.8,
    at least 2.5 points ahead) and at least 3 points above its shuffled control, but not above
    the linear reference (6.8 and 12.4). FedAvg, FedMVP and PEPSY stay within 1.7 points of
    chance at 5 clients (1.9) and 3.3 at 10 (3.7), and the centralized GNN within 1.2 (3.0 and 4.5)."""
    t = fedmgs_table2
    for k in (5, 10):
        fedmgs = t[("toys", k, "keep", "fedmgs")]
        assert all(fedmgs > t[("toys", k, "keep", a)] + 0.025 for a in RETRIEVERS2 if a != "fedmgs"), k
        assert fedmgs > t[("toys", k, "shuffle", "fedmgs")] + 0.03, k
        assert fedmgs < t[("toys", k, "keep", "linear")], k
        chance = t[("toys", k, "keep", "chance")]
        near = 0.017 if k == 5 else 0.033
        assert all(t[("toys", k, "keep", a)] < chance + near for a in ("fedavg", "fedmvp", "pepsy")), k
        assert t[("toys", k, "keep", "centralized")] < chance + 0.012, k


def test_fedmgs_table2_node_classification(fedmgs_table2):
    """On FB15K-237 typing (Movies) FedMAC and FedMVP are the first two at both client counts
    (45.1/45.0 and 44.0/43.7), FedMGS below both and every method below the centralized GNN
    (46.2, 46.9). On the synthetic Grocery stand-in every method is at least 19 points above the
    linear reference (56.3, 57.6) and below the centralized GNN (89.9, 90.6), and FedMGS is
    below FedAvg (83.5 against 85.7; 77.5 against 81.1). (Before the re-run FedMGS beat FedAvg
    on both columns by over 2 points.)"""
    t = fedmgs_table2
    for k in (5, 10):
        movies = {a: t[("movies", k, "keep", a)] for a in METHODS2}
        assert set(sorted(movies, key=movies.get)[-2:]) == {"fedmac", "fedmvp"}, k
        assert max(movies.values()) < t[("movies", k, "keep", "centralized")], k
        grocery = {a: t[("grocery", k, "keep", a)] for a in METHODS2}
        assert min(grocery.values()) > t[("grocery", k, "keep", "linear")] + 0.19, k
        assert max(grocery.values()) < t[("grocery", k, "keep", "centralized")] - 0.03, k
        assert grocery["fedmgs"] < grocery["fedavg"] - 0.02, k


def test_efficiency_isolated_cells_and_cost_order():
    """One fresh process per cell; FedMVP and FedMPO are the two slowest per round (1.74 and
    1.63 s, one thread, --jobs 1 on an otherwise idle 2-core machine; FedGCN third at 1.35),
    FedMPO the most and FedProto the least to communicate."""
    _, records, _ = load_small("efficiency")
    assert len({r.worker_pid for r in records}) == len(records)
    secs = mean_metric([replace(r, metrics={"test/s": r.seconds_per_round}) for r in records
                        if r.algorithm["name"] not in REFERENCE_ROWS], "s", "algorithm.name")
    assert set(sorted(secs, key=secs.get)[-2:]) == {("fedmvp",), ("fedmpo",)}
    kib = {r.algorithm["name"]: r.bytes_per_round for r in records if r.algorithm["name"] not in REFERENCE_ROWS}
    assert min(kib, key=kib.get) == "fedproto" and kib["fedmpo"] == max(kib.values())


@pytest.fixture(scope="module")
def partition() -> dict[str, dict[str, float]]:
    """setting -> algorithm -> mean test score (accuracy for nc_*, AUC for lp_*)."""
    _, records, _ = load_small("partition_effect")
    out: dict[str, dict[str, float]] = {}
    for setting in ("nc_dirichlet", "nc_louvain", "lp_dirichlet", "lp_louvain"):
        rows = [r for r in records if r.params["setting"] == setting]
        metric = "accuracy" if setting.startswith("nc") else "auc"
        out[setting] = {k[0]: v for k, v in mean_metric(rows, metric, "algorithm.name").items()}
    return out


def _rank(scores: dict[str, float], name: str) -> int:
    return sorted(scores, key=scores.get, reverse=True).index(name) + 1


PARTITION_METHODS = ("fedavg", "fedgcn", "fedproto", "fedpub", "fedgta", "fedmvp", "fedmac", "mh_pflid", "fedmpo",
                     "fedmgs")
PERSONALIZED = ("fedpub", "fedgta", "fedproto", "mh_pflid")


def test_partition_louvain_erases_the_personalized_lead_on_node_classification(partition):
    """Re-run under conditioned features and budgets to convergence. On the label-skewed
    Dirichlet split the four personalized methods are the first four (54.4-56.4), each over 10
    points above FedAvg-Zero (44.2) and 9 above the centralized GNN (44.6); on Louvain (no label
    skew by construction) each is within 2 points of FedAvg-Zero (42.6) and below the
    centralized GNN (45.7). FedMGS is last on both splits (38.3, 35.6), below the linear
    reference (41.0, 37.9)."""
    dirichlet, louvain = partition["nc_dirichlet"], partition["nc_louvain"]
    d = {a: dirichlet[a] for a in PARTITION_METHODS}
    lv = {a: louvain[a] for a in PARTITION_METHODS}
    assert set(sorted(d, key=d.get)[-4:]) == set(PERSONALIZED)
    for a in PERSONALIZED:
        assert d[a] > d["fedavg"] + 0.10 and d[a] > dirichlet["centralized"] + 0.09, a
        assert abs(lv[a] - lv["fedavg"]) < 0.02 and lv[a] < louvain["centralized"], a
    for scores, whole in ((d, dirichlet), (lv, louvain)):
        assert min(scores, key=scores.get) == "fedmgs" and scores["fedmgs"] < whole["linear"]


def test_partition_link_prediction_fedgcn_first_all_higher_on_louvain(partition):
    """FedGCN is first on both link-prediction splits (AUC 72.0 and 76.5). Louvain clients keep
    their communities' edges, and every method's AUC, and the centralized GNN's, is higher
    there. FedMPO is last on the Dirichlet split (55.6) but mid-table on Louvain (71.1). The
    centralized GNN, trained on the pooled union split, trails FedAvg-Zero on both (60.6
    against 64.7, 67.2 against 71.9)."""
    dirichlet, louvain = partition["lp_dirichlet"], partition["lp_louvain"]
    methods = [a for a in PARTITION_METHODS if a != "fedproto"]  # no link prediction: N/A
    assert all(a in dirichlet and a in louvain for a in methods) and "fedproto" not in dirichlet
    for scores in (dirichlet, louvain):
        assert max(methods, key=scores.get) == "fedgcn"
        assert scores["centralized"] < scores["fedavg"] - 0.04
    assert all(louvain[a] > dirichlet[a] for a in methods + ["centralized"])
    # the features alone (the bilinear linear reference) are within 2.5 points of chance on both
    assert all(0.5 <= scores["linear"] < 0.525 for scores in (dirichlet, louvain))
    assert min(methods, key=dirichlet.get) == "fedmpo"
    assert sorted(methods, key=louvain.get).index("fedmpo") >= 3


@pytest.fixture(scope="module")
def structure() -> dict[tuple, float]:
    """(setting, algorithm, content) -> mean test R@5 (retrieval) or AUC (matching)."""
    _, records, _ = load_small("structure_control")
    out = {}
    for setting, metric in (("toys", "recall@5"), ("ku", "auc"), ("flickr30k", "recall@5")):
        rows = [r for r in records if r.params["setting"] == setting]
        out.update({(setting, *k): v for k, v in
                    mean_metric(rows, metric, "algorithm.name", "missing.content").items()})
    return out


def test_structure_control_tiktok_paired_scores_are_mostly_graph_position(structure):
    """Both views over the graph (the graph-view protocol; re-run under issue 26's conditioning
    and budgets): on TikTok every method but FedMGS keeps at least 70% of its R@5 and of its
    matching AUC's gain over chance once the content of every pair is shuffled, FedSPA and
    FedMPO all but 1.5 points (60.5 -> 60.2 and 59.8 -> 59.4 R@5): graph position. FedMGS,
    content only, falls to chance (19.4 -> 7.5 R@5 against 7.6; 64.6 -> 50.5 AUC), as the
    linear reference does (18.4 -> 7.4; 63.0 -> 49.4)."""
    chance = {"toys": structure[("toys", "chance", "keep")], "ku": 0.5}
    for setting in ("toys", "ku"):
        algos = {a for (s, a, _) in structure if s == setting} - REFERENCE_ROWS
        assert len(algos) >= 7
        for a in algos - {"fedmgs"}:
            keep, shuf = structure[(setting, a, "keep")], structure[(setting, a, "shuffle")]
            assert shuf - chance[setting] >= 0.7 * (keep - chance[setting]), (setting, a, keep, shuf)
        for a in ("fedmgs", "linear"):
            assert structure[(setting, a, "shuffle")] < chance[setting] + 0.01, (setting, a)
            assert structure[(setting, a, "keep")] > chance[setting] + 0.1, (setting, a)
    for a in ("fedspa", "fedmpo"):
        assert structure[("toys", a, "keep")] - structure[("toys", a, "shuffle")] < 0.015, a
    assert structure[("ku", "fedspa", "keep")] - structure[("ku", "fedspa", "shuffle")] < 0.015


def test_structure_control_synthetic_retrieval_content_vs_position(structure):
    """On the synthetic graph FedMGS's lead is all content (95.3 -> 16.7 R@5, chance 16.7);
    FedGCN keeps 86% of its score and FedSPA 76% (graph position); FedAvg, FedMPO, FedMVP,
    PEPSY and S2FGL lose 37-41 points yet stay 20 or more above chance (part content, part
    position). The linear reference (20.0) is near chance: these pairs need the graph."""
    keep, shuf = (lambda a: structure[("flickr30k", a, "keep")]), (lambda a: structure[("flickr30k", a, "shuffle")])
    chance = keep("chance")
    assert keep("fedmgs") > 0.9 and shuf("fedmgs") < chance + 0.01
    assert shuf("fedgcn") > 0.8 * keep("fedgcn") and shuf("fedspa") > 0.7 * keep("fedspa")
    for a in ("fedavg", "fedmpo", "fedmvp", "pepsy", "s2fgl"):
        assert keep(a) - shuf(a) > 0.3 and shuf(a) > chance + 0.2, a
    assert keep("linear") < chance + 0.05


# --------------------------------------------------------------------------- the content protocol

REFERENCE_ROWS = {"chance", "linear", "centralized"}


@pytest.fixture(scope="module")
def content_runs() -> dict[tuple, list[tuple[float, float]]]:
    """(setting, algorithm, content) -> per seed (score, chance): R@5 with its chance level
    sum(min(5, G)) / sum(G) over the clients' test galleries G (retrieval), or AUC with 0.5.
    The store's reference rows (chance, linear, centralized GNN) are keyed like the methods."""
    _, records, _ = load_small("structure_control_content")
    out: dict[tuple, list[tuple[float, float]]] = {}
    for r in records:
        p, g = r.params, r.client_sizes
        if p["setting"] == "ku":
            value, chance = r.metrics["test/auc"], 0.5
        else:
            value, chance = r.metrics["test/recall@5"], sum(min(5, x) for x in g) / sum(g)
        out.setdefault((p["setting"], p["algorithm.name"], p["missing.content"]), []).append((value, chance))
    return out


def _content_score(content_runs: dict, setting: str, algo: str, content: str) -> float:
    from statistics import mean

    return mean(v for v, _ in content_runs[(setting, algo, content)])


def test_content_protocol_puts_every_shuffled_score_at_chance(content_runs):
    """With the gallery encoded from each node's own row (task.gallery_view content) and the
    content shuffled, no method retrieves or matches much above chance: TikTok R@5 within 2
    seed-std of the galleries' chance level (and at most 0.10), matching AUC under 0.52; on the
    synthetic stand-in within 0.02 of chance (FedMVP 18.1 against 16.7 is 2.8 seed-std above:
    its seed spread there is 0.5 points)."""
    from statistics import mean, stdev

    methods = {a for (_, a, _) in content_runs} - REFERENCE_ROWS
    assert len(methods) == 8
    for (setting, algo, content), runs in content_runs.items():
        if content != "shuffle" or algo in REFERENCE_ROWS:
            continue
        values = [v for v, _ in runs]
        assert len(values) == 3
        if setting == "ku":
            assert mean(values) < 0.52, (algo, values)  # the issue asks for at most 0.56
        else:
            gap = abs(mean(values) - mean(c for _, c in runs))
            if setting == "toys":
                assert gap <= 2 * stdev(values) and mean(values) <= 0.10, (algo, values)
            else:
                assert gap <= 0.02, (setting, algo, values)


def test_content_protocol_measures_content_where_there_is_some(content_runs):
    """On the synthetic graph every method retrieves above its shuffled score (FedMGS 96 against
    16 R@5, the linear reference only 20: the stand-in's pairs need the graph)."""
    for algo in {a for (s, a, _) in content_runs if s == "flickr30k"} - REFERENCE_ROWS:
        assert _content_score(content_runs, "flickr30k", algo, "keep") > \
            _content_score(content_runs, "flickr30k", algo, "shuffle") + 0.05, algo
    assert _content_score(content_runs, "flickr30k", "fedmgs", "keep") > 0.9
    assert _content_score(content_runs, "flickr30k", "linear", "keep") < 0.25


def test_content_protocol_tiktok_measures_content_and_fedmgs_leads(content_runs):
    """TikTok, after issue 26's conditioning (features standardized per client, centred views,
    the query's own row kept): every method retrieves and matches above its shuffled-content
    control, and FedMGS leads both tasks, above the centralized linear reference (R@5 19.7
    against 18.4; AUC 64.8 against 63.0). Before, every method sat at chance on TikTok."""
    for setting in ("toys", "ku"):
        methods = {a for (s, a, c) in content_runs if s == setting and c == "keep"} - REFERENCE_ROWS
        assert len(methods) >= 7, setting  # FedMPO has no matching head
        keep = {a: _content_score(content_runs, setting, a, "keep") for a in methods}
        for algo in methods:
            assert keep[algo] > _content_score(content_runs, setting, algo, "shuffle"), (setting, algo)
        assert max(keep, key=keep.get) == "fedmgs", (setting, keep)
        assert keep["fedmgs"] > _content_score(content_runs, setting, "linear", "keep"), setting

