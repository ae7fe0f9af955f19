"""The mmfed3_* suites (seed paper Tables II-VI, Figures 5-8): every cell validates at every
scale, tables render in the paper's layout with its numbers beside ours, figures are drawn,
the Table II statistics come from built federations, and one real cell runs end to end."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest

from fedmm_bench.cli import write_suite_plots, write_suite_tables
from benchmark.config import build_run_config
from benchmark.errors import ConfigError
from benchmark.report.kg_stats import run_stats_suite
from benchmark.sweep import SCALES, SUITES_DIR, Suite, load_suite, run_suite

SUITES = sorted(p.stem for p in SUITES_DIR.glob("mmfed3_*.yaml"))
FIGURE_SUITES = [s for s in SUITES if s.startswith("mmfed3_fig")]
MULTI_VIEW = {"mmfedlu", "mmfed3"}  # algorithms that also report a server view


def test_all_paper_tables_and_figures_have_a_suite():
    assert SUITES == ["mmfed3_fig5", "mmfed3_fig6", "mmfed3_fig7", "mmfed3_fig8", "mmfed3_table2",
                      "mmfed3_table3", "mmfed3_table4", "mmfed3_table6"]


@pytest.mark.parametrize("name", SUITES)
def test_every_cell_validates_at_every_scale(name):
    suite = load_suite(name)
    counts = set()
    for scale in SCALES:
        cells = suite.cells(scale)  # builds and validates every config (registry names, options)
        assert len({c.cell_id for c in cells}) == len(cells) > 0
        counts.add(len(cells))
        cfg = build_run_config(cells[0].config)
        assert cfg.task.name == "kg_completion" and cfg.partition.name == "relation_id"
    assert len(counts) == 1, "every scale runs the same cells"


def test_cell_counts_follow_the_paper_layouts():
    """Table III: (S-Ind, MMCen) + 4 imputers x 2 starts (cold, FedE stage) x 5 FL methods, on 3
    datasets, 3 seeds, plus MMFeD3's sync_client control for AE and HidE; the bounds carry no
    imputer or start param (their algorithms take none)."""
    t3 = load_suite("mmfed3_table3").cells("small")
    control = [c for c in t3 if c.params.get("algorithm.sync_client")]
    assert len(t3) == (2 + 4 * 2 * 5) * 3 * 3 + len(control) and len(control) == 2 * 3 * 3
    bounds = [c for c in t3 if c.params["algorithm.name"] in ("s_ind", "mmcen")]
    assert len(bounds) == 2 * 3 * 3 and all("algorithm.imputer" not in c.params for c in bounds)
    assert not any("algorithm.pretrained" in c.params for c in bounds)
    rows = [c for c in t3 if c not in bounds and c not in control]
    for imputer in ("ae", "cra", "mmin", "hide"):
        starts = {c.params["algorithm.pretrained"] for c in rows if c.params["algorithm.imputer"] == imputer}
        assert starts == {"none", "fede"}, imputer
    assert len(load_suite("mmfed3_table4").cells("tiny")) == 2 * 2 * 2 * 3 * 3
    assert len(load_suite("mmfed3_table6").cells("tiny")) == (1 + 3 * 5) * 3 * 3
    fig7 = load_suite("mmfed3_fig7").cells("tiny")
    varied = [next(k for k in c.params if k != "partition.num_clients") for c in fig7]
    assert sorted(set(varied)) == ["algorithm.diffusion_steps", "algorithm.eta", "algorithm.lambda_di", "algorithm.mu"]


def test_union_grid_dedupes_overlapping_sub_grids(tmp_path):
    spec = {"name": "u", "base": {"dataset.name": "synthetic", "train.rounds": 1},
            "grid": [{"algorithm.name": ["local", "fedavg"]}, {"algorithm.name": ["fedavg", "fedprox"]}],
            "seeds": [0, 1]}
    path = tmp_path / "u.yaml"
    path.write_text(json.dumps(spec))
    suite = load_suite(str(path))
    assert suite.grid == {"algorithm.name": ["local", "fedavg", "fedprox"]}
    assert len(suite.cells("tiny")) == 3 * 2
    path.write_text(json.dumps({**spec, "grid": [{"algorithm.name": []}]}))
    with pytest.raises(ConfigError, match="grid"):
        load_suite(str(path))


# --------------------------------------------------------------------------------------------
# synthetic records in the store format


def _unit(*parts: Any) -> float:
    """A deterministic number in [0, 1) from anything JSON-able."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _fake_metrics(params: dict[str, Any], seed: int) -> dict[str, float]:
    base = 0.2 + 0.2 * _unit(params)
    mrr = base + 0.01 * seed
    return {"test/mrr": mrr, "test/hits@1": mrr * 0.6, "test/hits@3": mrr * 1.2, "test/hits@10": min(1.0, mrr * 1.7),
            "val/mrr": mrr + 0.005, "val/hits@1": mrr * 0.6, "val/hits@3": mrr * 1.2, "val/hits@10": min(1.0, mrr * 1.7)}


