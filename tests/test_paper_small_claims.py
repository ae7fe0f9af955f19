"""The committed small-scale stores of the remaining paper tables and figures (issue 17) are
complete, generated, and show what the closing note says of them.

`results/<suite>/small.jsonl` come from `sweep <suite> --scale small` (3 seeds) and are
committed with their tables and figures. The findings are the papers' claims checked on our
offline stand-ins, whichever way they came out; a re-run that changes one fails here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
from small_results import assert_complete_and_tables_generated, load_small, mean_metric

SUITES = ["mmfed3_table4", "fedmgs_table4", "mmfed3_fig5", "mmfed3_fig6", "fedmpo_ablation", "fedmgs_sensitivity",
          "mmfed3_fig7", "fedmpo_sensitivity"]


@pytest.mark.parametrize("name", SUITES)
def test_every_cell_recorded_ok_and_table_generated(name, tmp_path):
    assert_complete_and_tables_generated(name, tmp_path)


# --------------------------------------------------------------------------- MMFeD3-HidE Table IV


@pytest.fixture(scope="module")
def table4_mrr() -> dict[tuple, float]:
    """(modalities, rate, partitioned, method) -> test MRR, mean over seeds."""
    _, records, _ = load_small("mmfed3_table4")
    return mean_metric(records, "mrr", "missing.modalities", "missing.rate", "missing.partitioned", "algorithm.name")


def test_mmfed3_table4_hide_imputation_is_never_below_mmfede(table4_mrr):
    """As in the paper's Table IV, MMFeD3-HidE is at or above MMFedE in every one of the 12
    (modalities, r, partitioned) cells of FB15K-237 (small), re-run to convergence. The margins
    are small, 0.0002-0.017 MRR against a seed spread of about 0.005; they are largest with both
    modalities (0.008-0.017) and smallest with the numeric one alone."""
    combos = {k[:3] for k in table4_mrr}
    assert len(combos) == 12
    for combo in combos:
        assert table4_mrr[(*combo, "mmfed3")] >= table4_mrr[(*combo, "mmfede")], combo
    for rate in (1.0, 0.5):
        for part in (False, True):
            combo = ("text+visual", rate, part)
            assert 0.006 < table4_mrr[(*combo, "mmfed3")] - table4_mrr[(*combo, "mmfede")] < 0.02, combo


def test_mmfed3_table4_fewer_items_and_dealing_them_cost_mmfede(table4_mrr):
    """MMFedE, which has no imputer, loses MRR both when half of the items are missing (r = 50%,
    0.005-0.013) and when the items are dealt between clients at r = 100% (about 0.007); in each
    modality setting the best row is an MMFeD3-HidE row at r = 100%."""
    for mods in ("text", "visual", "text+visual"):
        full = table4_mrr[(mods, 1.0, False, "mmfede")]
        assert full > table4_mrr[(mods, 0.5, False, "mmfede")] + 0.005, mods
        assert full > table4_mrr[(mods, 1.0, True, "mmfede")] + 0.005, mods
        cells = {k: v for k, v in table4_mrr.items() if k[0] == mods}
        best = max(cells, key=cells.get)
        assert best[1] == 1.0 and best[3] == "mmfed3", (mods, best)


# --------------------------------------------------------------------------- FedMGS Table 4


@pytest.fixture(scope="module")
def fedmgs_ablation() -> dict[tuple[str, str], dict[int, float]]:
    """(setting, variant) -> {seed: the column's metric}."""
    _, records, _ = load_small("fedmgs_table4")
    out: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for r in records:
        p = r.params
        metric = "test/accuracy" if p["setting"] == "movies" else "test/recall@5"
        out[(p["setting"], p.get("variant") or p["algorithm.name"])][r.seed] = r.metrics[metric]  # a reference by name
    return out


def test_fedmgs_table4_availability_encoding_helps_on_movies_in_every_seed(fedmgs_ablation):
    """Under issue 26's protocol (standardized features, budgets to convergence), removing the
    availability-aware graph encoding lowers node classification accuracy (FB15K-237 typing
    standing in for Movies) in each of the 3 seeds, by 0.5-1.6 points (the paper: 4.3); the
    other two modules' drops change sign with the seed, within seed noise."""
    full = fedmgs_ablation[("movies", "full")]
    ablated = fedmgs_ablation[("movies", "wo_avail_enc")]
    assert all(full[s] > ablated[s] for s in full)
    assert all(0.004 < full[s] - ablated[s] < 0.02 for s in full)
    for variant in ("wo_proto_synth", "wo_rel_fusion"):
        gaps = [full[s] - fedmgs_ablation[("movies", variant)][s] for s in full]
        assert min(gaps) <= 0 < max(gaps), variant


def test_fedmgs_table4_every_variant_learned_against_the_reference_rows(fedmgs_ablation):
    """Reference rows on the same data: on Movies (FB15K-237 typing) every variant is over 20
    points above chance (18.8%) and the full model within 2.5 points of the linear reference
    (42.1 against 43.6; the centralized GNN 46.2); on Toys (TikTok retrieval) every variant is
    at least 3x chance (R@5 5.7-7.1 against 1.9) and within 1.1 points of the linear reference
    (6.8), above the centralized GNN (3.0)."""
    def m(setting, row):
        return _mean(fedmgs_ablation[(setting, row)])
    variants = ("full", "wo_avail_enc", "wo_proto_synth", "wo_rel_fusion")
    assert all(m("movies", v) > m("movies", "chance") + 0.2 for v in variants)
    assert abs(m("movies", "full") - m("movies", "linear")) < 0.025 < m("movies", "centralized") - m("movies", "full")
    for v in variants:
        assert m("toys", v) > 3 * m("toys", "chance") and abs(m("toys", v) - m("toys", "linear")) < 0.011, v
        assert m("toys", v) > m("toys", "centralized"), v


def test_fedmgs_table4_reliability_fusion_costs_retrieval_on_toys(fedmgs_ablation):
    """Unlike the paper (1.48 points lower without it), removing the reliability-calibrated
    fusion raises TikTok retrieval R@5 (standing in for Toys) in each of the 3 seeds."""
    full = fedmgs_ablation[("toys", "full")]
    ablated = fedmgs_ablation[("toys", "wo_rel_fusion")]
    assert all(ablated[s] > full[s] for s in full)


# --------------------------------------------------------------------------- MMFeD3-HidE Figures 5 and 6


@pytest.fixture(scope="module")
def fig5() -> dict[tuple, float]:
    """(view metric, clients, method) -> mean over seeds at the best validation round."""
    _, records, _ = load_small("mmfed3_fig5")
    out: dict[tuple, float] = {}
    for view in ("mrr", "server/mrr"):
        rows = [replace(r, metrics={"test/" + view: r.metrics["test/mrr" if view == "mrr" else "test_server/mrr"]})
                for r in records]
        out.update({(view, *k): v for k, v in mean_metric(rows, view, "partition.num_clients", "algorithm.name").items()})
    return out


def test_fig5_mmfed3_leads_on_the_client_view_only(fig5):
    """As in the paper's Figure 5 (client panels), MMFeD3 is first on the client view at 3, 5
    and 10 clients, trained to convergence by 0.008-0.016 MRR; on the server view it is
    neither first nor last at any client count (within 0.004 of the best), so its lead is its
    clients' own models, not a better global one."""
    methods = ("mmfede", "mmfedec", "mmfedprox", "mmfedlu", "mmfed3")
    for n in (3, 5, 10):
        client = {a: fig5[("mrr", n, a)] for a in methods}
        runner_up = max(v for a, v in client.items() if a != "mmfed3")
        assert 0.005 < client["mmfed3"] - runner_up < 0.02, n
        server = {a: fig5[("server/mrr", n, a)] for a in methods}
        assert max(server, key=server.get) != "mmfed3" and min(server, key=server.get) != "mmfed3", n
        assert max(server.values()) - server["mmfed3"] < 0.004, n


def test_fig6_reconstruction_nets_tie_at_convergence(tmp_path):
    """The paper's Figure 6 has CRA best and MHA second at every client count. Trained to
    convergence (issue 27) the four networks tie here: at 3, 5 and 10 clients their mean test
    MRR spans less than 0.01 (0.005-0.007), inside the seed spread (std up to 0.011), at
    0.38-0.40; no network leads at all three client counts."""
    _, records, _ = load_small("mmfed3_fig6")
    mrr = mean_metric(records, "mrr", "partition.num_clients", "algorithm.recon_net")
    leaders = set()
    for n in (3, 5, 10):
        nets = {net: mrr[(n, net)] for net in ("ae", "mlp", "mha", "cra")}
        assert max(nets.values()) - min(nets.values()) < 0.01, n
        assert all(0.37 < v < 0.41 for v in nets.values()), n
        leaders.add(max(nets, key=nets.get))
    assert len(leaders) > 1


# --------------------------------------------------------------------------- FedMPO ablation (Fig. 3)


@pytest.fixture(scope="module")
def fedmpo_ablation() -> dict[tuple[str, str], dict[int, float]]:
    """(setting, variant) -> {seed: the column's headline metric}."""
    _, records, _ = load_small("fedmpo_ablation")
    metric = {"ele_fashion": "test/accuracy", "dy": "test/auc", "toys": "test/recall@5"}
    out: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for r in records:
        p = r.params
        out[(p["setting"], p.get("variant") or p["algorithm.name"])][r.seed] = r.metrics[metric[p["setting"]]]
    return out


VARIANTS = ("full", "wo_agmg", "wo_moe", "wo_align", "wo_relagg")


def _mean(by_seed: dict[int, float]) -> float:
    return sum(by_seed.values()) / len(by_seed)


def test_fedmpo_ablation_no_removal_separates_on_node_classification(fedmpo_ablation):
    """Under issue 26's protocol, on FB15K-237 typing (Ele-fashion's stand-in) every removal is
    within 2.1 points of the full model's mean accuracy and none is above it by more than 0.5
    (w/o Align, +0.3); the paper's Fig. 3 has every removal below the full model."""
    full = _mean(fedmpo_ablation[("ele_fashion", "full")])
    for variant in ("wo_agmg", "wo_moe", "wo_align", "wo_relagg"):
        gap = full - _mean(fedmpo_ablation[("ele_fashion", variant)])
        assert -0.005 < gap < 0.021, (variant, gap)


def test_fedmpo_ablation_the_moe_costs_tiktok_link_prediction_and_retrieval(fedmpo_ablation):
    """On TikTok, replacing the missing-aware experts by the mean of the modality vectors (w/o
    MoE) is best in every seed on retrieval (R@5 16.6-19.8 against the full model's 13.3-14.8)
    and best on the mean on link prediction (AUC 56.9 against 54.5; in seed 1 w/o Align
    leads). The paper has the MoE helping."""
    full, wo_moe = fedmpo_ablation[("toys", "full")], fedmpo_ablation[("toys", "wo_moe")]
    assert all(wo_moe[s] > full[s] + 0.015 for s in full)
    others = [v for (g, v) in fedmpo_ablation if g == "toys" and v in VARIANTS and v != "wo_moe"]
    assert all(all(wo_moe[s] > fedmpo_ablation[("toys", v)][s] for s in full) for v in others)
    lp = {v: _mean(fedmpo_ablation[("dy", v)]) for v in VARIANTS}
    assert max(lp, key=lp.get) == "wo_moe" and lp["wo_moe"] > lp["full"] + 0.02
    seed1 = {v: fedmpo_ablation[("dy", v)][1] for v in VARIANTS}
    assert max(seed1, key=seed1.get) == "wo_align"


def test_fedmpo_ablation_against_the_reference_rows(fedmpo_ablation):
    """On Ele-fashion (FB15K-237 typing) every variant is above the linear reference (41.9-44.2%
    against 40.1%) and below the centralized GNN (44.9%); on Toys (TikTok retrieval) only w/o
    MoE reaches the linear reference (R@5 17.9 against 17.4; the full model 14.2), every variant
    above the centralized GNN (10.0) and chance (7.6). On TikTok link prediction (hard negatives
    drawn per positive, issue 26) the centralized GNN (AUC 60.1) is over 3 points above every
    variant (54.2-56.9) and the linear reference (51.6, the features alone) over 2 below."""
    def m(setting, row):
        return _mean(fedmpo_ablation[(setting, row)])
    assert all(m("ele_fashion", "linear") < m("ele_fashion", v) < m("ele_fashion", "centralized") for v in VARIANTS)
    assert [v for v in VARIANTS if m("toys", v) >= m("toys", "linear")] == ["wo_moe"]
    assert all(m("toys", v) > m("toys", "centralized") > m("toys", "chance") for v in VARIANTS)
    assert m("dy", "chance") == 0.5 and m("dy", "linear") < 0.53
    assert all(m("dy", "centralized") > m("dy", v) + 0.03 > m("dy", "linear") + 0.05 for v in VARIANTS)


# --------------------------------------------------------------------------- FedMGS sensitivity (Fig. 3)


@pytest.fixture(scope="module")
def fedmgs_sens() -> dict[tuple, float]:
    """(setting, lambda_rec, lambda_proto) -> the panel's metric, mean over seeds."""
    _, records, _ = load_small("fedmgs_sensitivity")
    out: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        p = r.params
        metric = "test/auc" if "test/auc" in r.metrics else "test/accuracy"
        if "algorithm.name" in p:  # a reference row: (setting, its name, None)
            out[(p["setting"], p["algorithm.name"], None)].append(r.metrics[metric])
            continue
        out[(p["setting"], p["algorithm.lambda_rec"], p["algorithm.lambda_proto"])].append(r.metrics[metric])
    return {k: sum(v) / len(v) for k, v in out.items()}


def test_fedmgs_sensitivity_accuracy_falls_with_lambda_rec_and_ignores_lambda_proto(fedmgs_sens):
    """Grocery stand-in (node classification), re-run under conditioned features and budgets to
    convergence: in every lambda_proto column accuracy is highest at lambda_rec 0.1 (83.9-84.8%),
    then 0.5, and lowest at 1 or 2 (80.5-82.7%), 1.7-4.3 points under the 0.1 row; within a row
    lambda_proto moves it by under 2.5 points (0.5-2.2)."""
    grid = {k: v for k, v in fedmgs_sens.items() if k[2] is not None}
    nc = next(s for (s, _, _) in grid if s != "ku")
    recs = sorted({k[1] for k in grid if k[0] == nc})
    protos = sorted({k[2] for k in grid if k[0] == nc})
    assert recs == [0.1, 0.5, 1.0, 2.0] and len(protos) == 4
    for lp in protos:
        col = {lr: fedmgs_sens[(nc, lr, lp)] for lr in recs}
        low = min(col[1.0], col[2.0])
        assert col[0.1] > col[0.5] > low and col[0.1] - low > 0.015, lp
    for lr in recs:
        row = [fedmgs_sens[(nc, lr, lp)] for lp in protos]
        assert max(row) - min(row) < 0.025, lr


def test_fedmgs_sensitivity_lambda_proto_is_inert_on_ku_matching(fedmgs_sens):
    """KU (TikTok matching): each row is one number: matching has no classes, so FedMGS's
    L_proto is off and lambda_proto cannot act (the caption says so). lambda_rec 0.1 gives the
    best AUC (62.8 against 59.2-60.5), a gap inside two seed stds (2.4-3.2)."""
    ku = {k: v for k, v in fedmgs_sens.items() if k[0] == "ku" and k[2] is not None}
    assert len(ku) == 16
    for lr in {k[1] for k in ku}:
        assert len({v for k, v in ku.items() if k[1] == lr}) == 1, lr
    by_rec = {k[1]: v for k, v in ku.items()}
    assert max(by_rec, key=by_rec.get) == 0.1 and 0.55 < min(by_rec.values()) < max(by_rec.values()) < 0.65


def test_fedmgs_sensitivity_against_the_reference_rows(fedmgs_sens):
    """KU: FedMGS at lambda_rec 0.1 (AUC 62.8) is above the linear reference (59.4) and the
    centralized GNN (59.0), the other rows level with them (59.2-60.5); Grocery: every cell
    (80.5-84.8%) is far above the linear reference on the features alone (56.3%) and below the
    centralized GNN (89.9%), which sees the whole graph."""
    ku = {k[1]: v for k, v in fedmgs_sens.items() if k[0] == "ku"}
    assert ku[0.1] > max(ku["linear"], ku["centralized"]) + 0.02 and ku["chance"] == 0.5
    assert all(abs(ku[r] - ku["linear"]) < 0.015 for r in (0.5, 1.0, 2.0))
    grocery = {k: v for k, v in fedmgs_sens.items() if k[0] == "grocery"}
    cells = [v for k, v in grocery.items() if k[2] is not None]
    ref = {k[1]: v for k, v in grocery.items() if k[2] is None}
    assert ref["linear"] + 0.2 < min(cells) and max(cells) < ref["centralized"] - 0.04


# --------------------------------------------------------------------------- MMFeD3-HidE Figure 7


@pytest.fixture(scope="module")
def fig7() -> dict[tuple, float]:
    """(varied hyperparameter, its value, clients) -> test MRR, mean over seeds (the others at
    their defaults: lambda 1, 5 steps, eta 0.1, mu 0.1)."""
    _, records, _ = load_small("mmfed3_fig7")
    out: dict[tuple, list[float]] = defaultdict(list)
    for r in records:
        (key, value), = [(k, v) for k, v in r.params.items() if k != "partition.num_clients"]
        out[(key, value, r.params["partition.num_clients"])].append(r.metrics["test/mrr"])
    return {k: sum(v) / len(v) for k, v in out.items()}


PANELS = {"algorithm.lambda_di": (0.01, 0.1, 1.0, 10.0), "algorithm.diffusion_steps": (2, 5, 10, 20),
          "algorithm.eta": (0.01, 0.1, 1.0), "algorithm.mu": (0.01, 0.1, 1.0)}


def test_fig7_mmfed3_is_flat_in_every_hyperparameter_at_convergence(fig7):
    """Run to convergence with bounded projections (issue 27), no value of any of the four
    hyperparameters moves MMFeD3-HidE's mean MRR by 0.02 at 3, 5 or 10 clients (the largest
    span is 0.015: mu and eta on Fed10). At 8 rounds lambda = 10 and eta = 1 had collapsed it
    (MRR under 0.15): that was the unbounded projections, not the method."""
    for key, values in PANELS.items():
        for n in (3, 5, 10):
            means = [fig7[(key, v, n)] for v in values]
            assert max(means) - min(means) < 0.02, (key, n)
            assert min(means) > 0.37, (key, n)


def test_fig7_lambda_10_is_worst_and_eta_01_best_at_every_client_count(fig7):
    """The two orders that hold at every client count: lambda = 10 is the lowest of its panel
    (0.006-0.010 below the panel's best), and the default eta = 0.1 the highest of its."""
    for n in (3, 5, 10):
        lam = {v: fig7[("algorithm.lambda_di", v, n)] for v in PANELS["algorithm.lambda_di"]}
        assert min(lam, key=lam.get) == 10.0 and 0.005 < max(lam.values()) - lam[10.0] < 0.012, n
        eta = {v: fig7[("algorithm.eta", v, n)] for v in PANELS["algorithm.eta"]}
        assert max(eta, key=eta.get) == 0.1, n


# --------------------------------------------------------------------------- FedMPO sensitivity


@pytest.fixture(scope="module")
def fedmpo_sens() -> dict[tuple, float]:
    """(setting, lambda_rec, lambda_route) -> mean accuracy; (setting, reference) -> mean accuracy."""
    _, records, _ = load_small("fedmpo_sensitivity")
    grid = [r for r in records if "algorithm.lambda_rec" in r.params]
    refs = [r for r in records if "algorithm.lambda_rec" not in r.params]
    return {**mean_metric(grid, "accuracy", "setting", "algorithm.lambda_rec", "algorithm.lambda_route"),
            **mean_metric(refs, "accuracy", "setting", "algorithm.name")}


def test_fedmpo_sensitivity_is_flat_on_fb15k_and_lambda_rec_05_is_worst_on_grocery(fedmpo_sens):
    """Re-run under conditioned features and budgets to convergence, with reference rows.
    FB15K-237 typing (Ele-fashion's stand-in): all 16 cells within 1.3 points (42.9-44.2; one
    seed std is about 2), between the linear reference (40.1) and the centralized GNN (44.9),
    so neither weight matters there. Grocery stand-in: lambda_rec 0.5 is the worst row in every
    lambda_route column and the best row is lambda_rec 0.1 or 0.05 (0.1 at the two smallest
    lambda_route); every cell is far above linear (43.9) and at least 16 points below the
    centralized GNN (89.9). (Before: lambda_rec 0.1 was the best row in every column.)"""
    ele = [v for k, v in fedmpo_sens.items() if k[0] == "ele_fashion" and len(k) == 3]
    assert len(ele) == 16 and max(ele) - min(ele) < 0.013
    assert fedmpo_sens[("ele_fashion", "linear")] < min(ele) and max(ele) < fedmpo_sens[("ele_fashion", "centralized")]
    other = next(k[0] for k in fedmpo_sens if k[0] != "ele_fashion")
    routes = sorted({k[2] for k in fedmpo_sens if k[0] == other and len(k) == 3})
    assert len(routes) == 4
    for route in routes:
        col = {k[1]: v for k, v in fedmpo_sens.items() if len(k) == 3 and k[0] == other and k[2] == route}
        assert min(col, key=col.get) == 0.5, route
        assert max(col, key=col.get) in (0.05, 0.1), route
        assert min(col.values()) > fedmpo_sens[(other, "linear")] + 0.2
        assert max(col.values()) < fedmpo_sens[(other, "centralized")] - 0.16
    for route in routes[:2]:
        col = {k[1]: v for k, v in fedmpo_sens.items() if len(k) == 3 and k[0] == other and k[2] == route}
        assert max(col, key=col.get) == 0.1, route


def test_mmfed3_table2_small_statistics_are_recorded_and_generated(tmp_path):
    """Table II at small scale: statistics of the built federations (one seed, nothing trained);
    clients hold on average 62 / 37.2 / 18.6 relations at 3 / 5 / 10 clients."""
    assert_complete_and_tables_generated("mmfed3_table2", tmp_path, seeds=1)
    _, records, _ = load_small("mmfed3_table2")
    relations = {r.params["partition.num_clients"]: r.metrics["stats/mean_relations"] for r in records}
    assert relations == pytest.approx({3: 62.0, 5: 37.2, 10: 18.6})
