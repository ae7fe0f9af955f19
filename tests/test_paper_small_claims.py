"""The committed small-scale stores of the remaining paper tables and figures (issue 17) are
complete, generated, and show what the closing note says of them.

`results/<suite>/small.jsonl` come from `sweep <suite> --scale small` (3 seeds) and are
committed with their tables and figures. The findings are the papers' claims checked on our
offline stand-ins, whichever way they came out; a re-run that changes one fails here.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from small_results import assert_complete_and_tables_generated, load_small, mean_metric

SUITES = ["mmfed3_table4", "fedmgs_table4"]


@pytest.mark.parametrize("name", SUITES)
def test_every_cell_recorded_ok_and_table_generated(name, tmp_path):
    assert_complete_and_tables_generated(name, tmp_path)


# --------------------------------------------------------------------------- MMFeD3-HidE Table IV


@pytest.fixture(scope="module")
def table4_mrr() -> dict[tuple, float]:
    """(modalities, rate, partitioned, method) -> test MRR, mean over seeds."""
    _, records, _ = load_small("mmfed3_table4")
    return mean_metric(records, "mrr", "missing.modalities", "missing.rate", "missing.partitioned", "algorithm.name")


def test_mmfed3_table4_hide_imputation_does_not_beat_mmfede_here(table4_mrr):
    """The paper's Table IV has MMFeD3-HidE above MMFedE in every row; on FB15K-237 (small) it is
    never above it by more than 0.002 MRR in any of the 12 (modalities, r, partitioned) cells,
    and is 0.066 / 0.081 MRR below it with text / text + visual items all shared at r = 100%."""
    combos = {k[:3] for k in table4_mrr}
    assert len(combos) == 12
    for combo in combos:
        assert table4_mrr[(*combo, "mmfed3")] <= table4_mrr[(*combo, "mmfede")] + 0.002, combo
    for mods in ("text", "text+visual"):
        gap = table4_mrr[(mods, 1.0, False, "mmfede")] - table4_mrr[(mods, 1.0, False, "mmfed3")]
        assert 0.03 < gap < 0.10, (mods, gap)


def test_mmfed3_table4_full_unpartitioned_mmfede_is_best_and_partitioning_costs_it(table4_mrr):
    """At r = 100% with every holder given all of an entity's items, MMFedE has the best MRR of
    each modality setting; dealing the items between clients lowers it by at least 0.015."""
    for mods in ("text", "visual", "text+visual"):
        cells = {k: v for k, v in table4_mrr.items() if k[0] == mods}
        assert max(cells, key=cells.get) == (mods, 1.0, False, "mmfede"), mods
        assert table4_mrr[(mods, 1.0, False, "mmfede")] > table4_mrr[(mods, 1.0, True, "mmfede")] + 0.015, mods


# --------------------------------------------------------------------------- FedMGS Table 4


@pytest.fixture(scope="module")
def fedmgs_ablation() -> dict[tuple[str, str], dict[int, float]]:
    """(setting, variant) -> {seed: the column's metric}."""
    _, records, _ = load_small("fedmgs_table4")
    out: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for r in records:
        p = r["params"]
        metric = "test/accuracy" if p["setting"] == "movies" else "test/recall@5"
        out[(p["setting"], p["variant"])][r["seed"]] = r["metrics"][metric]
    return out


def test_fedmgs_table4_each_module_helps_on_movies_in_every_seed(fedmgs_ablation):
    """As in the paper, removing any of the three modules lowers node classification accuracy
    (FB15K-237 typing standing in for Movies), in each of the 3 seeds; the drops are 1.3-3.4
    points (the paper: 2.4-4.3), in another order than the paper's."""
    full = fedmgs_ablation[("movies", "full")]
    for variant in ("wo_avail_enc", "wo_proto_synth", "wo_rel_fusion"):
        ablated = fedmgs_ablation[("movies", variant)]
        assert all(full[s] > ablated[s] for s in full), variant
        drop = sum(full.values()) / 3 - sum(ablated.values()) / 3
        assert 0.01 < drop < 0.04, (variant, drop)


def test_fedmgs_table4_tiktok_retrieval_is_at_chance_for_every_variant(fedmgs_ablation):
    """Toys (TikTok visual -> acoustic retrieval) R@5 stays under 0.025 for every variant, as
    every method's does in fedmgs_table2/table6: the ablation cannot be read on this column."""
    for variant in ("full", "wo_avail_enc", "wo_proto_synth", "wo_rel_fusion"):
        assert max(fedmgs_ablation[("toys", variant)].values()) < 0.025, variant
