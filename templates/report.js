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

  var CONFIG = {
    displaylogo: false, responsive: true, showLink: false, showSendToCloud: false, showEditInChartStudio: false,
    modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d"]
  };

  function chartSpecs() {
    var node = document.getElementById("chart-data");
    if (!node) return [];
    var specs = JSON.parse(node.textContent);
    return Object.keys(specs).map(function (key) { return specs[key]; }).filter(function (s) {
      return document.getElementById(s.id);
    });
  }

  // Reserve each chart's height before it is drawn, so drawing it later moves nothing on the page.
  function reserveSpace(specs) {
    specs.forEach(function (s) {
      if (s.layout && s.layout.height) document.getElementById(s.id).style.height = s.layout.height + "px";
    });
  }

  function linkOf(gd, pt) {
    var cd = pt && pt.customdata;
    var fid = Array.isArray(cd) ? cd[cd.length - 1] : "";
    var links = gd.layout && gd.layout.meta && gd.layout.meta.rank_links;  // heatmaps: a rank's column
    if (!fid && links && pt) fid = links[String(pt.x)] || "";
    return typeof fid === "string" && /^(C\d+|F\d+(\.\d+)?)$/.test(fid) ? fid : "";
  }

  function drawChart(s) {
    var div = document.getElementById(s.id);
    return Plotly.newPlot(div, s.data, s.layout, CONFIG).then(function (gd) {
      gd.setAttribute("data-rendered", "1");
      gd.on("plotly_click", function (ev) {
        var fid = linkOf(gd, ev.points && ev.points[0]);
        if (fid) window.location.hash = "#" + fid;
      });
      gd.on("plotly_clickannotation", function (ev) {
        var name = ev.annotation && ev.annotation.name;
        if (name) window.location.hash = "#" + name;
      });
    });
  }

  function distance(s) {
    var box = document.getElementById(s.id).getBoundingClientRect();
    return box.bottom < 0 ? -box.bottom : Math.max(box.top - window.innerHeight, 0);
  }

  // The charts are drawn after the page has loaded, one per task and nearest the view first: the page reads and
  // answers clicks at once, and a click between two charts is handled before the next one is drawn.
  function drawCharts(specs) {
    if (typeof Plotly === "undefined" || !specs.length) return;
    var queue = specs.slice();
    function next() {
      if (!queue.length) return;
      queue.sort(function (a, b) { return distance(a) - distance(b); });
      drawChart(queue.shift()).then(function () { setTimeout(next, 0); }, function () { setTimeout(next, 0); });
    }
    setTimeout(next, 0);
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

  // The inlined Plotly as a Blob of script: unpacked (gzip, base64) where the page carries it packed.
  function plotlySource(src) {
    if (src.getAttribute("data-encoding") !== "gzip+base64") {
      return Promise.resolve(new Blob([src.textContent], { type: "text/javascript" }));
    }
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error("this browser cannot unpack the charts (no DecompressionStream)"));
    }
    var bin = atob(src.textContent.trim());
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).blob().then(function (b) { return new Blob([b], { type: "text/javascript" }); });
  }

  // Run Plotly after the page has loaded: from a blob: URL, which the browser compiles off the main thread; as an
  // inline script where that fails. A browser that cannot unpack it says so where the charts would be.
  function loadPlotly(then) {
    var src = document.getElementById("plotly-src");
    if (typeof Plotly !== "undefined" || !src) { then(); return; }
    plotlySource(src).then(function (blob) {
      var url = URL.createObjectURL(blob);
      var s = document.createElement("script");
      s.onload = function () { URL.revokeObjectURL(url); then(); };
      s.onerror = function () {
        URL.revokeObjectURL(url);
        blob.text().then(function (text) {
          var inline = document.createElement("script");
          inline.textContent = text;
          document.head.appendChild(inline);
          then();
        });
      };
      s.src = url;
      document.head.appendChild(s);
    }).catch(function (err) {
      document.querySelectorAll(".chart").forEach(function (div) {
        div.textContent = "Chart not drawn: " + err.message + ". The tables hold the same numbers.";
      });
    });
  }

  var specs = [];
  document.addEventListener("DOMContentLoaded", function () {
    specs = chartSpecs();
    reserveSpace(specs);
    initSort();
    initFilter();
    initFindingFilter();
    openTarget();
  });
  window.addEventListener("load", function () {
    if (specs.length) loadPlotly(function () { drawCharts(specs); });
  });
  window.addEventListener("hashchange", openTarget);
})();
