"""Leaderboard: provenance grouping, derived columns, and the HTML page in a real headless Chromium."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmark.record import Record
from benchmark.report.leaderboard import build_leaderboard, record_scalars
from benchmark.results import ResultStore

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
BASE_ACC = {"local": 0.50, "fedavg": 0.70, "fedprox": 0.72}


def _record(alg: str, rate: float, seed: int, acc: float, *, dataset: str = "synthetic", recipe: str = "r",
            protocol: str = "p1", sha: str = "1111111111aaaa", ts: str = "2025-01-02T00:00:00+00:00",
            status: str = "ok", suite: str = "demo") -> dict[str, Any]:
    ok = status == "ok"
    return {
        "suite": suite, "scale": "tiny", "cell_id": f"{alg}-{rate}-{seed}-{dataset}",
        "params": {"algorithm.name": alg, "missing.rate": rate, "dataset.name": dataset},
        "seed": seed, "status": status,
        "error": None if ok else {"round": 2, "reason": "NonFiniteLoss: loss is nan"},
        "metrics": {"test/accuracy": acc, "test/macro_f1": acc - 0.1, "val/accuracy": acc} if ok else {},
        "per_client": {"test/accuracy": [acc - 0.2, acc, acc + 0.1]} if ok else {},
        "client_sizes": [10, 10, 10], "bytes_per_round": 0.0 if alg == "local" else 2.5e5,
        "seconds_per_round": 0.01 * (1 + seed),
        "config": {"task": {"name": "node_cls"}, "dataset": {"name": dataset},
                   "missing": {"name": "node_level", "rate": rate}},
        "provenance": {"artifact_hash": f"a{seed}{rate}{dataset}", "artifact_recipe": f"{recipe}{rate}{dataset}",
                       "protocol": protocol, "git_sha": sha, "git_dirty": False, "config_hash": "c",
                       "versions": {"torch": "2.13.0"}, "device": "cpu:x86_64"},
        "timestamp": ts,
    }


def _write_results(root: Path) -> None:
    store = ResultStore(root / "demo" / "tiny.jsonl")
    for dataset, shift in (("synthetic", 0.0), ("other", -0.05)):
        for alg, base in BASE_ACC.items():
            for rate in (0.0, 0.5):
                for seed in (0, 1):
                    store.append(_record(alg, rate, seed, base + shift - 0.2 * rate + 0.01 * seed, dataset=dataset))
    # An older run of one cell under another artifact recipe: must stay a separate, superseded row.
    store.append(_record("fedavg", 0.5, 0, 0.99, recipe="old", sha="0000000000bbbb",
                         ts="2024-06-01T00:00:00+00:00"))
    store.append(_record("fedprox", 0.5, 2, 0.0, status="failed"))
    # The regression references never show up as a suite.
    (root / "reference").mkdir()
    (root / "reference" / "ci.json").write_text("{}")


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("lb")
    _write_results(root / "results")
    return build_leaderboard(root / "results", root / "tables")


def _row(section: Any, alg: str, rate: float, dataset: str = "synthetic", current: bool = True) -> Any:
    return next(r for r in section.rows if r.method == alg and r.rate == rate and r.dataset == dataset
                and r.current == current)


def test_record_scalars_worst_client_and_spread() -> None:
    s = record_scalars(Record.from_dict(_record("fedavg", 0.0, 0, 0.7)))
    assert s["test/accuracy"] == pytest.approx(0.7)
    assert s["worst_client/accuracy"] == pytest.approx(0.5)
    assert s["spread/accuracy"] == pytest.approx(0.1247219, rel=1e-5)  # pstdev of (0.5, 0.7, 0.8)
    assert s["bytes_per_round"] == 2.5e5 and "val/accuracy" not in s


def test_rows_never_average_across_recipes(board: Any) -> None:
    assert [s.suite for s in board.sections] == ["demo"]
    sec = board.sections[0]
    cur = _row(sec, "fedavg", 0.5)
    old = _row(sec, "fedavg", 0.5, current=False)
    assert cur.stats["test/accuracy"].n == 2 and cur.stats["test/accuracy"].mean == pytest.approx(0.605)
    assert old.stats["test/accuracy"].n == 1 and old.stats["test/accuracy"].mean == pytest.approx(0.99)
    assert old.code_versions == ["0000000000"] and cur.code_versions == ["1111111111"]
    failed = _row(sec, "fedprox", 0.5)
    assert (len(failed.ok), len(failed.records)) == (2, 3)


def test_robustness_auc_is_mean_height_of_curve(board: Any) -> None:
    sec = board.sections[0]
    # fedavg on synthetic: 0.705 at rate 0 and 0.605 at rate 0.5 (seed means) -> trapezoid mean 0.655.
    assert _row(sec, "fedavg", 0.0).auc == pytest.approx(0.655)
    assert _row(sec, "fedavg", 0.5).auc == pytest.approx(0.655)
    assert _row(sec, "fedavg", 0.5, current=False).auc != _row(sec, "fedavg", 0.5).auc


def test_markdown_and_figure_written(board: Any) -> None:
    md = board.markdown[0].read_text()
    assert board.markdown[0].name == "leaderboard_demo.md"
    assert "Superseded runs" in md and "0000000000" in md and "Robust. AUC" in md
    assert board.figures and board.figures[0].suffix == ".png"
    page = board.html.read_text()
    assert "data:image/png;base64," in page
    assert not re.search(r"""(src|href)=["']https?://""", page), "the page must not load anything remotely"


