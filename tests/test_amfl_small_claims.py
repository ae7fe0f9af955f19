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


def test_table3_ablations_go_the_papers_way_except_kd_at_beta_005(table3):
    """Means over 5 seeds (seed std 0.04-0.09, so each gap is about one std): the role encoder
    helps (L 4 over 0: +0.06; the paper +8.0 points), sum is level with concat (within 0.01; the
    paper 0.3 points), a larger client fraction helps (+0.05; the paper +0.4), KD at beta 0.01
    adds under 0.01 (the paper +0.1) and at beta 0.05 takes 0.016 off (the paper +0.8)."""
    base = table3[(4, "concat", 0.25, 0.0)]
    assert base - table3[(0, "concat", 0.25, 0.0)] > 0.05
    assert abs(table3[(4, "sum", 0.25, 0.0)] - base) < 0.01
    assert table3[(4, "concat", 0.4, 0.0)] > base + 0.04
    assert 0 < table3[(4, "concat", 0.25, 0.01)] - base < 0.01
    assert -0.03 < table3[(4, "concat", 0.25, 0.05)] - base < 0


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


def test_graph_extension_keeps_the_first_and_the_last(graph, table2):
    """On both multimodal graphs (TikTok, FB15K-237 typing) FedGKD* is first and FedMBridge last,
    as on the digits, and FedMBridge stays over 0.05 below every supernet baseline. The middle
    five close up (within 0.07 on TikTok, 0.012 on FB15K-237): Kendall tau with Table 2's order
    of all seven is 0.90 on TikTok and 0.62 on FB15K-237, where the middle is inside seed noise."""
    methods = sorted(table2)
    for g, scores in graph.items():
        order = sorted(scores, key=scores.get, reverse=True)
        assert order[0] == "amfl_fedgkd" and order[-1] == "fedmbridge", g
        assert scores["fedmbridge"] < min(scores[a] for a in SUPERNET) - 0.05, g
    middle = {g: [s for a, s in graph[g].items() if a not in ("amfl_fedgkd", "fedmbridge")] for g in graph}
    assert max(middle["tiktok"]) - min(middle["tiktok"]) < 0.07
    assert max(middle["fb15k"]) - min(middle["fb15k"]) < 0.012
    tau = {g: kendalltau([table2[a] for a in methods], [graph[g][a] for a in methods]).statistic for g in graph}
    assert tau["tiktok"] == pytest.approx(0.90, abs=0.01) and tau["fb15k"] == pytest.approx(0.62, abs=0.01)
