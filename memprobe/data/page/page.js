// memprobe report page: choose the reference card, filter precisions and workloads, sort tables, hover values.
// It computes no figure: every number shown was written into the page by memprobe (one view per reference card).
(function () {
  "use strict";
  var all = function (selector, root) { return Array.prototype.slice.call((root || document).querySelectorAll(selector)); };

  function checkedValues(id) {
    var chosen = {};
    all("#" + id + " input:checked").forEach(function (box) { chosen[box.value] = true; });
    return chosen;
  }

  function applyFilters() {
    var precisions = checkedValues("precisions"), workloads = checkedValues("workloads");
    var keep = function (el) {
      var p = el.getAttribute("data-precision"), w = el.getAttribute("data-workload");
      return (p === null || precisions[p] === true) && (w === null || workloads[w] === true);
    };
    all("table.data").forEach(function (table) {
      var hiddenColumns = {};
      all("thead th", table).forEach(function (th, i) {
        th.hidden = !keep(th);
        if (th.hidden) { hiddenColumns[i] = true; }
      });
      all("tbody tr", table).forEach(function (tr) {
        tr.hidden = !keep(tr);
        Array.prototype.forEach.call(tr.cells, function (cell, i) { cell.hidden = hiddenColumns[i] === true; });
      });
    });
  }

  function showReference() {
    var select = document.getElementById("reference");
    if (!select) { return; }
    all(".ref-view").forEach(function (view) { view.hidden = view.getAttribute("data-ref") !== select.value; });
  }

  function sortKey(row, column) {
    var cell = row.cells[column];
    if (!cell) { return { missing: true }; }
    var value = cell.getAttribute("data-value");
    if (value !== null && value !== "") { return { number: parseFloat(value) }; }
    var text = cell.textContent.trim();
    return text === "-" || text === "" ? { missing: true } : { text: text };
  }

  function compare(a, b) {
    if (a.number !== undefined && b.number !== undefined) { return a.number - b.number; }
    if (a.number !== undefined) { return -1; }
    if (b.number !== undefined) { return 1; }
    return String(a.text).localeCompare(String(b.text), undefined, { numeric: true });
  }

  function sortBy(th) {
    var table = th.closest("table"), body = table.tBodies[0];
    var column = Array.prototype.indexOf.call(th.parentNode.children, th);
    var direction = th.getAttribute("aria-sort") === "descending" ? "ascending" : "descending";
    all("th", th.parentNode).forEach(function (other) { other.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", direction);
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      var a = sortKey(r1, column), b = sortKey(r2, column);
      if (a.missing || b.missing) { return (a.missing ? 1 : 0) - (b.missing ? 1 : 0); } // "-" stays last
      var order = compare(a, b);
      return direction === "ascending" ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  var tip = document.createElement("div");
  tip.id = "tip";
  tip.setAttribute("role", "tooltip");
  tip.hidden = true;
  document.body.appendChild(tip);

  function place(x, y) {
    tip.style.left = Math.max(4, Math.min(x + 14, window.innerWidth - tip.offsetWidth - 8)) + "px";
    tip.style.top = Math.min(y + 16, window.innerHeight - tip.offsetHeight - 4) + "px";
  }

  function showTip(target, x, y) {
    var holder = target && target.closest ? target.closest("[data-tip]") : null;
    if (!holder) { tip.hidden = true; return; }
    tip.textContent = holder.getAttribute("data-tip");
    tip.hidden = false;
    place(x, y);
  }

  document.addEventListener("mouseover", function (event) { showTip(event.target, event.clientX, event.clientY); });
  document.addEventListener("mousemove", function (event) { if (!tip.hidden) { place(event.clientX, event.clientY); } });
  document.addEventListener("focusin", function (event) {
    var box = event.target.getBoundingClientRect ? event.target.getBoundingClientRect() : { left: 0, bottom: 0 };
    showTip(event.target, box.left, box.bottom);
  });
  document.addEventListener("focusout", function () { tip.hidden = true; });

  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button") : null;
    if (!button) { return; }
    if (button.classList.contains("sort")) { sortBy(button.closest("th")); return; }
    if (button.hasAttribute("data-all")) {
      var on = button.getAttribute("data-all") === "1";
      all("#workloads input").forEach(function (box) { box.checked = on; });
      applyFilters();
    }
  });
  all("#controls input").forEach(function (box) { box.addEventListener("change", applyFilters); });
  var select = document.getElementById("reference");
  if (select) { select.addEventListener("change", showReference); }
  showReference();
  applyFilters();
}());