def test_a_figure_left_from_an_earlier_page_is_removed(tmp_path: Path) -> None:
    """Rebuilding the leaderboard removes a robustness figure of the same store that this
    build did not draw (a row set that is gone), so no figure on disk outlives its page; other
    stores' figures are left alone."""
    _write_results(tmp_path / "results")
    out = tmp_path / "tables"
    out.mkdir()
    stale = [out / "leaderboard_demo_tiny_robustness_9.png", out / "leaderboard_demo_tiny_robustness_9.pdf"]
    other = out / "leaderboard_demo2_tiny_robustness_0.png"
    for p in (*stale, other):
        p.write_bytes(b"old")
    board = build_leaderboard(tmp_path / "results", out)
    assert board.figures and all(p.is_file() for p in board.figures)
    assert not any(p.exists() for p in stale) and other.read_bytes() == b"old"


def _run_in_chromium(page: Path, script: str, tmp_path: Path) -> dict[str, Any]:
    """Load a copy of the page with ``script`` appended, let Chromium run it, return its JSON result."""
    probe = tmp_path / "probe.html"
    text = page.read_text(encoding="utf-8")
    probe.write_text(text.replace("</body>", f"<script>{script}</script></body>"), encoding="utf-8")
    cmd = [str(CHROMIUM), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
           probe.as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', out.stdout, re.S)
    assert m, f"no probe result from chromium (rc {out.returncode}): {out.stderr[-2000:]}"
    return json.loads(html.unescape(m.group(1)))


PROBE = """
(function () {
  function visible(table, key) {
    var col = Array.prototype.findIndex.call(table.tHead.rows[0].cells,
                                             function (th) { return th.getAttribute("data-key") === key; });
    return Array.prototype.filter.call(table.tBodies[0].rows, function (tr) { return !tr.hidden; })
      .map(function (tr) { return tr.cells[col].getAttribute("data-sort"); });
  }
  var table = document.querySelector("table.board");
  var th = table.querySelector('th[data-key="test/accuracy"]');
  var res = {before: visible(table, "test/accuracy")};
  th.click();
  res.asc = visible(table, "test/accuracy"); res.ascState = th.getAttribute("aria-sort");
  th.click();
  res.desc = visible(table, "test/accuracy"); res.descState = th.getAttribute("aria-sort");
  var auc = table.querySelector('th[data-key="auc"]');
  auc.click(); auc.click();
  res.aucDesc = visible(table, "auc");
  table.querySelector('th[data-key="method"]').click();
  res.methods = visible(table, "method");
  var sel = document.querySelector('select[data-filter="dataset"]');
  res.options = Array.prototype.map.call(sel.options, function (o) { return o.value; });
  res.rowsBefore = table.tBodies[0].rows.length;
  res.visibleBefore = visible(table, "dataset").length;
  sel.value = "other";
  sel.dispatchEvent(new Event("change"));
  res.datasetsAfter = visible(table, "dataset");
  res.hiddenAfter = Array.prototype.filter.call(table.tBodies[0].rows, function (tr) { return tr.hidden; }).length;
  var rate = document.querySelector('select[data-filter="rate"]');
  rate.value = "0.5"; rate.dispatchEvent(new Event("change"));
  res.ratesAfter = Array.prototype.filter.call(table.tBodies[0].rows, function (tr) { return !tr.hidden; })
    .map(function (tr) { return tr.getAttribute("data-rate"); });
  var old = document.getElementById("show-superseded");
  sel.value = ""; sel.dispatchEvent(new Event("change"));
  res.beforeOld = visible(table, "dataset").length;
  old.click();
  res.withOld = visible(table, "dataset").length;
  res.count = document.getElementById("row-count").textContent;
  var details = table.querySelector("td[data-col=code] details");
  details.querySelector("summary").click();
  res.provOpen = details.open;
  res.provText = details.textContent;
  document.querySelector("h1").click();
  res.provClosed = !details.open;
  var pre = document.createElement("pre"); pre.id = "probe-result"; pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
})();
"""


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                   "(apt-get install -y chromium)")
def test_html_sorts_and_filters_in_headless_chromium(board: Any, tmp_path: Path) -> None:
    res = _run_in_chromium(board.html, PROBE, tmp_path)
    asc = [float(v) for v in res["asc"]]
    desc = [float(v) for v in res["desc"]]
    assert res["ascState"] == "ascending" and res["descState"] == "descending"
    assert asc == sorted(asc) and desc == sorted(desc, reverse=True) and len(asc) == 12
    assert asc != [float(v) for v in res["before"]], "sorting must reorder the rows"
    auc = [float(v) for v in res["aucDesc"]]
    assert auc == sorted(auc, reverse=True) and len(set(auc)) > 1
    assert res["methods"] == sorted(res["methods"])
    assert res["options"] == ["", "other", "synthetic"]
    # 13 rows (12 current + 1 superseded, hidden by default); the filter keeps the 6 'other' rows.
    assert res["rowsBefore"] == 13 and res["visibleBefore"] == 12
    assert res["datasetsAfter"] == ["other"] * 6 and res["hiddenAfter"] == 7
    assert res["ratesAfter"] == ["0.5"] * 3
    assert res["withOld"] == res["beforeOld"] + 1
    assert res["count"].endswith("rows shown")
    assert res["provOpen"] and "artifact recipe" in res["provText"] and "torch 2.13.0" in res["provText"]
    assert res["provClosed"], "a click outside the provenance panel closes it"


