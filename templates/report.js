/* profan report: draw the charts, open deep-linked findings, sort and filter tables. No network access. */
(function () {
  "use strict";

  function openTarget() {
    var id = decodeURIComponent(window.location.hash.slice(1));
    if (!id) return;
    var el = document.getElementById(id);
    if (!el) return;
    var d = el.tagName === "DETAILS" ? el : el.closest("details");
    while (d) {
      d.open = true;
      d = d.parentElement ? d.parentElement.closest("details") : null;
    }
    el.scrollIntoView({ block: "start" });
  }

  function drawCharts() {
    var node = document.getElementById("chart-data");
    if (!node || typeof Plotly === "undefined") return;
    var specs = JSON.parse(node.textContent);
    var config = {
      displaylogo: false, responsive: true, showLink: false, showSendToCloud: false, showEditInChartStudio: false,
      modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d"]
    };
    Object.keys(specs).forEach(function (key) {
      var s = specs[key];
      var div = document.getElementById(s.id);
      if (!div) return;
      Plotly.newPlot(div, s.data, s.layout, config).then(function (gd) {
        gd.setAttribute("data-rendered", "1");
        gd.on("plotly_click", function (ev) {
          var pt = ev.points && ev.points[0];
          var cd = pt && pt.customdata;
          var fid = Array.isArray(cd) ? cd[cd.length - 1] : "";
          if (typeof fid === "string" && /^(C\d+|F\d+(\.\d+)?)$/.test(fid)) window.location.hash = "#" + fid;
        });
        gd.on("plotly_clickannotation", function (ev) {
          var name = ev.annotation && ev.annotation.name;
          if (name) window.location.hash = "#" + name;
        });
      });
    });
  }

  function cellValue(td, numeric) {
    var text = td ? td.textContent : "";
    if (!numeric) return text;
    var v = parseFloat(text.replace(/,/g, ""));
    return isNaN(v) ? -Infinity : v;
  }

  function initSort() {
    document.querySelectorAll("table.sortable thead th").forEach(function (th, _i) {
      th.addEventListener("click", function () {
        var table = th.closest("table");
        var idx = Array.prototype.indexOf.call(th.parentNode.children, th);
        var dir = th.getAttribute("data-sort") === "asc" ? "desc" : "asc";
        var numeric = th.classList.contains("num");
        th.parentNode.querySelectorAll("th").forEach(function (o) { o.removeAttribute("data-sort"); });
        th.setAttribute("data-sort", dir);
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellValue(a.cells[idx], numeric), y = cellValue(b.cells[idx], numeric);
          var c = numeric ? (x === y ? 0 : (x < y ? -1 : 1)) : String(x).localeCompare(String(y));
          return dir === "asc" ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }

  function initFilter() {
    document.querySelectorAll("input.filter").forEach(function (inp) {
      inp.addEventListener("input", function () {
        var table = document.getElementById(inp.getAttribute("data-target"));
        var q = inp.value.toLowerCase();
        Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
          r.style.display = !q || r.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
        });
      });
    });
  }

  function initFindingFilter() {
    var inp = document.querySelector("input.ffilter");
    if (!inp) return;
    inp.addEventListener("input", function () {
      var q = inp.value.toLowerCase();
      document.querySelectorAll("details.finding").forEach(function (d) {
        var text = d.querySelector("summary").textContent.toLowerCase();
        d.style.display = !q || text.indexOf(q) >= 0 ? "" : "none";
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawCharts();
    initSort();
    initFilter();
    initFindingFilter();
    openTarget();
  });
  window.addEventListener("hashchange", openTarget);
})();
