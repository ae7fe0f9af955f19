"""The committed small-scale AMFL stores (issue 16) are complete over 5 seeds, generated, and
show what docs/findings.md and the closing note say of them.

`results/<suite>/small.jsonl` for fedmbridge_table2, fedmbridge_table3, fedmbridge_cost,
fedmbridge_budget and amfl_graph come from `sweep <suite> --scale small` and are committed
with their tables and figures. The findings are the paper's claims checked on our offline
stand-ins, whichever way they came out; a re-run that changes one fails here.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import mean

import pytest
from scipy.stats import kendalltau
from small_results import PENDING, assert_complete_and_tables_generated, load_small, mean_metric

SUITES = ["fedmbridge_table2", "fedmbridge_table3", "fedmbridge_cost", "fedmbridge_budget", "amfl_graph"]


@pytest.mark.parametrize("name", SUITES)
def test_every_cell_recorded_ok_over_5_seeds_and_table_generated(name, tmp_path):
    assert_complete_and_tables_generated(name, tmp_path, seeds=5)


def _acc(name: str, *keys: str) -> dict[tuple, float]:
    _, records, _ = load_small(name)
    return mean_metric(records, "accuracy", *keys)


@pytest.fixture(scope="module")
def table2() -> dict[str, float]:
    return {k[0]: v for k, v in _acc("fedmbridge_table2", "algorithm.name").items()}


def test_table2_fedmbridge_is_fourth_within_two_points_of_the_first(table2):
    """Run to convergence (up to 400 rounds, patience 100; 33 of 35 cells converged),
    FedMBridge reaches 0.726, fourth of seven: APFL w/ prune 0.744, FedGKD* 0.735 and HyperPFL
    w/ prune 0.729 lie within 0.02 above it; Local 0.707, FedDistill* 0.694 and HeteroFL w/
    mask 0.679 below. At 60 rounds it was fifth (0.677). The paper has it first."""
    order = sorted(table2, key=table2.get, reverse=True)
    assert order == ["amfl_apfl", "amfl_fedgkd", "amfl_hyperpfl", "fedmbridge", "amfl_local", "amfl_feddistill",
                     "amfl_heterofl"]
    assert table2["fedmbridge"] >= 0.70 and table2["amfl_apfl"] - table2["fedmbridge"] < 0.02
    assert table2["fedmbridge"] - table2["amfl_heterofl"] > 0.04


def test_table2_kendall_tau_against_the_paper_is_slightly_positive(table2):
    """The paper's Table 2 (Mnist AMF) orders FedMBridge, FedGKD*, HyperPFL, FedDistill*, APFL,
    HeteroFL, Local; ours: tau 0.24 over the seven means (-0.14 at 60 rounds)."""
    paper = {"amfl_local": 91.83, "amfl_feddistill": 92.33, "amfl_fedgkd": 93.91, "amfl_heterofl": 91.94,
             "amfl_hyperpfl": 92.67, "amfl_apfl": 91.95, "fedmbridge": 95.78}
    methods = sorted(paper)
    tau = kendalltau([paper[a] for a in methods], [table2[a] for a in methods]).statistic
    assert tau == pytest.approx(0.24, abs=0.01)


@pytest.fixture(scope="module")
def table3() -> dict[tuple, float]:
    return _acc("fedmbridge_table3", "algorithm.gnn_layers", "algorithm.combine", "train.client_fraction",
                "algorithm.kd_beta")


def test_table3_role_encoder_and_client_fraction_help_distillation_does_not(table3):
    """Means over 5 seeds at convergence (seed std 0.02-0.05, so every gap is within about one
    std): the role encoder helps most (L 4 over 0: +0.027; the paper +8.0 points) and a larger
    client fraction helps (+0.016; the paper +0.4), as in the paper. Sum is level with concat
    (+0.006; the paper -0.3), and FedDistill*'s distillation no longer helps (-0.001 at beta
    0.01, -0.007 at 0.05; the paper +0.1 and +0.8; at 60 rounds +0.012 and +0.010)."""
    base = table3[(4, "concat", 0.25, 0.0)]
    gains = {k: v - base for k, v in table3.items() if k != (4, "concat", 0.25, 0.0)}
    assert base - table3[(0, "concat", 0.25, 0.0)] > 0.02
    assert 0.01 < gains[(4, "concat", 0.4, 0.0)] < 0.02
    assert abs(gains[(4, "sum", 0.25, 0.0)]) < 0.01
    assert -0.01 < gains[(4, "concat", 0.25, 0.01)] < 0 and -0.01 < gains[(4, "concat", 0.25, 0.05)] < 0
    assert base - table3[(0, "concat", 0.25, 0.0)] > max(gains.values())


def test_table3_base_row_is_table2s_fedmbridge_cell_for_cell():
    """The same config in two suites gives the same numbers, seed by seed (one thread each).
    While one of the two stores waits for its re-run (results/pending_rerun.json) their
    records were made under different budgets, and only that may keep them apart."""
    _, t2, _ = load_small("fedmbridge_table2")
    _, t3, _ = load_small("fedmbridge_table3")
    a = {r.seed: r for r in t2 if r.params["algorithm.name"] == "fedmbridge"}
    b = {r.seed: r for r in t3 if r.params["algorithm.gnn_layers"] == 4
         and r.params["algorithm.combine"] == "concat" and r.params["train.client_fraction"] == 0.25
         and r.params["algorithm.kd_beta"] == 0.0}
    assert len(a) == len(b) == 5
    if any(a[s].config["train"] != b[s].config["train"] for s in a):
        assert {"fedmbridge_table2", "fedmbridge_table3"} & set(PENDING), "budgets differ, neither store pending"
        pytest.skip("one of the two stores is pending a re-run under another budget")
    assert {s: r.metrics for s, r in a.items()} == {s: r.metrics for s, r in b.items()}


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (g, alg), v in _acc("amfl_graph", "graph", "algorithm.name").items():
        out[g][alg] = v
    return out


def test_graph_extension_puts_fedgkd_first_and_moves_fedmbridge_by_graph(graph, table2):
    """At convergence (up to 400 rounds, patience 100; 69 of 70 cells converged), on both
    multimodal graphs FedGKD* is first (on the digits APFL is). On TikTok FedMBridge is second
    (0.582, above FedDistill* 0.577) and HyperPFL last; on FB15K-237 typing the two distillation
    methods lead and FedMBridge is sixth (0.445), above HeteroFL only, all seven within 0.06.
    Kendall tau with Table 2's order of all seven: 0.05 on TikTok, 0.14 on FB15K-237."""
    methods = sorted(table2)
    order = {g: sorted(scores, key=scores.get, reverse=True) for g, scores in graph.items()}
    assert order["tiktok"][:2] == ["amfl_fedgkd", "fedmbridge"] and order["tiktok"][-1] == "amfl_hyperpfl"
    assert order["fb15k"][:2] == ["amfl_fedgkd", "amfl_feddistill"]
    assert order["fb15k"][-2:] == ["fedmbridge", "amfl_heterofl"]
    assert max(graph["fb15k"].values()) - min(graph["fb15k"].values()) < 0.06
    tau = {g: kendalltau([table2[a] for a in methods], [graph[g][a] for a in methods]).statistic for g in graph}
    assert tau["tiktok"] == pytest.approx(0.05, abs=0.01) and tau["fb15k"] == pytest.approx(0.14, abs=0.01)


