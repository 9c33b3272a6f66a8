// The page's only script. Live: each Server-Sent Event carries sections the server rendered
// (every text escaped there); they replace the page's sections, and the ledger keeps its sort.
// EventSource reconnects by itself when the server restarts. Any text this script writes goes
// through textContent. Nothing here computes a fact: best, verdict, noise and tree come rendered.
(function () {
  "use strict";
  var sorted = null; // {column, descending} chosen by a click on the ledger's header

  function cellValue(row, column, numeric) {
    var cell = row.cells[column];
    var raw = cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent;
    if (!numeric) return raw;
    var n = parseFloat(raw);
    return isNaN(n) ? Infinity : n;
  }

  function applySort() {
    var table = document.querySelector("table.sortable");
    if (!table || !sorted) return;
    var header = table.tHead.rows[0].cells[sorted.column];
    var numeric = header.getAttribute("data-type") === "num";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, sorted.column, numeric), y = cellValue(b, sorted.column, numeric);
      var order = x < y ? -1 : x > y ? 1 : 0;
      return sorted.descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, n) {
      th.classList.toggle("asc", n === sorted.column && !sorted.descending);
      th.classList.toggle("desc", n === sorted.column && sorted.descending);
    });
  }

  document.addEventListener("click", function (event) {
    var th = event.target.closest("table.sortable th");
    if (!th) return;
    var column = th.cellIndex;
    sorted = { column: column, descending: sorted && sorted.column === column ? !sorted.descending : false };
    applySort();
  });

  function followLogs() {
    document.querySelectorAll(".log pre").forEach(function (pre) { pre.scrollTop = pre.scrollHeight; });
  }
  followLogs();

  var url = document.body.getAttribute("data-events");
  if (!url || !window.EventSource) return;
  var live = document.getElementById("live");
  var source = new EventSource(url);
  source.onopen = function () { live.textContent = "live"; live.className = "live on"; };
  source.onerror = function () { live.textContent = "reconnecting"; live.className = "live"; };
  source.onmessage = function (event) {
    var message = JSON.parse(event.data);
    Object.keys(message.sections).forEach(function (id) {
      var section = document.getElementById(id);
      if (section) section.innerHTML = message.sections[id]; // rendered and escaped by the server
    });
    var updated = document.getElementById("updated");
    if (updated && message.updated_at) updated.textContent = message.updated_at;
    if (message.sections.ledger) applySort();
    if (message.sections.logs) followLogs();
  };
})();
