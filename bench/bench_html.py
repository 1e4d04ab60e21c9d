"""How the HTML report holds up as ranks grow: file size, render time, DOM nodes, page height and Chromium's time
to interactive, per cluster folder.

    python bench/bench_html.py /tmp/scale/r64 /tmp/scale/r1000 --repeat 3
    python bench/bench_html.py /tmp/scale/r1000 --reports /tmp/bench-reports   # analyse once, reuse the Report

Each folder is analysed once (``--jobs``, sequential by default); with ``--reports DIR`` the Report is pickled
there and reused on the next run, so render experiments do not re-read 2 GB. Then, ``--repeat`` times: the page
is rendered (timed), opened in headless Chromium through Playwright (``/usr/bin/chromium``, or ``--chromium``)
and measured: the load event (navigation timing), every chart drawn, and the first input handled (a click that
opens the first collapsed cause or finding: the page answers only once its scripts are done). The best of the
runs is printed as one Markdown table row per folder; ``--keep DIR`` keeps the last page of each.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = (
    "| cluster | ranks | HTML MB | render s | DOM nodes | page height px | load s | interactive s | "
    "charts drawn s | longest block s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

# Runs in the page once the load event fired. It clicks the summary of the first closed finding (the page answers
# once it is free: the first input handled), closes it again, then waits for every chart to be drawn, timing a 50 ms
# timer meanwhile (how late it fires is the longest the page could not answer). Times in ms since navigation start.
PROBE = """async () => {
  const nav = performance.getEntriesByType("navigation")[0];
  const entered = performance.now();
  const d = document.querySelector("details.finding:not([open])") || document.querySelector("details:not([open])");
  let handled = entered;
  if (d) {
    await new Promise(r => { d.addEventListener("toggle", r, { once: true }); d.querySelector("summary").click(); });
    handled = performance.now();
    d.open = false;
  }
  const charts = () => Array.from(document.querySelectorAll(".chart"));
  let worst = 0;
  while (charts().some(c => !c.hasAttribute("data-rendered"))) {
    const t = performance.now();
    await new Promise(r => setTimeout(r, 50));
    worst = Math.max(worst, performance.now() - t - 50);
  }
  return {
    load: nav.loadEventEnd, input: handled, input_delay: handled - entered, drawn: performance.now(), worst: worst,
    nodes: document.getElementsByTagName("*").length,
    height: document.documentElement.scrollHeight, charts: charts().length,
  };
}"""


@dataclass
class Run:
    """One render and one page load of a report: the figures a table row shows."""

    size_mb: float
    render_s: float
    nodes: int
    height: int
    load_s: float
    interactive_s: float  # the first input (a click right after the load event) handled
    drawn_s: float
    block_s: float  # the longest the page could not answer input, from load until every chart is drawn
    extra: dict[str, Any] = field(default_factory=dict)


def load_report(folder: Path, reports: Path | None, jobs: int) -> Any:
    """The folder's Report: from the pickle in ``reports`` when there is one, else analysed (and pickled there)."""
    import profan

    cached = reports / f"{folder.name}.pkl" if reports else None
    if cached is not None and cached.exists():
        return pickle.loads(cached.read_bytes())
    t0 = time.perf_counter()
    report = profan.analyze(folder, jobs=jobs)
    print(f"{folder}: analysed in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    if cached is not None:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(pickle.dumps(report))
    return report


def render_page(report: Any, out: Path) -> float:
    """Write the HTML report to ``out``; the seconds it took."""
    from profan.render import render

    t0 = time.perf_counter()
    render(report, "html", out)
    return time.perf_counter() - t0


def measure_page(browser: Any, page_path: Path) -> dict[str, Any]:
    """Open the page in a fresh tab and run PROBE; wall-clock seconds from navigation to the handled input too."""
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    t0 = time.perf_counter()
    page.goto(page_path.resolve().as_uri(), wait_until="load", timeout=120_000)
    got = page.evaluate(PROBE)
    got["wall_s"] = time.perf_counter() - t0
    got["errors"] = errors
    page.close()
    return got


def one_run(browser: Any, report: Any, out: Path) -> Run:
    """Render, then load and probe the page once."""
    render_s = render_page(report, out)
    got = measure_page(browser, out)
    if got["errors"]:
        print(f"{out}: page errors: {got['errors'][:3]}", file=sys.stderr)
    return Run(
        size_mb=out.stat().st_size / 1e6,
        render_s=render_s,
        nodes=got["nodes"],
        height=got["height"],
        load_s=got["load"] / 1000,
        interactive_s=got["input"] / 1000,
        drawn_s=got["drawn"] / 1000,
        block_s=got["worst"] / 1000,
        extra={"wall_s": got["wall_s"], "charts": got["charts"]},
    )


def best(runs: list[Run]) -> Run:
    """Each timing at its best over the runs (the sizes and counts do not change between runs)."""
    first = runs[0]
    return Run(
        size_mb=first.size_mb,
        render_s=min(r.render_s for r in runs),
        nodes=first.nodes,
        height=first.height,
        load_s=min(r.load_s for r in runs),
        interactive_s=min(r.interactive_s for r in runs),
        drawn_s=min(r.drawn_s for r in runs),
        block_s=min(r.block_s for r in runs),
        extra={"interactive_range": (min(r.interactive_s for r in runs), max(r.interactive_s for r in runs))},
    )


def row(folder: Path, ranks: int, r: Run) -> str:
    lo, hi = r.extra["interactive_range"]
    return (
        f"| {folder.name} | {ranks:,} | {r.size_mb:.2f} | {r.render_s:.2f} | {r.nodes:,} | {r.height:,} | "
        f"{r.load_s:.2f} | {r.interactive_s:.2f} ({lo:.2f}–{hi:.2f}) | {r.drawn_s:.2f} | {r.block_s:.2f} |"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", type=Path, help="cluster folders (profan.synth output, real jobs)")
    ap.add_argument("--repeat", type=int, default=3, help="renders and page loads per folder; the best is shown")
    ap.add_argument("--jobs", type=int, default=1, help="processes for the analysis")
    ap.add_argument("--reports", type=Path, help="folder of pickled Reports, reused across runs")
    ap.add_argument("--keep", type=Path, help="folder to keep the last page of each cluster in")
    ap.add_argument("--chromium", type=Path, default=CHROMIUM)
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    reports = [(f, load_report(f, args.reports, args.jobs)) for f in args.folders]
    print(HEADER)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(args.chromium), args=ARGS)
        for folder, report in reports:
            out = (args.keep or Path(tmp)) / f"{folder.name}.html"
            out.parent.mkdir(parents=True, exist_ok=True)
            runs = [one_run(browser, report, out) for _ in range(args.repeat)]
            print(row(folder, len(report.source.get("ranks", [])), best(runs)), flush=True)
        browser.close()


if __name__ == "__main__":
    main()
