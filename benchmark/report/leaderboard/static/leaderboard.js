(function () {
  "use strict";
  var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-filter]"));
  var showOld = document.getElementById("show-superseded");
  var counter = document.getElementById("row-count");
  // The number a numeric cell's text starts with (html_page.LEADING_NUMBER is the same pattern).
  var LEADING_NUMBER = /^[-+]?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?/;

  // The page is written compactly (html_page.py says how); this fills in, once, what follows
  // from it: each cell's data-col (its header's data-key) and, in a numeric column, class "num";
  // data-sort where the page wrote none (the text, or the number it starts with); each row's
  // data-current and its filter values (the texts of the filters' columns).
  function completeTable(table) {
    var heads = Array.prototype.slice.call(table.tHead.rows[0].cells);
    var keys = heads.map(function (th) { return th.getAttribute("data-key"); });
    var numeric = heads.map(function (th) { return th.getAttribute("data-type") === "num"; });
    var filterCols = selects.map(function (s) {
      var key = s.getAttribute("data-filter");
      return {key: key, index: keys.indexOf(key)};
    });
    Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
      Array.prototype.forEach.call(tr.cells, function (td, i) {
        td.setAttribute("data-col", keys[i]);
        if (numeric[i]) { td.classList.add("num"); }
        if (!td.hasAttribute("data-sort")) {
          var text = td.textContent.trim();
          if (numeric[i]) { var m = LEADING_NUMBER.exec(text); text = m ? m[0] : ""; }
          td.setAttribute("data-sort", text);
        }
      });
      tr.setAttribute("data-current", tr.classList.contains("superseded") ? "0" : "1");
      filterCols.forEach(function (f) {
        if (f.index >= 0) { tr.setAttribute("data-" + f.key, tr.cells[f.index].textContent.trim()); }
      });
    });
  }

  // A row's provenance panel, drawn from its section's JSON (html_page.provenance_data) the first
  // time it is opened: per row [heading, shape, value, ...], shapes[shape] its labels, and the
  // heading and each value a string or the index of a string the section repeats.
  function provenanceOf(section) {
    var node = section.querySelector('script[type="application/json"].provenance');
    if (!node) { return; }
    var data = JSON.parse(node.textContent);
    function str(ref) { return typeof ref === "number" ? data.strings[ref] : ref; }
    function fill(details, entry) {
      if (details.querySelector(".prov")) { return; }
      var panel = document.createElement("div");
      panel.className = "prov";
      var h = document.createElement("h3");
      h.textContent = str(entry[0]);
      panel.appendChild(h);
      var dl = document.createElement("dl");
      var labels = data.shapes[entry[1]] || [];
      for (var k = 0; k < labels.length; k += 1) {
        var dt = document.createElement("dt"), dd = document.createElement("dd");
        dt.textContent = labels[k];
        dd.textContent = str(entry[k + 2]);
        dl.appendChild(dt);
        dl.appendChild(dd);
      }
      panel.appendChild(dl);
      var p = document.createElement("p");
      p.textContent = "Click outside or press Escape to close.";
      panel.appendChild(p);
      details.appendChild(panel);
    }
    // The rows are still in page order here, the order of data.rows.
    Array.prototype.forEach.call(section.querySelector("table.board").tBodies[0].rows, function (tr, i) {
      var details = tr.querySelector("details");
      var entry = data.rows[i];
      if (!details || !entry) { return; }
      details.querySelector("summary").addEventListener("click", function () { fill(details, entry); });
      details.addEventListener("toggle", function () { if (details.open) { fill(details, entry); } });
    });
  }

  function applyFilters() {
    var wanted = {};
    selects.forEach(function (s) { if (s.value !== "") { wanted[s.getAttribute("data-filter")] = s.value; } });
    var total = 0;
    Array.prototype.forEach.call(document.querySelectorAll("table.board"), function (table) {
      var visible = 0;
      Array.prototype.forEach.call(table.tBodies[0].rows, function (tr) {
        var show = showOld.checked || tr.getAttribute("data-current") === "1";
        Object.keys(wanted).forEach(function (k) {
          if (tr.getAttribute("data-" + k) !== wanted[k]) { show = false; }
        });
        tr.hidden = !show;
        if (show) { visible += 1; }
      });
      var empty = table.parentNode.parentNode.querySelector(".empty");
      if (empty) { empty.hidden = visible > 0; }
      total += visible;
    });
    counter.textContent = total + " row" + (total === 1 ? "" : "s") + " shown";
  }

  function cellValue(tr, index, numeric) {
    var raw = tr.cells[index].getAttribute("data-sort");
    if (raw === null || raw === "") { return null; }
    if (numeric) { var f = parseFloat(raw); return isNaN(f) ? null : f; }
    return raw.toLowerCase();
  }

  function sortBy(th) {
    var table = th.closest("table");
    var index = Array.prototype.indexOf.call(th.parentNode.cells, th);
    var numeric = th.getAttribute("data-type") === "num";
    var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    // Every other header of the table is sortable but unsorted now.
    Array.prototype.forEach.call(th.parentNode.cells, function (h) { h.setAttribute("aria-sort", "none"); });
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index, numeric), y = cellValue(b, index, numeric);
      if (x === null && y === null) { return 0; }
      if (x === null) { return 1; }   // empty values last in both directions
      if (y === null) { return -1; }
      return x < y ? -sign : (x > y ? sign : 0);
    });
    rows.forEach(function (tr) { body.appendChild(tr); });
  }

  // Headers sort by mouse and by keyboard: each is focusable (tabindex 0, set by the page; set
  // here too should a header lack it) and sorts on Enter or Space, as a button would.
  function isSortKey(e) {
    return e.key === "Enter" || e.key === " " || e.key === "Spacebar";
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.board thead th"), function (th) {
    if (!th.hasAttribute("tabindex")) { th.setAttribute("tabindex", "0"); }
    if (!th.hasAttribute("aria-sort")) { th.setAttribute("aria-sort", "none"); }
    th.addEventListener("click", function () { sortBy(th); });
    th.addEventListener("keydown", function (e) {
      if (isSortKey(e) && !e.repeat) {
        e.preventDefault();  // Space would otherwise scroll the page
        sortBy(th);
      }
    });
    var hint = th.getAttribute("data-hint");
    th.setAttribute("title", (hint ? hint + "; " : "") + "click, or press Enter or Space, to sort");
  });
  // One provenance panel at a time; a click outside it or Escape closes it.
  document.addEventListener("click", function (e) {
    Array.prototype.forEach.call(document.querySelectorAll("details[open]"), function (d) {
      if (!d.contains(e.target)) { d.open = false; }
    });
  });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") {
      Array.prototype.forEach.call(document.querySelectorAll("details[open]"), function (d) { d.open = false; });
    }
  });
  Array.prototype.forEach.call(document.querySelectorAll("section.suite"), function (section) {
    completeTable(section.querySelector("table.board"));
    provenanceOf(section);
  });
  selects.forEach(function (s) { s.addEventListener("change", applyFilters); });
  showOld.addEventListener("change", applyFilters);
  applyFilters();
})();
