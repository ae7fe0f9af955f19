"""Stacked-bar figures (report/stacked_figure.py): the stacked means come from the records,
the figure is written, and the `plot` verb draws the cost breakdown of a real AMFL store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmark.errors import ConfigError, DataError
from benchmark.report.stacked_figure import stack_means, stacked_bars
from benchmark.report.tables import make_table

PARTS = ["client_ms", "server_ms"]


def record(alg: str, seed: int, client_s: float, server_s: float | None, status: str = "ok") -> dict[str, Any]:
    cost = {"client_s": client_s, "download_s": 0.001, "upload_s": 0.002, "other_s": 0.0, "cot_s": 0.0}
    if server_s is not None:
        cost["server_s"] = server_s
    return {
        "suite": "s", "scale": "tiny", "cell_id": alg, "params": {"algorithm.name": alg}, "seed": seed,
        "status": status, "error": None if status == "ok" else {"round": 1, "reason": "NaN"},
        "metrics": {"test/accuracy": 0.5}, "cost": cost, "server_memory_mb": 2.0 * seed,
        "provenance": {"artifact_recipe": "r", "protocol": "p"}, "timestamp": f"2024-05-01T00:00:0{seed}",
    }


def test_stack_means_are_seed_means_of_each_part_and_of_the_total():
    recs = [record("b", 0, 0.010, 0.002), record("b", 1, 0.014, 0.004), record("b", 2, 0.0, 0.0, status="failed"),
            record("a", 0, 0.001, 0.001)]
    table = stack_means(recs, PARTS, hue_order=["b", "a"])
    assert table["algorithm.name"].tolist() == ["b", "a"]
    b = table.iloc[0]
    assert b["client_ms"] == pytest.approx(12.0) and b["server_ms"] == pytest.approx(3.0)
    assert b["total"] == pytest.approx(15.0) and b["n"] == 2  # the failed seed is not averaged
    assert b["total_std"] == pytest.approx(4.242640687, rel=1e-6)  # std of 12 and 18 (ddof 1)
    assert table.iloc[1]["total_std"] == 0.0  # one seed: no spread drawn


def test_a_method_lacking_a_part_is_left_out_not_understated():
    recs = [record("a", 0, 0.01, 0.002), record("old", 0, 0.01, None), record("old", 1, 0.01, 0.003)]
    assert stack_means(recs, PARTS)["algorithm.name"].tolist() == ["a"]
    with pytest.raises(DataError, match="no method has all"):
        stack_means(recs[1:], PARTS)
    with pytest.raises(ConfigError, match="bogus"):
        stack_means(recs, ["client_ms", "bogus"])


def test_stacked_bars_write_png_and_pdf(tmp_path: Path):
    recs = [record(a, s, 0.01 * (i + 1), 0.003) for i, a in enumerate(("a", "b", "c")) for s in range(3)]
    png, pdf = stacked_bars(recs, PARTS, out_stem=tmp_path / "figs" / "cost", part_labels={"client_ms": "Clients"},
                            hue_labels={"a": "Alpha"}, title="cost")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert pdf.read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ConfigError, match="part_labels"):
        stacked_bars(recs, PARTS, out_stem=tmp_path / "bad", part_labels={"upload_ms": "Upload"})


def test_cost_fields_are_table_metrics(tmp_path: Path):
    recs = [record("a", s, 0.010, 0.002 * (s + 1)) for s in range(3)]
    out = make_table(recs, {"rows": "algorithm.name", "metrics": ["server_ms", "server_memory_mb"]})
    means = out.frame.set_index("metric")["mean"]
    assert means["server_ms"] == pytest.approx(4.0)  # 2, 4 and 6 ms
    assert means["server_memory_mb"] == pytest.approx(2.0)  # 0, 2 and 4 MB


def test_plot_verb_draws_the_cost_breakdown_of_an_amfl_store(tmp_path, monkeypatch, capsys):
    from fedmm_bench.cli import main

    monkeypatch.chdir(tmp_path)
    suite = tmp_path / "mini_cost.yaml"
    suite.write_text(yaml.safe_dump({
        "name": "mini_cost", "description": "two AMFL methods, two rounds", "default_scale": "tiny",
        "base": {"task.name": "amfl_cls", "partition.name": "amfl_population", "missing.name": "none",
                 "dataset.name": "av_digits", "partition.num_clients": 4, "partition.samples_mean": 24,
                 "partition.samples_std": 0.0, "train.rounds": 2, "train.local_epochs": 1, "train.device": "cpu"},
        "grid": {"algorithm.name": ["amfl_local", "fedmbridge"]}, "seeds": [0, 1],
        "table": {"rows": "algorithm.name", "metrics": ["cot_s", "server_ms", "client_ms", "server_memory_mb"]},
        "plots": [{"name": "breakdown", "kind": "stacked_bar",
                   "parts": ["client_ms", "download_ms", "upload_ms", "server_ms", "other_ms"]}],
    }))
    assert main(["sweep", str(suite), "--results", "res"]) == 0
    assert main(["plot", str(suite), "--results", "res", "--out", "tab"]) == 0
    assert main(["table", str(suite), "--results", "res", "--out", "tab"]) == 0
    names = sorted(p.name for p in (tmp_path / "tab").iterdir())
    assert names == ["mini_cost_tiny.md", "mini_cost_tiny.tex", "mini_cost_tiny_breakdown.pdf",
                     "mini_cost_tiny_breakdown.png"]
    assert (tmp_path / "tab" / "mini_cost_tiny_breakdown.png").stat().st_size > 5000
    md = (tmp_path / "tab" / "mini_cost_tiny.md").read_text()
    local = next(line for line in md.splitlines() if line.startswith("| Local "))  # the class's display name
    assert local.replace("*", "").replace("°", "").rstrip(" |").endswith(" 0.00 ± 0.00")  # Local's server holds nothing