def test_budget_fedmbridge_is_second_at_240_rounds():
    """At 240 rounds instead of 60 FedMBridge gains 0.059 ACC and moves from fifth to second
    (0.735), 0.005 below APFL (0.740) and level with FedGKD* (0.733); HyperPFL gains most
    (+0.115), HeteroFL +0.054, FedDistill* +0.026, and Local, FedGKD* and APFL stay within
    0.011. Kendall tau with the paper's Table 2 order: -0.14 at 60 rounds, 0.43 at 240."""
    acc = _acc("fedmbridge_budget", "algorithm.name", "train.rounds")
    gain = {a: acc[(a, 240)] - acc[(a, 60)] for a, _ in acc}
    assert 0.05 < gain["fedmbridge"] < 0.07 and gain["amfl_hyperpfl"] > 0.1
    assert all(abs(gain[a]) < 0.011 for a in ("amfl_local", "amfl_fedgkd", "amfl_apfl"))
    paper = {"amfl_local": 91.83, "amfl_feddistill": 92.33, "amfl_fedgkd": 93.91, "amfl_heterofl": 91.94,
             "amfl_hyperpfl": 92.67, "amfl_apfl": 91.95, "fedmbridge": 95.78}
    methods = sorted(paper)
    for rounds, rank, tau in ((60, 5, -0.14), (240, 2, 0.43)):
        at = {a: acc[(a, rounds)] for a in methods}
        assert sorted(at, key=at.get, reverse=True).index("fedmbridge") + 1 == rank, rounds
        assert kendalltau([paper[a] for a in methods], [at[a] for a in methods]).statistic == pytest.approx(tau, abs=0.01)
    assert 0 < acc[("amfl_apfl", 240)] - acc[("fedmbridge", 240)] < 0.01