def test_cli_leaderboard_verb(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fedmm_bench.cli import main

    _write_results(tmp_path / "results")
    rc = main(["leaderboard", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "t"), "--no-plots"])
    out = capsys.readouterr().out
    assert rc == 0 and "demo[tiny]: 12 current rows, 1 superseded" in out
    assert (tmp_path / "t" / "leaderboard.html").is_file() and (tmp_path / "t" / "leaderboard_demo.md").is_file()


def test_page_inlines_its_static_css_and_js(board: Any) -> None:
    from benchmark.report.leaderboard import html_page

    page = board.html.read_text(encoding="utf-8")
    for name, tag in (("leaderboard.css", "style"), ("leaderboard.js", "script")):
        text = (html_page.static_dir() / name).read_text(encoding="utf-8").strip()
        assert len(text) > 500 and f"<{tag}>\n{text}\n</{tag}>" in page, name
    assert "function sortBy" in page and "--muted" in page


def test_missing_or_unsafe_static_file_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmark.report.leaderboard import html_page

    (tmp_path / "bad.js").write_text("var s = '</SCRIPT><b>';\n", encoding="utf-8")
    monkeypatch.setattr(html_page, "static_dir", lambda: tmp_path)
    with pytest.raises(FileNotFoundError, match=r"static/leaderboard\.css is missing .* reinstall"):
        html_page.asset("leaderboard.css", "style")
    with pytest.raises(ValueError, match=r"static/bad\.js contains '</script', which would end"):
        html_page.asset("bad.js", "script")