def fake_records(suite: Suite, scale: str) -> list[dict[str, Any]]:
    out = []
    for cell in suite.cells(scale):
        metrics = _fake_metrics(cell.params, cell.seed)
        rounds = list(range(6))
        val = [metrics["val/mrr"] * (r + 1) / len(rounds) for r in rounds]
        curves: dict[str, list] = {"round": rounds, "val/mrr": val, "test/mrr": [v - 0.01 for v in val]}
        if cell.params.get("algorithm.name") in MULTI_VIEW:
            curves["val_server/mrr"] = [v * 0.95 for v in val]
        out.append({
            "suite": suite.name, "scale": scale, "cell_id": cell.cell_id, "params": cell.params, "seed": cell.seed,
            "status": "ok", "error": None, "metrics": metrics, "curves": curves, "best_round": 5,
            "provenance": {"artifact_recipe": "recipe", "protocol": "protocol", "git_sha": "x"},
            "timestamp": "2025-01-01T00:00:00+00:00",
        })
    return out


def _header(markdown: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith("|"))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _row(markdown: str, *labels: str) -> list[str]:
    """The body row whose row labels are ``labels``, reading a blank label as the one above
    (the tables print a group's first-level label once)."""
    current: list[str] = []
    for line in [line for line in markdown.splitlines() if line.startswith("|")][2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        current = [c or (current[i] if i < len(current) else "") for i, c in enumerate(cells[: len(labels)])]
        if current == list(labels):
            return cells
    raise AssertionError(f"no row {labels} in\n{markdown}")


def _section(markdown: str, heading: str) -> str:
    """The markdown table printed under the italic ``heading`` of a split table."""
    return markdown.split(f"*{heading}*\n", 1)[1].split("\n\n", 1)[0]


def _rows(markdown: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in markdown.splitlines()
            if line.startswith("|")][2:]


def test_table3_renders_the_paper_layout_with_paper_numbers(tmp_path):
    suite = load_suite("mmfed3_table3")
    records = fake_records(suite, "small")
    (stem, md), = write_suite_tables(suite, records, "small", str(tmp_path))
    assert (tmp_path / f"{stem}.md").is_file() and (tmp_path / f"{stem}.tex").is_file()
    # 3 key + 12 metric columns would exceed 14: one table per federation (split_wide)
    feds = ("FB15K-237-Fed3", "FB15K-237-Fed5", "FB15K-237-Fed10")
    part = {fed: _section(md, fed) for fed in feds}
    for fed in feds:
        header = _header(part[fed])
        assert header == ["IMML", "Start", "FL"] + [f"{fed} · {m}" for m in ("Hits@1", "Hits@3", "Hits@10", "MRR")]
        assert len(_rows(part[fed])) == 2 + 4 * 2 * 5

    def cell(fed: str, metric: str, *labels: str) -> str:
        return _row(part[fed], *labels)[_header(part[fed]).index(f"{fed} · {metric}")]

    # the bounds come first with a "-" imputer and start; paper values as printed in the paper
    assert cell("FB15K-237-Fed3", "MRR", "-", "-", "S-Ind").endswith(" (0.338)")
    assert cell("FB15K-237-Fed10", "Hits@10", "-", "-", "MMCen-weighted").endswith(" (0.629)")
    # the paper's HidE rows start from FedE (Sec. IV-A), its other imputers cold
    assert cell("FB15K-237-Fed5", "Hits@1", "HidE", "FedE", "MMFedE").endswith(" (0.252)")
    assert cell("FB15K-237-Fed3", "MRR", "HidE", "FedE", "MMFeD3").endswith(" (0.387)")
    assert not cell("FB15K-237-Fed3", "MRR", "HidE", "cold", "MMFeD3").endswith(")")
    assert cell("FB15K-237-Fed3", "MRR", "AE", "cold", "MMFeD3").endswith(" (0.293)")
    # our number: mean over the three seeds, three decimals, unscaled like the paper
    params = {"algorithm.imputer": "cra", "algorithm.pretrained": "fede", "algorithm.name": "mmfedlu",
              "partition.num_clients": 5}
    want = statistics.mean(_fake_metrics(params, s)["test/mrr"] for s in (0, 1, 2))
    got = cell("FB15K-237-Fed5", "MRR", "CRA", "FedE", "MMFedLU")
    assert got.split(" ±")[0].split(" (")[0].strip("*<u>/") == f"{want:.3f}"


@pytest.mark.parametrize("name", ["mmfed3_table4", "mmfed3_table6"])
def test_ablation_tables_render_with_paper_columns(tmp_path, name):
    suite = load_suite(name)
    (stem, md), = write_suite_tables(suite, fake_records(suite, "tiny"), "tiny", str(tmp_path))
    header = _header(md)
    assert not any(h.endswith("(paper)") for h in header)
    assert sum(c.endswith(")") for row in _rows(md) for c in row) >= 12  # the paper's numbers, in our cells
    if name == "mmfed3_table4":
        # 3 key + 12 metric columns would exceed 14: one table per modality setting (split_wide)
        parts = {heading: _section(md, heading) for heading in ("S + rD", "S + rV", "S + rD + rV")}
        for heading, part in parts.items():
            assert _header(part) == ["r", "Model", "MM Partitioned", *(f"{heading} · {m}" for m in
                                                                       ("Hits@1", "Hits@3", "Hits@10", "MRR"))]
        assert _row(parts["S + rD"], "100%", "MMFedE", "✗")[6].endswith(" (0.369)")
        assert _row(parts["S + rD + rV"], "100%", "MMFedE", "✓")[3].endswith(" (0.237)")
        assert _row(parts["S + rV"], "50%", "MMFeD3-HidE", "✗")[4].endswith(" (0.442)")
    else:
        assert _row(md, "S-Ind", "-")[header.index("FB15K-237-Fed5 · MRR")].endswith(" (0.325)")
        assert _row(md, "MMCen", "Split")[header.index("FB15K-237-Fed10 · Hits@1")].endswith(" (0.228)")
        assert len([line for line in md.splitlines() if line.startswith("|")][2:]) == 16


def test_figure_suite_tables_render(tmp_path):
    for name in FIGURE_SUITES:
        suite = load_suite(name)
        written = write_suite_tables(suite, fake_records(suite, "tiny"), "tiny", str(tmp_path))
        assert written and all("(paper)" not in _header(md) for _, md in written)
    assert len(write_suite_tables(load_suite("mmfed3_fig7"), fake_records(load_suite("mmfed3_fig7"), "tiny"),
                                  "tiny", str(tmp_path))) == 4


@pytest.mark.parametrize("name", [*FIGURE_SUITES, "mmfed3_table3"])
def test_suite_figures_are_written(tmp_path, name):
    suite = load_suite(name)
    paths = write_suite_plots(suite, fake_records(suite, "tiny"), "tiny", str(tmp_path))
    assert paths and {p.suffix for p in paths} == {".png", ".pdf"}
    for p in paths:
        assert Path(p).stat().st_size > 1000, p


def test_server_client_curves_fall_back_to_the_single_model_curve(tmp_path):
    from benchmark.report.kg_figures import server_client_curves

    suite = load_suite("mmfed3_fig5")
    records = fake_records(suite, "tiny")
    for r in records:
        r["curves"].pop("val_server/mrr", None)
    out = server_client_curves(records, out_stem=tmp_path / "f5")
    assert all(p.is_file() for p in out)
    with pytest.raises(ConfigError, match="curves"):
        server_client_curves(records, metric="auc", out_stem=tmp_path / "none")


# --------------------------------------------------------------------------------------------
# real data paths


def test_table2_statistics_from_built_federations(tmp_path):
    """Table II at tiny scale: the partition splits every pooled triple once, so mean triples x
    clients is the dataset size and mean relations x clients its relation count."""
    suite = load_suite("mmfed3_table2")
    suite.spec["base"]["output.cache_dir"] = str(tmp_path / "cache")
    records, built = run_stats_suite(suite, "tiny", tmp_path / "results")
    assert built == 3 and all(r.status == "ok" for r in records)
    from benchmark.registry import DATASETS

    ds = DATASETS.get("synthetic_kg")(DATASETS.get("synthetic_kg").Config(num_entities=200)).load()
    for r in records:
        c = r.params["partition.num_clients"]
        m = r.metrics
        assert m["stats/clients"] == c
        assert m["stats/mean_triples"] * c == pytest.approx(ds.num_triples)
        assert m["stats/mean_relations"] * c == pytest.approx(ds.num_relations)
        assert 0 < m["stats/mean_entities"] <= ds.num_entities and -1 <= m["stats/s_v"] <= 1
    assert run_stats_suite(suite, "tiny", tmp_path / "results")[1] == 0  # resumable: nothing left to build
    (stem, md), = write_suite_tables(suite, records, "tiny", str(tmp_path))
    header = _header(md)
    assert "mean entities" in header and "S_d" in header
    assert _row(md, "FB15K-237-Fed10")[header.index("mean entities")].endswith(" (8340.1)")
    assert _row(md, "FB15K-237-Fed3")[header.index("S_d")] == "— (0.508)"  # synthetic text has no strings
    body = [line for line in md.splitlines() if line.startswith("|")]
    assert not any("**" in line or "<u>" in line for line in body)  # emphasis: false (largest is not best)
    assert "Best per column" not in md


def test_modality_subsets_drop_items_before_partition():
    from data_prep.kg.build import select_modalities
    from benchmark.registry import DATASETS, load_plugins

    load_plugins()
    ds = DATASETS.get("synthetic_kg")(DATASETS.get("synthetic_kg").Config(num_entities=60)).load()
    assert ds.modalities == ["text", "image"]
    assert select_modalities(ds, "all") is ds
    assert select_modalities(ds, "visual").modalities == ["image"]
    only_text = select_modalities(ds, "text")
    assert only_text.modalities == ["text"] and only_text.fingerprint() != ds.fingerprint()
    assert select_modalities(ds, "text+visual").modalities == ["text", "image"]
    with pytest.raises(ConfigError, match="numeric"):
        select_modalities(ds, "text+numeric")
    with pytest.raises(ConfigError):
        build_run_config({"dataset": {"name": "synthetic_kg"}, "partition": {"name": "relation_id"},
                          "missing": {"name": "kg_items", "modalities": "text++image"},
                          "task": {"name": "kg_completion"}, "algorithm": {"name": "s_ind"}})


def test_one_table3_cell_end_to_end_records_server_and_client_curves(tmp_path):
    """MMFeD3-HidE from the FedE stage on the tiny synthetic KG through the sweep: a finished
    record whose curves carry the server view's validation MRR each round (the engine's
    extra-split history) and that names its stage, rendered into Table III's row next to the
    paper's number."""
    suite = load_suite("mmfed3_table3")
    suite.grids = [{"algorithm.imputer": ["hide"], "algorithm.pretrained": ["fede"], "algorithm.name": ["mmfed3"],
                    "partition.num_clients": [3]}]
    suite.seeds = [0]
    over = {"train.rounds": 3, "algorithm.pretrain_rounds": 2, "output.cache_dir": str(tmp_path / "cache"),
            "output.checkpoint_dir": str(tmp_path / "ckpt")}
    records, ran = run_suite(suite, "tiny", results_dir=tmp_path / "results", progress=False, overrides=over)
    assert ran == 1
    (rec,) = records
    assert rec.status == "ok", rec.error
    curves = rec.curves
    assert len(curves["round"]) == len(curves["val/mrr"]) == len(curves["val_server/mrr"]) == 3
    assert all(isinstance(v, float) and 0 < v <= 1 for v in curves["val_server/mrr"])
    assert not math.isnan(rec.metrics["test/mrr"])
    assert rec.pretraining["algorithm"] == "fede" and rec.pretraining["rounds_run"] == 2
    (stem, md), = write_suite_tables(suite, records, "tiny", str(tmp_path))
    header = _header(md)
    row = _row(md, "HidE", "FedE", "MMFeD3")
    ours, paper = row[header.index("FB15K-237-Fed3 · MRR")].split(" (")
    assert ours.strip("*<u>/°×▽") == f"{rec.metrics['test/mrr']:.3f}" and paper == "0.387)"  # a guard mark may follow


def test_figure8_ticks_carry_the_measured_availability_under_each_rate(tmp_path, monkeypatch):
    from benchmark.report import kg_figures

    suite = load_suite("mmfed3_fig8")
    recs = fake_records(suite, "tiny")
    for r in recs:  # measured share = a third of the rate, as if dealing had thinned it
        rate = float(r["params"]["missing.rate"])
        r["availability"] = {"text": round(rate / 3, 4), "numeric": round(rate / 3 + 0.02, 4)}
    labels: list[list[str]] = []
    real = kg_figures._finish

    def spy(fig, axes, title, out_stem):  # noqa: ANN001, ANN202
        labels.extend([t.get_text() for t in ax.get_xticklabels()] for ax in axes.flat)
        return real(fig, axes, title, out_stem)

    monkeypatch.setattr(kg_figures, "_finish", spy)
    assert write_suite_plots(suite, recs, "tiny", str(tmp_path))
    ticks = {t for panel in labels for t in panel}
    rates = sorted({float(r["params"]["missing.rate"]) for r in recs})
    for rate in rates:
        assert f"{rate:g}\n({rate / 3 + 0.01:.2f})" in ticks
    labels.clear()
    assert write_suite_plots(suite, fake_records(suite, "tiny"), "tiny", str(tmp_path))  # older records: plain ticks
    assert all("\n" not in t for panel in labels for t in panel)
