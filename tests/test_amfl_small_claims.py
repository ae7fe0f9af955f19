"""The committed small-scale AMFL stores (issue 16) are complete over 5 seeds, generated, and
show what the README and the closing note say of them.

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
from small_results import assert_complete_and_tables_generated, load_small, mean_metric

SUITES = ["fedmbridge_table2", "fedmbridge_table3", "fedmbridge_cost", "fedmbridge_budget", "amfl_graph"]
SUPERNET = ("amfl_heterofl", "amfl_hyperpfl", "amfl_apfl")


@pytest.mark.parametrize("name", SUITES)
def test_every_cell_recorded_ok_over_5_seeds_and_table_generated(name, tmp_path):
    assert_complete_and_tables_generated(name, tmp_path, seeds=5)


def _acc(name: str, *keys: str) -> dict[tuple, float]:
    _, records, _ = load_small(name)
    return mean_metric(records, "accuracy", *keys)


@pytest.fixture(scope="module")
def table2() -> dict[str, float]:
    return {k[0]: v for k, v in _acc("fedmbridge_table2", "algorithm.name").items()}


def test_table2_fedmbridge_does_not_beat_the_supernet_baselines_here(table2):
    """FedMBridge is last on the Mnist AMF stand-in, 0.20 ACC or more below every supernet
    baseline (HeteroFL, HyperPFL, APFL) and below Local; the paper has it first."""
    assert min(table2, key=table2.get) == "fedmbridge"
    for rival in (*SUPERNET, "amfl_local"):
        assert table2[rival] > table2["fedmbridge"] + 0.20, rival


def test_table2_ranking(table2):
    """FedGKD* first and APFL second, both above Local; HyperPFL last before FedMBridge."""
    order = sorted(table2, key=table2.get, reverse=True)
    assert order[:3] == ["amfl_fedgkd", "amfl_apfl", "amfl_local"]
    assert order[-2:] == ["amfl_hyperpfl", "fedmbridge"]


@pytest.fixture(scope="module")
def table3() -> dict[tuple, float]:
    return _acc("fedmbridge_table3", "algorithm.gnn_layers", "algorithm.combine", "train.client_fraction",
                "algorithm.kd_beta")


def test_table3_ablations_go_the_papers_way_except_kd(table3):
    """Means over 5 seeds (seed std 0.04-0.09, so each gap is about one std): the role encoder
    helps (L 4 over 0: +0.06; the paper +8.0 points), sum is level with concat (within 0.01; the
    paper 0.3 points), a larger client fraction helps (+0.05; the paper +0.4); combined with KD
    FedMBridge loses 0.012 at beta 0.01 and 0.033 at beta 0.05 (the paper gains 0.1 and 0.8)."""
    base = table3[(4, "concat", 0.25, 0.0)]
    assert base - table3[(0, "concat", 0.25, 0.0)] > 0.05
    assert abs(table3[(4, "sum", 0.25, 0.0)] - base) < 0.01
    assert table3[(4, "concat", 0.4, 0.0)] > base + 0.04
    assert -0.02 < table3[(4, "concat", 0.25, 0.01)] - base < 0
    assert -0.04 < table3[(4, "concat", 0.25, 0.05)] - base < table3[(4, "concat", 0.25, 0.01)] - base


def test_table3_base_row_is_table2s_fedmbridge_cell_for_cell():
    """The same config in two suites gives the same numbers, seed by seed (one thread each)."""
    _, t2, _ = load_small("fedmbridge_table2")
    _, t3, _ = load_small("fedmbridge_table3")
    a = {r["seed"]: r["metrics"] for r in t2 if r["params"]["algorithm.name"] == "fedmbridge"}
    b = {r["seed"]: r["metrics"] for r in t3 if r["params"]["algorithm.gnn_layers"] == 4
         and r["params"]["algorithm.combine"] == "concat" and r["params"]["train.client_fraction"] == 0.25
         and r["params"]["algorithm.kd_beta"] == 0.0}
    assert a == b and len(a) == 5


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for (g, alg), v in _acc("amfl_graph", "graph", "algorithm.name").items():
        out[g][alg] = v
    return out


def test_graph_extension_moves_the_distillation_methods_up_and_keeps_fedmbridge_last(graph, table2):
    """On both multimodal graphs (TikTok, FB15K-237 typing) the two distillation methods are
    first (FedGKD* and FedDistill*; on the digits FedDistill* is fourth) and FedMBridge is last,
    over 0.05 below every supernet baseline. Local and the three supernet baselines close up
    (within 0.07 on TikTok, 0.012 on FB15K-237). Kendall tau with Table 2's order of all seven:
    0.81 on TikTok, 0.62 on FB15K-237."""
    methods = sorted(table2)
    assert sorted(table2, key=table2.get, reverse=True).index("amfl_feddistill") == 3
    for g, scores in graph.items():
        order = sorted(scores, key=scores.get, reverse=True)
        assert set(order[:2]) == {"amfl_fedgkd", "amfl_feddistill"} and order[-1] == "fedmbridge", g
        assert scores["fedmbridge"] < min(scores[a] for a in SUPERNET) - 0.05, g
    middle = {g: [graph[g][a] for a in (*SUPERNET, "amfl_local")] for g in graph}
    assert max(middle["tiktok"]) - min(middle["tiktok"]) < 0.07
    assert max(middle["fb15k"]) - min(middle["fb15k"]) < 0.012
    tau = {g: kendalltau([table2[a] for a in methods], [graph[g][a] for a in methods]).statistic for g in graph}
    assert tau["tiktok"] == pytest.approx(0.81, abs=0.01) and tau["fb15k"] == pytest.approx(0.62, abs=0.01)


def test_budget_fedmbridge_gains_most_from_240_rounds_but_stays_last():
    """At 240 rounds instead of 60, FedMBridge gains 0.21 ACC and HyperPFL 0.14 (passing Local);
    Local, HeteroFL and APFL gain under 0.04. FedMBridge is still last, 0.08 below HeteroFL."""
    acc = _acc("fedmbridge_budget", "algorithm.name", "train.rounds")
    gain = {a: acc[(a, 240)] - acc[(a, 60)] for a, _ in acc}
    assert 0.18 < gain["fedmbridge"] and 0.12 < gain["amfl_hyperpfl"] < gain["fedmbridge"]
    assert all(abs(gain[a]) < 0.04 for a in ("amfl_local", "amfl_heterofl", "amfl_apfl"))
    at240 = {a: v for (a, r), v in acc.items() if r == 240}
    assert min(at240, key=at240.get) == "fedmbridge" and at240["amfl_hyperpfl"] > at240["amfl_local"]
    assert min(v for a, v in at240.items() if a != "fedmbridge") - at240["fedmbridge"] > 0.07


def test_budget_60_round_cells_are_table2s_seed_by_seed():
    _, t2, _ = load_small("fedmbridge_table2")
    _, budget, _ = load_small("fedmbridge_budget")
    a = {(r["params"]["algorithm.name"], r["seed"]): r["metrics"] for r in t2}
    b = {(r["params"]["algorithm.name"], r["seed"]): r["metrics"] for r in budget if r["params"]["train.rounds"] == 60}
    assert len(b) == 25 and all(a[k] == v for k, v in b.items())


@pytest.fixture(scope="module")
def cost() -> dict[str, dict[str, float]]:
    """method -> mean over seeds of its COT, stages (seconds), server memory and bytes per round."""
    _, records, _ = load_small("fedmbridge_cost")
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        row = out[r["params"]["algorithm.name"]]
        for k in ("cot_s", "download_s", "upload_s", "server_s"):
            row[k].append(r["cost"][k])
        row["memory_mb"].append(r["server_memory_mb"])
        row["bytes"].append(r["bytes_per_round"])
    return {a: {k: mean(v) for k, v in row.items()} for a, row in out.items()}


def test_cost_fedmbridge_cot_is_below_hyperpfl_and_feddistill_not_below_heterofl(cost):
    """COT (the paper's weights on our measured stages): FedMBridge's is 2.5x below HyperPFL's
    and 2.9x below FedDistill*'s, level with APFL's (within 0.0002 s), and 1.5x HeteroFL's and
    FedGKD*'s. The paper's Table 2 also has HeteroFL below FedMBridge and HyperPFL far above."""
    fmb = cost["fedmbridge"]["cot_s"]
    assert cost["amfl_hyperpfl"]["cot_s"] > 2.2 * fmb and cost["amfl_feddistill"]["cot_s"] > 2.5 * fmb
    assert abs(cost["amfl_apfl"]["cot_s"] - fmb) < 0.0002
    assert fmb > 1.3 * cost["amfl_heterofl"]["cot_s"] and fmb > 1.3 * cost["amfl_fedgkd"]["cot_s"]


def test_cost_fedmbridge_moves_least_but_its_server_works_more(cost):
    """FedMBridge's download and upload stages are the shortest of the six communicating methods
    (one flat theta down, one flat delta up); its server stage (generating every theta_i and
    the chain rule) is longer than HeteroFL's, APFL's and FedGKD*'s. Its bytes per round equal
    HeteroFL's to 0.01%, and its server holds 6.8 MB, a quarter of HyperPFL's 28 MB."""
    sharing = [a for a in cost if a != "amfl_local"]
    for stage in ("download_s", "upload_s"):
        assert min(sharing, key=lambda a: cost[a][stage]) == "fedmbridge", stage
    assert all(cost["fedmbridge"]["server_s"] > cost[a]["server_s"] for a in ("amfl_heterofl", "amfl_apfl", "amfl_fedgkd"))
    assert cost["fedmbridge"]["bytes"] == pytest.approx(cost["amfl_heterofl"]["bytes"], rel=1e-4)
    assert 6.0 < cost["fedmbridge"]["memory_mb"] < cost["amfl_hyperpfl"]["memory_mb"] / 4


def test_readme_states_the_stores_numbers(table2):
    """The README's AMFL answers quote these means (3 decimals) and FedMBridge's best rounds."""
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parent.parent / "README.md").read_text().split())
    quoted = {"fedmbridge": r"Its ACC is ([0-9.]+) ±", "amfl_heterofl": r"HeteroFL w/ mask ([0-9.]+)",
              "amfl_hyperpfl": r"HyperPFL w/ prune ([0-9.]+)", "amfl_apfl": r"APFL w/ prune ([0-9.]+)",
              "amfl_local": r"and Local ([0-9.]+)", "amfl_fedgkd": r"FedGKD\* is first with ([0-9.]+)"}
    for alg, pattern in quoted.items():
        found = re.search(pattern, text)
        assert found and abs(float(found.group(1)) - table2[alg]) <= 0.0005 + 1e-9, alg
    _, budget, _ = load_small("fedmbridge_budget")
    best = [r["best_round"] for r in budget if r["params"]["algorithm.name"] == "fedmbridge"
            and r["params"]["train.rounds"] == 240]
    assert "best rounds 175-220 of 240" in text and (min(best), max(best)) == (175, 220)
