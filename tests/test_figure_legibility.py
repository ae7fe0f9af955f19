"""Figures a reader can read: robustness curves of bunched methods are told apart (direct labels
that never overlap, or small multiples), thin stacked segments get panels of their own scale,
the COT figure draws the weighted COT the table reports, and leaderboard titles use the suite
table's display labels instead of raw ``key=value`` pairs."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.text import Text

import benchmark.report.robustness_figure as robustness_figure
import benchmark.report.stacked_figure as stacked
from benchmark.errors import ConfigError, DataError
from benchmark.report.robustness_figure import robustness_plot, spread_positions
from benchmark.report.stacked_figure import stack_means, stacked_bars, zoom_parts

ROOT = Path(__file__).resolve().parents[1]


def capture(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Any]:
    """The figures ``module`` saves, drawn (so text extents are final) after the real save."""
    figs: list[Any] = []
    real = module._save

    def save(fig: Any, stem: Any) -> list[Path]:
        paths = real(fig, stem)
        fig.canvas.draw()
        figs.append(fig)
        return paths

    monkeypatch.setattr(module, "_save", save)
    return figs


def _overlap(a: Any, b: Any) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


# ---------------------------------------------------------------- robustness curves

def rob_record(alg: str, rate: float, seed: int, acc: float, status: str = "ok") -> dict[str, Any]:
    ok = status == "ok"
    return {"suite": "s", "scale": "tiny", "cell_id": f"{alg}-{rate}", "seed": seed, "status": status,
            "params": {"algorithm.name": alg, "missing.rate": rate},
            "error": None if ok else {"round": 1, "reason": "NaN loss"},
            "metrics": {"test/accuracy": acc} if ok else {}, "provenance": {"artifact_recipe": "r", "protocol": "p"},
            "timestamp": "2024-05-01T00:00:00"}


def bunched(n: int, rates: tuple[float, ...] = (0.3, 0.4, 0.5, 0.6, 0.7)) -> list[dict[str, Any]]:
    """``n`` methods whose means lie within a few hundredths of a point of each other near 20%,
    with seed spreads of 2 points (the fedmpo_table2 complaint): their line ends coincide."""
    return [rob_record(f"m{i}", r, s, 0.20 + 0.0001 * i - 0.02 * r + 0.02 * (s - 1))
            for i in range(n) for r in rates for s in range(3)]


@pytest.mark.parametrize("wanted", [[0.0, 0.1, 0.2, 0.3, 0.4], [5.0, 1.0, 1.0, 1.0, 9.0], [3.0, 3.0]])
def test_spread_positions_keep_the_gap_and_the_order(wanted):
    placed = spread_positions(wanted, 1.0)
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    gaps = [placed[b] - placed[a] for a, b in itertools.pairwise(order)]
    assert min(gaps) >= 1.0 - 1e-9  # never closer than the gap, in the wanted order
    assert statistics.mean(placed) == pytest.approx(statistics.mean(wanted))  # least squares: no drift


def test_spread_positions_move_nothing_that_is_apart_and_stay_in_bounds():
    assert spread_positions([0.0, 2.0, 5.0], 1.0) == [0.0, 2.0, 5.0]
    placed = spread_positions([9.9, 9.9, 9.9], 1.0, lo=0.0, hi=10.0)
    assert max(placed) <= 10.0 and sorted(placed) == pytest.approx([8.0, 9.0, 10.0])
    assert min(spread_positions([0.0, 0.0], 1.0, lo=0.0, hi=10.0)) == 0.0


def test_five_bunched_methods_get_direct_labels_that_do_not_overlap(tmp_path, monkeypatch):
    figs = capture(monkeypatch, robustness_figure)
    labels = {f"m{i}": f"Method {i}" for i in range(5)}
    paths = robustness_plot(bunched(5), "missing.rate", "accuracy", out_stem=tmp_path / "r", hue_labels=labels)
    assert paths[0].stat().st_size > 5000
    fig = figs[0]
    ax = fig.axes[0]
    assert len(fig.axes) == 1 and ax.get_legend() is None  # one panel, labelled at the line ends
    texts = [t for t in ax.texts if t.get_text() in labels.values()]
    assert sorted(t.get_text() for t in texts) == sorted(labels.values())
    renderer = fig.canvas.get_renderer()
    boxes = [Text.get_window_extent(t, renderer) for t in texts]  # the words, not their leader lines
    for a, b in itertools.combinations(boxes, 2):
        assert not _overlap(a, b), "two direct labels overlap"
    axes_box = ax.get_window_extent(renderer)
    assert all(b.x0 >= axes_box.x1 for b in boxes)  # in the margin, right of every line end
    assert all(axes_box.y0 - 1 <= (b.y0 + b.y1) / 2 <= axes_box.y1 + 1 for b in boxes)
    lines = [line for line in ax.lines if line.get_label() in labels.values()]
    styles = {(line.get_marker(), line.get_linestyle()) for line in lines}
    assert len(lines) == 5 and len(styles) == 5  # each curve its own marker and line style
    assert all(c.get_alpha() <= 0.12 for c in ax.collections)  # light bands


def test_many_bunched_methods_become_small_multiples(tmp_path, monkeypatch):
    figs = capture(monkeypatch, robustness_figure)
    robustness_plot(bunched(12), "missing.rate", "accuracy", out_stem=tmp_path / "r",
                    hue_order=[f"m{i}" for i in range(12)])
    fig = figs[0]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 12
    assert [ax.get_title() for ax in panels] == [f"m{i}" for i in range(12)]
    assert len({ax.get_ylim() for ax in panels}) == 1  # one scale: heights compare across panels
    for ax in panels:  # one series in colour with its band, the eleven others in grey behind it
        assert len(ax.lines) == 12 and len(ax.collections) == 1
        greys = [line for line in ax.lines if line.get_color() == robustness_figure._CONTEXT_GREY]
        assert len(greys) == 11 and all(line.get_zorder() < 3 for line in greys)


def test_layout_is_checked_and_can_be_forced(tmp_path, monkeypatch):
    figs = capture(monkeypatch, robustness_figure)
    with pytest.raises(ConfigError, match="layout"):
        robustness_plot(bunched(3), "missing.rate", "accuracy", out_stem=tmp_path / "x", layout="grid")
    robustness_plot(bunched(3), "missing.rate", "accuracy", out_stem=tmp_path / "f", layout="facets")
    robustness_plot(bunched(12), "missing.rate", "accuracy", out_stem=tmp_path / "l", layout="lines")
    assert len([ax for ax in figs[0].axes if ax.get_visible()]) == 3
    assert len(figs[1].axes) == 1 and len([t for t in figs[1].axes[0].texts if t.get_text().startswith("m")]) == 12


def test_a_method_with_no_successful_point_is_named_not_dropped(tmp_path, monkeypatch):
    figs = capture(monkeypatch, robustness_figure)
    recs = bunched(2) + [rob_record("dead", r, 0, 0.0, status="failed") for r in (0.3, 0.5)]
    robustness_plot(recs, "missing.rate", "accuracy", out_stem=tmp_path / "r")
    texts = " ".join(t.get_text() for t in figs[0].axes[0].texts)
    assert "dead (failed at rate=0.3, 0.5)" in texts


# ---------------------------------------------------------------- stacked cost bars

WEIGHTS = {"download_s": 0.46, "upload_s": 0.46, "server_s": 0.08}


def cost_record(alg: str, seed: int, client: float, down: float, up: float, server: float) -> dict[str, Any]:
    """A record whose stages vary over 3 rounds, so the median of the weighted per-round COT
    (the record's cot_s, as benchmark/cost.py computes it) is not the weighted stage medians."""
    rounds = {"download_s": [down, down * 1.3, down * 0.8], "upload_s": [up * 1.2, up, up * 0.7],
              "server_s": [server * 0.9, server * 1.4, server]}
    cot = [sum(WEIGHTS[k] * rounds[k][i] for k in WEIGHTS) for i in range(3)]
    cost = {k: statistics.median(v) for k, v in rounds.items()}
    cost.update(client_s=client, other_s=0.0001, cot_s=statistics.median(cot), cot_weights=dict(WEIGHTS),
                rounds={**rounds, "cot_s": cot})
    return {"suite": "s", "scale": "tiny", "cell_id": alg, "params": {"algorithm.name": alg}, "seed": seed,
            "status": "ok", "error": None, "metrics": {"test/accuracy": 0.5}, "cost": cost,
            "provenance": {"artifact_recipe": "r", "protocol": "p"}, "timestamp": "2024-05-01T00:00:00"}


def cost_records() -> list[dict[str, Any]]:
    out = []
    for i, alg in enumerate(("local", "distill", "bridge")):
        for s in range(3):
            out.append(cost_record(alg, s, client=0.2 + 0.05 * s, down=1e-5 * (i + 1) * (1 + 0.1 * s),
                                   up=3e-5 * (1 + 0.2 * i), server=5e-4 * 10 ** i * (1 + 0.05 * s)))
    return out


COT_PARTS = ["download_ms", "upload_ms", "server_ms"]


def test_cot_bars_are_the_records_weighted_cot(tmp_path):
    recs = cost_records()
    table = stack_means(recs, COT_PARTS, weights="cost.cot_weights", total="cot_ms")
    for alg in ("local", "distill", "bridge"):
        row = table[table["algorithm.name"] == alg].iloc[0]
        cots = [r["cost"]["cot_s"] * 1000 for r in recs if r["params"]["algorithm.name"] == alg]
        assert row["total"] == pytest.approx(np.mean(cots), rel=1e-12)
        assert row["total_std"] == pytest.approx(np.std(cots, ddof=1), rel=1e-9)
        assert sum(row[p] for p in COT_PARTS) == pytest.approx(row["total"], rel=1e-12)  # segments add up
        weighted = [WEIGHTS[k] * np.mean([r["cost"][k] for r in recs if r["params"]["algorithm.name"] == alg])
                    for k in WEIGHTS]
        assert row["server_ms"] / row["download_ms"] == pytest.approx(weighted[2] / weighted[0], rel=0.05)
    assert table.attrs["weights"] == {"download_ms": 0.46, "upload_ms": 0.46, "server_ms": 0.08}
    unweighted = stack_means(recs, COT_PARTS)
    assert (unweighted["total"] > 5 * table["total"]).all()  # the old figure's sum was no COT


def test_weights_must_be_stated_and_agree(tmp_path):
    recs = cost_records()
    recs[0]["cost"]["cot_weights"] = {"download_s": 0.5, "upload_s": 0.5, "server_s": 0.0}
    with pytest.raises(DataError, match="cot_weights"):
        stack_means(recs, COT_PARTS, weights="cost.cot_weights")
    with pytest.raises(ConfigError, match="server_ms"):
        stack_means(cost_records(), COT_PARTS, weights={"download_ms": 0.5, "upload_s": 0.5})
    assert stack_means(cost_records(), COT_PARTS, weights={"download_ms": 2, "upload_s": 1, "server_ms": 1}
                       ).attrs["weights"]["download_ms"] == 2.0


def test_cot_figure_states_the_weights_and_zooms_on_the_communication_stages(tmp_path, monkeypatch):
    figs = capture(monkeypatch, stacked)
    recs = cost_records()
    stacked_bars(recs, COT_PARTS, out_stem=tmp_path / "cot", weights="cost.cot_weights", total="cot_ms",
                 part_labels={"download_ms": "Download", "upload_ms": "Upload", "server_ms": "Server"},
                 title="COT", decimals=3)
    fig = figs[0]
    main, *zoomed = fig.axes
    assert len(zoomed) == 2  # download and upload are under a tenth of the tallest bar: panels of their own
    assert [ax.get_title().split("\n")[0] for ax in zoomed] == ["0.46 × Download", "0.46 × Upload"]
    assert "bar = 0.46 × Download + 0.46 × Upload + 0.08 × Server" in fig._suptitle.get_text()
    legend = [t.get_text() for t in main.get_legend().get_texts()]
    assert legend == ["0.46 × Download", "0.46 × Upload", "0.08 × Server"]
    table = stack_means(recs, COT_PARTS, weights="cost.cot_weights", total="cot_ms")
    shown = sorted(t.get_text() for t in main.texts)
    assert shown == sorted(f"{v:.3f}" for v in table["total"])  # bar ends: the mean weighted COT
    ends = [p.get_x() + p.get_width() for p in main.patches[-3:]]
    assert ends == pytest.approx(table["total"].tolist())
    for ax, part in zip(zoomed, ("download_ms", "upload_ms")):  # each zoom fills its own axis
        assert ax.get_xlim()[1] < main.get_xlim()[1] / 5
        assert max(p.get_width() for p in ax.patches) >= 0.6 * ax.get_xlim()[1]
        assert [p.get_width() for p in ax.patches] == pytest.approx(table[part].tolist())


def test_zoom_picks_thin_parts_and_leaves_readable_stacks_alone(tmp_path, monkeypatch):
    recs = cost_records()
    table = stack_means(recs, ["client_ms", *COT_PARTS])
    assert zoom_parts(table, ["client_ms", *COT_PARTS], "auto") == ["download_ms", "upload_ms"]  # server: 17%
    assert zoom_parts(table, ["client_ms", *COT_PARTS], "none") == []
    with pytest.raises(ConfigError, match="zoom"):
        zoom_parts(table, COT_PARTS, ["client_ms"])
    figs = capture(monkeypatch, stacked)
    stacked_bars(recs, ["client_ms"], out_stem=tmp_path / "one")  # one part: nothing to zoom
    stacked_bars(recs, ["client_ms", *COT_PARTS], out_stem=tmp_path / "all", zoom=None)
    assert [len(f.axes) for f in figs] == [1, 1]


def test_the_cost_suite_draws_the_tables_cot(tmp_path, monkeypatch):
    """The committed fedmbridge_cost store through the suite's own plot spec: every COT bar is
    the COT the table prints (mean over seeds of the records' cot_s), and the round breakdown
    gives the four thin stages panels of their own."""
    from benchmark.report.records import load_records
    from benchmark.report.suite_plots import suite_plots
    from benchmark.report.tables import make_table
    from benchmark.sweep import load_suite

    store = ROOT / "results" / "fedmbridge_cost" / "small.jsonl"
    if not store.is_file():
        pytest.skip("no fedmbridge_cost small store")
    suite = load_suite("fedmbridge_cost")
    records = load_records(store)
    figs = capture(monkeypatch, stacked)
    suite_plots("fedmbridge_cost", suite.spec["plots"], records, tmp_path / "cost")
    by_name = dict(zip((p["name"] for p in suite.spec["plots"]), figs))
    cot = make_table(records, {"rows": "algorithm.name", "metrics": ["cot_s"]}).frame.set_index("algorithm.name")
    table_cot_ms = sorted(float(m) * 1000 for m in cot["mean"])
    main = by_name["cot_breakdown"].axes[0]
    n = len(table_cot_ms)
    drawn = sorted(p.get_x() + p.get_width() for p in main.patches[-n:])
    assert drawn == pytest.approx(table_cot_ms, rel=1e-9)
    assert "0.46 × Download + 0.46 × Upload + 0.08 × Server" in by_name["cot_breakdown"]._suptitle.get_text()
    assert len(by_name["round_breakdown"].axes) == 5 and len(by_name["server_memory"].axes) == 1


# ---------------------------------------------------------------- leaderboard titles

def lb_record(alg: str, rate: float, alpha: float, seed: int) -> dict[str, Any]:
    return {
        "suite": "fedmpo_table2", "scale": "tiny", "cell_id": f"{alg}-{rate}-{alpha}",
        "params": {"algorithm.name": alg, "missing.rate": rate, "partition.alpha": alpha},
        "seed": seed, "status": "ok", "error": None,
        "metrics": {"test/accuracy": 0.5 - 0.1 * rate + 0.01 * seed}, "client_sizes": [10, 10],
        "config": {"task": {"name": "node_cls"}, "dataset": {"name": "synthetic"},
                   "missing": {"name": "node_level", "rate": rate}},
        "provenance": {"artifact_recipe": f"r{rate}{alpha}", "protocol": "p", "git_sha": "1111111111",
                       "config_hash": "c", "device": "cpu"},
        "timestamp": "2025-01-02T00:00:00+00:00",
    }


def test_leaderboard_titles_use_the_suite_tables_labels(tmp_path, monkeypatch):
    from benchmark.report.leaderboard.figures import plot_sections
    from benchmark.report.leaderboard.sections import make_section

    records = [lb_record(a, r, 0.5, s) for a in ("fedavg", "fedmpo") for r in (0.3, 0.5) for s in (0, 1)]
    records += [lb_record(a, 0.3, 0.1, s) for a in ("fedavg", "fedmpo") for s in (0, 1)]  # one rate: no curve
    sec = make_section("fedmpo_table2", "tiny", records)
    figs = capture(monkeypatch, robustness_figure)
    plot_sections([sec], tmp_path)
    assert [title for title, _ in sec.figures] == ["fedmpo_table2 [tiny]: Acc vs missing rate (Dirichlet alpha: 0.5)"]
    fig = figs[0]
    texts = [t.get_text() for ax in fig.axes for t in ax.texts] + [fig.axes[0].get_title()]
    assert "fedmpo_table2 [tiny]: Acc vs missing rate (Dirichlet alpha: 0.5)" in texts
    assert {"FedAvg-Zero", "FedMPO"} <= set(texts)  # the table's row_labels name the curves
    assert not any("=" in t or "partition.alpha" in t for t in texts)


def test_setting_text_takes_key_and_value_labels():
    from benchmark.report.leaderboard.figures import setting_text
    from benchmark.report.leaderboard.sections import Section

    sec = Section(suite="s", scale="tiny", description="", track=None, rows=[], metrics=["auc"], primary="auc",
                  percent={"auc": True}, labels={}, metric_labels={}, extra_params=["setting", "train.lr"],
                  param_labels={"setting": "Dataset stand-in"}, value_labels={"setting": {"ku": "KU (TikTok)"}})
    text = setting_text(sec, {"setting": "ku", "train.lr": 0.01, "dataset.name": "tiktok", "task.name": "lp"})
    assert text == "Dataset stand-in: KU (TikTok), Learning rate: 0.01, Dataset: tiktok, Task: lp"