KEYBOARD_PROBE = """
(function () {
  function column(table, key) {
    var col = Array.prototype.findIndex.call(table.tHead.rows[0].cells,
                                             function (th) { return th.getAttribute("data-key") === key; });
    return Array.prototype.filter.call(table.tBodies[0].rows, function (tr) { return !tr.hidden; })
      .map(function (tr) { return tr.cells[col].getAttribute("data-sort"); });
  }
  function press(el, key) {  // a key press as the browser delivers it to the focused element
    var ev = new KeyboardEvent("keydown", {key: key, bubbles: true, cancelable: true});
    return !document.activeElement.dispatchEvent(ev);  // true when the page took the key
  }
  var table = document.querySelector("table.board");
  var th = table.querySelector('th[data-key="test/accuracy"]');
  var res = {before: column(table, "test/accuracy"), tabIndex: th.tabIndex, role: th.getAttribute("role"),
             initialSort: th.getAttribute("aria-sort")};
  th.focus();
  res.focused = document.activeElement === th;
  res.focusVisible = th.matches(":focus-visible");
  res.outline = getComputedStyle(th).outlineStyle;
  res.enterTaken = press(th, "Enter");
  res.asc = column(table, "test/accuracy"); res.ascState = th.getAttribute("aria-sort");
  res.spaceTaken = press(th, " ");
  res.desc = column(table, "test/accuracy"); res.descState = th.getAttribute("aria-sort");
  var method = table.querySelector('th[data-key="method"]');
  method.focus();
  press(method, "Enter");
  res.methodState = method.getAttribute("aria-sort"); res.accState = th.getAttribute("aria-sort");
  res.otherKey = press(method, "a");
  res.methodAfterOther = method.getAttribute("aria-sort");
  var pre = document.createElement("pre"); pre.id = "probe-result"; pre.textContent = JSON.stringify(res);
  document.body.appendChild(pre);
})();
"""


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                                                   "(apt-get install -y chromium)")
def test_headers_sort_from_the_keyboard_in_headless_chromium(board: Any, tmp_path: Path) -> None:
    res = _run_in_chromium(board.html, KEYBOARD_PROBE, tmp_path)
    if not res["focusVisible"]:
        # Chromium decides by heuristic whether a scripted focus() counts as keyboard focus; on a
        # loaded machine it has once said no (then the CSS rightly shows no outline): ask again
        (tmp_path / "again").mkdir()
        res = _run_in_chromium(board.html, KEYBOARD_PROBE, tmp_path / "again")
    assert res["tabIndex"] == 0 and res["role"] == "columnheader" and res["initialSort"] == "none"
    assert res["focused"], "a header must take keyboard focus"
    assert res["focusVisible"] and res["outline"] != "none", "a focused header must show a focus outline"
    asc = [float(v) for v in res["asc"]]
    desc = [float(v) for v in res["desc"]]
    assert res["enterTaken"] and res["ascState"] == "ascending" and asc == sorted(asc)
    assert asc != [float(v) for v in res["before"]], "Enter on a header must reorder the rows"
    assert res["spaceTaken"], "Space on a header sorts and must not scroll the page"
    assert res["descState"] == "descending" and desc == sorted(desc, reverse=True) and len(desc) == 12
    assert res["methodState"] == "ascending" and res["accState"] == "none"
    assert not res["otherKey"] and res["methodAfterOther"] == "ascending", "other keys do not sort"
