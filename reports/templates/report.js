(function () {
  "use strict";
  function cellValue(row, idx, numeric) {
    var cell = row.cells[idx];
    if (!cell) return numeric ? -Infinity : "";
    var v = cell.getAttribute("data-v");
    if (numeric) { var n = parseFloat(v); return isNaN(n) ? -Infinity : n; }
    return (v === null ? cell.textContent : v).toLowerCase();
  }
  function sortTable(table, idx, th) {
    var numeric = th.classList.contains("num");
    var dir = th.getAttribute("aria-sort") === "descending" ? "ascending" : "descending";
    if (!numeric && !th.hasAttribute("aria-sort")) dir = "ascending";
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) heads[i].removeAttribute("aria-sort");
    th.setAttribute("aria-sort", dir);
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, idx, numeric), y = cellValue(b, idx, numeric);
      var c = x < y ? -1 : x > y ? 1 : 0;
      return dir === "ascending" ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  function filterTable(table, text) {
    var q = text.toLowerCase();
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      r.hidden = q !== "" && r.textContent.toLowerCase().indexOf(q) < 0;
    });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, idx) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortTable(table, idx, th); });
      th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortTable(table, idx, th); } });
    });
  });
  document.querySelectorAll("input.filter").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    if (table) input.addEventListener("input", function () { filterTable(table, input.value); });
  });
})();
