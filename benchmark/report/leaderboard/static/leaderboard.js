(function () {
  "use strict";
  var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-filter]"));
  var showOld = document.getElementById("show-superseded");
  var counter = document.getElementById("row-count");

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
  selects.forEach(function (s) { s.addEventListener("change", applyFilters); });
  showOld.addEventListener("change", applyFilters);
  applyFilters();
})();
