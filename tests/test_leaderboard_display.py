"""What the leaderboard shows: metric precision and units, the suite tables' display names for
methods and grid values, readable grid headers, and keyboard-sortable headers (string checks
of the rendered page; tests/test_leaderboard.py drives the sorting in a real Chromium)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmark.report.leaderboard import sections as sections_mod
from benchmark.report.leaderboard.columns import Column, columns
from benchmark.report.leaderboard.html_page import render_html, static_dir
from benchmark.report.leaderboard.markdown_page import render_markdown
from benchmark.report.leaderboard.sections import Section, make_section, readable_key
from benchmark.results import ResultStore

sys.path.insert(0, str(Path(__file__).parent))
from test_leaderboard import _record  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
THREE = re.compile(r"^\d+\.\d{3} ± \d+\.\d{3}$")  # a raw metric: mean ± std with three decimals
# MRR seed values of two methods 0.002 apart: the gap a KG table is read for.
KG_MRR = {"mmfed3": (0.2634, 0.2652, 0.2618), "mmfedlu": (0.2611, 0.2630, 0.2597)}


def _kg_record(alg: str, seed: int, mrr: float, *, imputer: str | None = "hide", pretrained: str = "fede",
               clients: int = 3, suite: str = "mmfed3_table3") -> dict[str, Any]:
    params: dict[str, Any] = {"algorithm.name": alg, "partition.num_clients": clients}
    if imputer is not None:
        params.update({"algorithm.imputer": imputer, "algorithm.pretrained": pretrained})
    return {
        "suite": suite, "scale": "tiny", "cell_id": f"{alg}-{imputer}-{clients}", "params": params,
        "seed": seed, "status": "ok", "error": None,
        "metrics": {"test/mrr": mrr, "test/hits@1": mrr - 0.1, "test/hits@3": mrr + 0.1, "test/hits@10": mrr + 0.3},
        "per_client": {"test/mrr": [mrr - 0.01, mrr + 0.01]}, "client_sizes": [5, 5],
        "bytes_per_round": 1e4, "seconds_per_round": 0.1234 + 0.01 * seed,
        "config": {"task": {"name": "kg_completion"}, "dataset": {"name": "synthetic_kg"},
                   "missing": {"name": "kg_items", "rate": 0.5}},
        "provenance": {"artifact_hash": f"a{seed}", "artifact_recipe": f"r{clients}", "protocol": "p",
                       "git_sha": "2222222222cccc", "git_dirty": False, "config_hash": "c", "versions": {},
                       "device": "cpu"},
        "timestamp": "2025-01-02T00:00:00+00:00",
    }


def _kg_records(suite: str = "mmfed3_table3") -> list[dict[str, Any]]:
    out = [_kg_record(alg, seed, mrr, suite=suite) for alg, values in KG_MRR.items() for seed, mrr in enumerate(values)]
    out += [_kg_record("s_ind", seed, 0.2 + 0.001 * seed, imputer=None, suite=suite) for seed in range(3)]
    return out


def _cols(section: Section) -> dict[str, Column]:
    return {c.key: c for c in columns(section)}


def _row(section: Section, alg: str) -> Any:
    return next(r for r in section.rows if r.method == alg)


@pytest.fixture(scope="module")
def kg() -> Section:
    """A section of the mmfed3_table3 suite (its real YAML: three row keys, raw KG metrics)."""
    section = make_section("mmfed3_table3", "tiny", _kg_records())
    assert section is not None
    return section


# -- precision and units -----------------------------------------------------------------------


def test_raw_kg_metrics_show_three_decimals_and_no_percent(kg: Section) -> None:
    cols = _cols(kg)
    mrr = cols["test/mrr"]
    assert mrr.label == "MRR", "a raw metric's header carries no (%)"
    texts = {alg: mrr.text(_row(kg, alg)) for alg in KG_MRR}
    assert texts == {"mmfed3": "0.263 ± 0.002", "mmfedlu": "0.261 ± 0.002"}, texts
    assert all(THREE.match(cols[f"test/{m}"].text(_row(kg, "mmfed3"))) for m in ("hits@1", "hits@3", "hits@10"))
    # The primary metric's derived columns are in its units and precision too.
    assert "(%)" not in cols["worst"].label and THREE.match(cols["worst"].text(_row(kg, "mmfed3")))
    assert "raw value" in mrr.hint


def test_percent_metrics_keep_two_decimals_and_say_percent_in_the_header() -> None:
    recs = [_record("fedavg", 0.0, seed, 0.7 + 0.01 * seed) for seed in (0, 1)]
    section = make_section("demo", "tiny", recs)
    assert section is not None
    cols = _cols(section)
    acc = cols["test/accuracy"]
    assert acc.label == "Accuracy (%)" and acc.text(section.rows[0]) == "70.50 ± 0.71"
    assert cols["auc"].label == "Robust. AUC (%)" and cols["worst"].label == "Worst client (%)"
    assert "(%)" not in cols["seconds"].label and cols["seconds"].text(section.rows[0]) == "0.015"


def test_suite_metric_decimals_and_cost_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """metric_decimals wins over the default three (s/round too); a cost metric a table lists is
    read from the records and is never a percentage, listed in raw_metrics or not."""
    spec = {"table": {"rows": "algorithm.name", "metrics": ["mrr", "seconds_per_round", "peak_memory_mb"],
                      "raw_metrics": ["mrr"], "metric_decimals": {"seconds_per_round": 2}}}
    monkeypatch.setattr(sections_mod, "suite_spec", lambda name: spec)
    recs = _kg_records("custom")
    for r in recs:
        r["peak_memory_mb"] = 512.25
    section = make_section("custom", "tiny", recs)
    assert section is not None
    cols, row = _cols(section), _row(section, "mmfed3")
    assert cols["test/seconds_per_round"].text(row) == "0.13 ± 0.01" and cols["seconds"].text(row) == "0.13"
    assert cols["test/peak_memory_mb"].text(row) == "512.250 ± 0.000"
    assert "(%)" not in cols["test/seconds_per_round"].label + cols["test/peak_memory_mb"].label
    assert THREE.match(cols["test/mrr"].text(row))


def test_committed_kg_store_shows_mrr_at_three_decimals() -> None:
    path = ROOT / "results" / "mmfed3_table3" / "small.jsonl"
    if not path.is_file():
        pytest.skip("no committed mmfed3_table3 store")
    section = make_section("mmfed3_table3", "small", ResultStore(path).read())
    assert section is not None
    cols = _cols(section)
    shown = [cols["test/mrr"].text(r) for r in section.rows if r.ok]
    assert shown and all(re.match(r"^\d\.\d{3}( ± \d\.\d{3})?$", t) for t in shown), shown[:5]
    methods = {cols["method"].text(r) for r in section.rows}
    assert "MMFeD3" in methods and not methods & {"mmfed3", "mmfedlu", "s_ind"}, methods


def test_rows_of_a_setting_the_suite_no_longer_runs_are_superseded() -> None:
    """mmfed3_fig8 keeps the records it was first made with, when HidE's pre-training was a
    share of the rounds (``algorithm.pretrain_share``); the suite now starts from a FedE stage
    (``algorithm.pretrained``). Those rows are superseded, not listed as current runs, and the
    current rows are exactly the suite's cells."""
    path = ROOT / "results" / "mmfed3_fig8" / "small.jsonl"
    section = make_section("mmfed3_fig8", "small", ResultStore(path).read())
    assert section is not None
    current = [r for r in section.rows if r.current]
    old = [r for r in section.rows if not r.current]
    assert len(current) == 36 and all("algorithm.pretrain_share" not in r.params for r in current)
    assert any("algorithm.pretrain_share" in r.params for r in old)
    live = sections_mod.suite_settings("mmfed3_fig8", "small")
    assert live is not None and {sections_mod._setting(r.params) for r in current} == live