def test_budget_study_and_table2_agree_at_convergence():
    """Table 2 run to convergence and the fixed 240-round budget give FedMBridge the same ACC
    within 0.01 (0.726 and 0.735), both above its 60-round 0.677."""
    acc = _acc("fedmbridge_budget", "algorithm.name", "train.rounds")
    t2 = {k[0]: v for k, v in _acc("fedmbridge_table2", "algorithm.name").items()}
    assert abs(t2["fedmbridge"] - acc[("fedmbridge", 240)]) < 0.01
    assert t2["fedmbridge"] > acc[("fedmbridge", 60)] + 0.04


@pytest.fixture(scope="module")
def cost() -> dict[str, dict[str, float]]:
    """method -> mean over seeds of its COT, stages (seconds), server memory and bytes per round."""
    _, records, _ = load_small("fedmbridge_cost")
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        row = out[r.params["algorithm.name"]]
        for k in ("cot_s", "download_s", "upload_s", "server_s"):
            row[k].append(r.cost[k])
        row["memory_mb"].append(r.server_memory_mb)
        row["bytes"].append(r.bytes_per_round)
    return {a: {k: mean(v) for k, v in row.items()} for a, row in out.items()}


def test_cost_fedmbridge_cot_is_third_highest(cost):
    """COT (the paper's weights on our measured stages): with every layer generated whole,
    FedMBridge's is below FedDistill*'s (by 1.4x) and HyperPFL's (by 1.2x) and 2.0x APFL's,
    2.2x HeteroFL's and 4.2x FedGKD*'s. The paper has it among the lowest (29.5 s against
    HyperPFL's 140.2)."""
    fmb = cost["fedmbridge"]["cot_s"]
    assert cost["amfl_feddistill"]["cot_s"] > 1.3 * fmb and cost["amfl_hyperpfl"]["cot_s"] > 1.1 * fmb
    assert fmb > 1.8 * cost["amfl_apfl"]["cot_s"] and fmb > 2.0 * cost["amfl_heterofl"]["cot_s"]
    assert fmb > 3.5 * cost["amfl_fedgkd"]["cot_s"]


def test_cost_fedmbridge_moves_least_and_its_per_layer_generator_costs_server_time_and_memory(cost):
    """FedMBridge's download and upload stages are the shortest of the six communicating methods
    (one flat theta down, one flat delta up); its server stage (generating every theta_i with
    one output head per layer size, then the chain rule) takes 84 ms a round, behind only
    FedDistill*'s distillation and HyperPFL's hypernetwork, and its server holds 29 MB, level
    with HyperPFL's 28 MB (the chunked generator held 6.8 MB). Its bytes per round equal
    HeteroFL's to 0.01%."""
    sharing = [a for a in cost if a != "amfl_local"]
    for stage in ("download_s", "upload_s"):
        assert min(sharing, key=lambda a: cost[a][stage]) == "fedmbridge", stage
    slower = {a for a in cost if cost[a]["server_s"] > cost["fedmbridge"]["server_s"]}
    assert slower == {"amfl_feddistill", "amfl_hyperpfl"} and 0.07 < cost["fedmbridge"]["server_s"] < 0.10
    assert cost["fedmbridge"]["bytes"] == pytest.approx(cost["amfl_heterofl"]["bytes"], rel=1e-4)
    assert 25 < cost["fedmbridge"]["memory_mb"] < 33 and abs(cost["fedmbridge"]["memory_mb"]
                                                             - cost["amfl_hyperpfl"]["memory_mb"]) < 2


def test_findings_page_states_the_stores_numbers(table2):
    """The AMFL answers of docs/findings.md quote these means (3 decimals) and FedMBridge's best rounds."""
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parent.parent / "docs" / "findings.md").read_text().split())
    quoted = {"fedmbridge": r"Its ACC is ([0-9.]+) ±", "amfl_heterofl": r"HeteroFL w/ mask ([0-9.]+)",
              "amfl_hyperpfl": r"HyperPFL w/ prune ([0-9.]+)", "amfl_apfl": r"APFL w/ prune ([0-9.]+)",
              "amfl_local": r"and Local ([0-9.]+)", "amfl_fedgkd": r"`fedmbridge_table2`; FedGKD\* ([0-9.]+),",
              "amfl_feddistill": r"FedDistill\* ([0-9.]+)\): fourth"}
    for alg, pattern in quoted.items():
        found = re.search(pattern, text)
        assert found and abs(float(found.group(1)) - table2[alg]) <= 0.0005 + 1e-9, alg
    _, budget, _ = load_small("fedmbridge_budget")
    best = [r.best_round for r in budget if r.params["algorithm.name"] == "fedmbridge"
            and r.params["train.rounds"] == 240]
    assert "best rounds 175-239 of 240" in text and (min(best), max(best)) == (175, 239)
