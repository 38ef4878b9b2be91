// memprobe report page: pick a workload and precision, choose the reference card, filter precisions, workloads and
// cards in every section (tables, charts, sources), sort tables, hover values. It computes no figure: every number
// shown was written into the page by memprobe (one relative figure per possible reference card).
(function () {
  "use strict";
  var all = function (selector, root) { return Array.prototype.slice.call((root || document).querySelectorAll(selector)); };
  var byId = function (id) { return document.getElementById(id); };
  var hide = function (el, hidden) { if (hidden) { el.setAttribute("hidden", ""); } else { el.removeAttribute("hidden"); } };
  var KEYS = { precision: "precisions", workload: "workloads", card: "cards" };

  function chosenValues() {
    var chosen = {};
    Object.keys(KEYS).forEach(function (key) {
      if (!byId(KEYS[key])) { return; }
      chosen[key] = {};
      all("#" + KEYS[key] + " input:checked").forEach(function (box) { chosen[key][box.value] = true; });
    });
    return chosen;
  }

  function keep(el, chosen) {
    return Object.keys(chosen).every(function (key) {
      var value = el.getAttribute("data-" + key);
      return value === null || chosen[key][value] === true;
    });
  }

  function applyFilters() {
    var chosen = chosenValues();
    // Everything tagged with what it is about: rows, cells, chart panels and marks, sources (not the views: the
    // pickers show those, and their rows are tagged by card only).
    all("[data-precision], [data-workload], [data-card]").forEach(function (el) {
      if (el.classList.contains("view")) { return; }
      hide(el, !keep(el, chosen));
    });
    all("table.data, table.heat").forEach(function (table) {  // a hidden column hides its cells
      var head = table.tHead ? table.tHead.rows[table.tHead.rows.length - 1] : null;
      if (!head) { return; }
      var gone = Array.prototype.map.call(head.cells, function (th) { return th.hasAttribute("hidden"); });
      if (gone.indexOf(true) < 0 && !table.hasAttribute("data-had-hidden")) { return; }
      table.setAttribute("data-had-hidden", "");
      all("tbody tr", table).forEach(function (tr) {
        Array.prototype.forEach.call(tr.cells, function (cell, i) { hide(cell, gone[i] === true); });
      });
    });
    all("table.heat").forEach(function (table) {  // a workload's heading spans its precisions still shown
      var labels = all("thead tr:last-child th[data-workload]", table);
      all("thead tr:first-child th[data-workload]", table).forEach(function (th) {
        var shown = labels.filter(function (l) {
          return l.getAttribute("data-workload") === th.getAttribute("data-workload") && !l.hasAttribute("hidden");
        }).length;
        hide(th, shown === 0);
        if (shown > 0) { th.colSpan = shown; }
      });
    });
    showView();
  }

  function showView() {
    var pickW = byId("view-workload"), pickP = byId("view-precision");
    if (!pickW || !pickP) { return; }
    var chosen = chosenValues(), views = all(".view");
    var allowed = function (key, value) { return !chosen[key] || chosen[key][value] === true; };
    all("option", pickW).forEach(function (o) { o.disabled = !allowed("workload", o.value); });
    if (pickW.selectedOptions[0] && pickW.selectedOptions[0].disabled) {
      var open = all("option", pickW).filter(function (o) { return !o.disabled; })[0];
      if (open) { pickW.value = open.value; }
    }
    var have = {};
    views.forEach(function (v) { if (v.getAttribute("data-workload") === pickW.value) { have[v.getAttribute("data-precision")] = true; } });
    all("option", pickP).forEach(function (o) { o.disabled = !have[o.value] || !allowed("precision", o.value); });
    if (!have[pickP.value] || !allowed("precision", pickP.value)) {
      var first = all("option", pickP).filter(function (o) { return !o.disabled; })[0];
      if (first) { pickP.value = first.value; }
    }
    views.forEach(function (v) {
      hide(v, v.getAttribute("data-workload") !== pickW.value || v.getAttribute("data-precision") !== pickP.value);
    });
  }

  function rankBy() {
    var box = document.querySelector('input[name="rank-by"]:checked');
    var by = box ? box.value : "speed";
    all("table.view-table").forEach(function (table) {
      var body = table.tBodies[0], key = by === "batch" ? "data-rb" : "data-rs";
      var rank = function (row) { return Number(row.getAttribute(key)) || Infinity; };  // "" : no rank, last
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) { var x = rank(a), y = rank(b); return x === y ? 0 : x < y ? -1 : 1; });
      rows.forEach(function (row) {
        body.appendChild(row);
        row.querySelector(".rank").textContent = row.getAttribute(key) || "-";
      });
      all("th", table).forEach(function (th) { th.removeAttribute("aria-sort"); });
    });
  }

  function showReference() {
    var select = byId("reference"), chosen = select ? select.value : "";
    var refViews = all(".ref-view");
    var found = refViews.some(function (v) { return v.getAttribute("data-ref") === chosen; });
    refViews.forEach(function (v) {
      hide(v, found ? v.getAttribute("data-ref") !== chosen : !v.hasAttribute("data-default"));
    });
    all(".no-ref").forEach(function (p) { hide(p, found || chosen === ""); });
    all(".view").forEach(function (view) {
      var refs = (view.getAttribute("data-refs") || "").split("|");
      var ref = refs.indexOf(chosen) >= 0 ? chosen : view.getAttribute("data-default-ref");
      var index = String(refs.indexOf(ref));
      all("span[data-r]", view).forEach(function (s) { hide(s, s.getAttribute("data-r") !== index); });
      all(".ref-name", view).forEach(function (s) { s.textContent = ref || "-"; });
    });
  }

  function sortKey(row, column) {
    var cell = row.cells[column];
    if (!cell) { return { missing: true }; }
    var value = cell.getAttribute("data-value");
    if (value !== null && value !== "") { return { number: parseFloat(value) }; }
    var shown = cell.querySelector("span[data-r]:not([hidden])");  // a view's relative figure: the one shown
    var text = (shown || cell).textContent.trim();
    if (shown && !isNaN(parseFloat(text))) { return { number: parseFloat(text) }; }
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

  function tipText(target) {
    var holder = target && target.closest ? target.closest("[data-tip], a.src, table.heat td[data-value]") : null;
    if (!holder) { return null; }
    if (holder.hasAttribute("data-tip")) {  // a chart mark: its series' name, then its own text
      var named = holder.closest("[data-name]");
      return (named ? named.getAttribute("data-name") + ": " : "") + holder.getAttribute("data-tip");
    }
    if (holder.tagName === "TD") {  // a heatmap cell: its row, its column and where it comes from
      var table = holder.closest("table"), row = holder.parentNode;
      var head = table.tHead.rows[table.tHead.rows.length - 1].cells[holder.cellIndex];
      var group = "";
      all("thead tr:first-child th[data-workload]", table).forEach(function (th) {
        if (th.getAttribute("data-workload") === (head && head.getAttribute("data-workload"))) { group = th.textContent + " "; }
      });
      var column = head ? head.getAttribute("data-precision") || head.textContent : "";
      return row.cells[0].textContent + ", " + group + column + ": " + holder.textContent +
        " (" + holder.className.replace("o-", "") + ")";
    }
    var entry = byId((holder.getAttribute("href") || "#").slice(1));  // a source link: its entry says what it is
    return entry ? entry.getAttribute("data-tip") : null;
  }

  function showTip(target, x, y) {
    var text = tipText(target);
    if (!text) { tip.hidden = true; return; }
    tip.textContent = text;
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
    var target = event.target;
    var th = target.closest ? target.closest("table.data thead th") : null;
    if (th) { sortBy(th); return; }
    var button = target.closest ? target.closest("button[data-all]") : null;
    if (button) {
      var on = button.getAttribute("data-all") === "1";
      all("input", button.closest("fieldset")).forEach(function (box) { box.checked = on; });
      applyFilters();
    }
  });
  document.addEventListener("keydown", function (event) {
    var th = event.target.closest ? event.target.closest("table.data thead th") : null;
    if (th && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); sortBy(th); }
  });
  all("table.data thead th").forEach(function (th) { th.tabIndex = 0; });  // sortable from the keyboard too
  all("#controls input").forEach(function (box) { box.addEventListener("change", applyFilters); });
  all('input[name="rank-by"]').forEach(function (box) { box.addEventListener("change", rankBy); });
  ["view-workload", "view-precision"].forEach(function (id) {
    if (byId(id)) { byId(id).addEventListener("change", function () { showView(); }); }
  });
  if (byId("reference")) { byId("reference").addEventListener("change", showReference); }
  showReference();
  applyFilters();
}());