# -- display names -----------------------------------------------------------------------------


def test_kg_methods_and_grid_values_take_the_tables_labels(kg: Section) -> None:
    """mmfed3_table3 has rows [imputer, pretrained, name] and one row_labels mapping for all."""
    cols = _cols(kg)
    assert cols["method"].text(_row(kg, "mmfed3")) == "MMFeD3"
    assert cols["method"].text(_row(kg, "mmfedlu")) == "MMFedLU"
    assert cols["method"].text(_row(kg, "s_ind")) == "S-Ind"
    assert cols["method"].sort(_row(kg, "mmfed3")) == "mmfed3", "sorting keeps the registry name"
    # only the algorithm names' labels are method labels ('none: cold' labels a start, not a method)
    assert set(kg.labels) == {"mmfed3", "mmfedlu", "s_ind"}
    imputer, start = cols["param:algorithm.imputer"], cols["param:algorithm.pretrained"]
    assert imputer.text(_row(kg, "mmfed3")) == "HidE" and start.text(_row(kg, "mmfed3")) == "FedE"
    assert imputer.sort(_row(kg, "mmfed3")) == "hide"
    md = render_markdown([kg], "mmfed3_table3")
    page = render_html([kg], "test")
    for text in (md, page):
        assert "MMFeD3" in text and "HidE" in text and "0.263 ± 0.002" in text
    assert not re.search(r"\| mmfed3 +\|", md), "no markdown row names a method by its registry name"
    # the cell sorts by the registry name; its column is its header's (the script sets data-col)
    assert '<td data-sort="mmfed3">MMFeD3<' in page


def test_labels_come_from_every_table_of_a_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"tables": [{"rows": "partition.num_clients", "metrics": ["mrr"], "raw_metrics": ["mrr"],
                        "row_labels": {"mmfed3": "not a method label here"}},
                       {"rows": ["algorithm.imputer", "algorithm.name"], "metrics": ["mrr"],
                        "row_labels": {"mmfed3": "MMFeD3", "hide": "HidE"}}]}
    monkeypatch.setattr(sections_mod, "suite_spec", lambda name: spec)
    section = make_section("custom", "tiny", _kg_records("custom"))
    assert section is not None
    cols = _cols(section)
    assert cols["method"].text(_row(section, "mmfed3")) == "MMFeD3"
    assert cols["param:algorithm.imputer"].text(_row(section, "mmfed3")) == "HidE"
    assert THREE.match(cols["test/mrr"].text(_row(section, "mmfed3"))), "raw_metrics of any table count"


# -- readable headers --------------------------------------------------------------------------


def test_grid_headers_are_readable_and_keep_the_key_in_the_hint(kg: Section) -> None:
    cols = _cols(kg)
    clients = cols["param:partition.num_clients"]
    assert clients.label == "Clients" and "partition.num_clients" in clients.hint
    assert clients.text(_row(kg, "mmfed3")) == "3" and clients.numeric
    # the suite's key_labels win where they exist (mmfed3_table3 calls the imputer IMML)
    assert cols["param:algorithm.imputer"].label == "IMML"
    assert cols["param:algorithm.pretrained"].label == "Start"
    page = render_html([kg], "test")
    assert re.search(r'<th [^>]*data-key="param:partition.num_clients"[^>]*'
                     r'title="grid parameter partition.num_clients; [^"]*">Clients</th>', page)
    assert ">partition.num_clients<" not in page
    md = render_markdown([kg], "mmfed3_table3")
    assert "| Clients " in md and re.search(r"Grid parameter columns: .*Clients = partition.num_clients[;.]", md)


@pytest.mark.parametrize(("key", "label"), [
    ("partition.num_clients", "Clients"), ("train.rounds", "Rounds"), ("train.lr", "Learning rate"),
    ("train.local_epochs", "Local epochs"), ("algorithm.imputer", "Imputer"), ("missing.rate", "Missing rate"),
    ("algorithm.sync_client", "Sync client"), ("setting", "Setting"),
])
def test_readable_key(key: str, label: str) -> None:
    assert readable_key(key) == label


def test_a_key_label_that_names_another_column_is_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"table": {"rows": "partition.num_clients", "key_labels": {"partition.num_clients": "Dataset"},
                      "metrics": ["mrr"]}}
    monkeypatch.setattr(sections_mod, "suite_spec", lambda name: spec)
    section = make_section("custom", "tiny", _kg_records("custom"))
    assert section is not None
    labels = [c.label for c in columns(section)]
    assert "Dataset (Clients)" in labels and labels.count("Dataset") == 1


# -- keyboard sorting and the page's rules -----------------------------------------------------


def test_headers_are_focusable_sortable_and_the_rules_name_the_units(kg: Section) -> None:
    page = render_html([kg], "test")
    heads = re.findall(r"<th [^>]*>", page)
    assert heads and all('tabindex="0"' in h and 'role="columnheader"' in h and 'aria-sort="none"' in h
                         and 'aria-describedby="sort-help"' in h for h in heads)
    assert re.search(r'<p id="sort-help" class="visually-hidden">[^<]*Enter or Space', page)
    js = (static_dir() / "leaderboard.js").read_text(encoding="utf-8")
    assert '"keydown"' in js and 'e.key === "Enter"' in js and 'e.key === " "' in js and "preventDefault" in js
    assert 'setAttribute("aria-sort", dir)' in js
    css = (static_dir() / "leaderboard.css").read_text(encoding="utf-8")
    assert re.search(r"th:focus-visible\s*\{[^}]*outline:\s*\d+px solid", css)
    # The rules no longer call every metric a percentage.
    assert "over seeds, in percent" not in page and "a header marked (%) is in percent" in page
    md = render_markdown([kg], "mmfed3_table3")
    assert "(percent unless raw)" not in md and "a header marked (%) is in percent" in md
