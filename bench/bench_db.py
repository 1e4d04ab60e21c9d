"""Benchmark: torch_npu's DB export (``ascend_pytorch_profiler_{rank}.db``) of about 1 GB — how fast its kernel rows
reach polars by each way there is, and profan's read of it.

Why: a DB export of a long run is as big as its text export, and SQLite rows reach Python one tuple at a time
unless a driver hands over Arrow columns. The yardstick is the fastest way found to get the rows profan reads (TASK
joined to COMPUTE_TASK_INFO, integer columns) into a polars DataFrame; profan's whole analysis of the DB should stay
within 2x of it and under 1 GB peak RSS.

The big DB is the bundled rank-0 DB (fixtures/ascend/msinsight-alexnet-2rank-2025-db/level1) with its TASK and
COMPUTE_TASK_INFO rows doubled in SQLite until the file reaches the size asked: each copy gets new globalTaskIds
and is shifted past the previous ones in time; STEP_TIME is then rewritten as ``--steps`` equal steps over the
whole span. Every other table is kept as it is.

Each measurement runs in a fresh child process (wall time and the child's peak RSS from getrusage), ``--runs``
times each.

Usage (from the repository root)::

    python bench/bench_db.py                     # ~1 GB DB in bench/data/, 2 runs each
    python bench/bench_db.py --size-gb 0.2 --runs 1

Not a test: it takes minutes and its figures depend on the machine. Results are recorded in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "fixtures/ascend/msinsight-alexnet-2rank-2025-db/level1/rank0_ascend_pt"
DB_NAME = "ascend_pytorch_profiler_0.db"
QUERY = (  # the columns profan reads (`ascend_db_kernels.compute_rows`)
    "SELECT t.rowid, t.globalTaskId, t.startNs, t.endNs, c.name, c.opType, c.taskType, c.inputShapes "
    "FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId"
)

# Each way of getting QUERY's rows into polars, as a child script: argv[1] is the DB, argv[2] the query.
WAYS = {
    "sqlite3 fetchall -> pl.DataFrame": """
import sqlite3, sys, polars as pl
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1", uri=True)
cur = c.execute(sys.argv[2]); names = [d[0] for d in cur.description]
df = pl.DataFrame(cur.fetchall(), schema=names, orient="row")
print(df.height)
""",
    "sqlite3 fetchmany(2^18) -> pl.DataFrame chunks (profan without ADBC)": """
import sys, polars as pl
from pathlib import Path
from profan.sources.ascend_db import sqlite as ascend_db_sqlite
from profan.sources.ascend_db.kernels import compute_rows
ascend_db_sqlite.NO_ADBC = True
df = compute_rows(ascend_db_sqlite.open_db(Path(sys.argv[1])))
print(df.height)
""",
    "profan ascend_db_kernels.compute_rows (ADBC, its lean columns)": """
import sys, polars as pl
from pathlib import Path
from profan.sources.ascend_db import sqlite as ascend_db_sqlite
from profan.sources.ascend_db.kernels import compute_rows
df = compute_rows(ascend_db_sqlite.open_db(Path(sys.argv[1])))
print(df.height)
""",
    "pl.read_database(sqlite3 connection)": """
import sqlite3, sys, polars as pl
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1", uri=True)
df = pl.read_database(sys.argv[2], c)
print(df.height)
""",
    "ADBC sqlite driver -> Arrow -> polars": """
import sys, polars as pl
import adbc_driver_sqlite.dbapi as a
with a.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1") as c, c.cursor() as cur:
    cur.execute(sys.argv[2]); df = pl.from_arrow(cur.fetch_arrow_table())
print(df.height)
""",
    "connectorx -> Arrow -> polars": """
import sys, polars as pl, connectorx as cx
df = pl.from_arrow(cx.read_sql(f"sqlite://{sys.argv[1]}", sys.argv[2], return_type="arrow"))
print(df.height)
""",
}

PROFAN = """
import sys
from profan.pipeline import analyze
r = analyze(sys.argv[1])
print(sum(int(t["kernels"]) for t in r.breakdown.to_dicts()))
"""

MEASURED = """
import resource, runpy, sys, time
t = time.perf_counter()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
ru = resource.getrusage(resource.RUSAGE_SELF)
print("WALL", time.perf_counter() - t, "CPU", ru.ru_utime + ru.ru_stime, "RSS_KB", ru.ru_maxrss, file=sys.stderr)
"""


def generate(out_dir: Path, size_bytes: int, steps: int) -> Path:
    """The big DB in ``out_dir``'s rank folder (made once; kept when it exists and is big enough)."""
    rank = out_dir / "rank0_ascend_pt"
    db = rank / "ASCEND_PROFILER_OUTPUT" / DB_NAME
    if db.exists() and db.stat().st_size >= size_bytes * 0.9:
        return db
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shutil.copytree(SOURCE, rank, ignore=shutil.ignore_patterns("analysis.db"))
    db.chmod(0o644)
    c = sqlite3.connect(db)
    c.execute("PRAGMA journal_mode=OFF")
    c.execute("PRAGMA synchronous=OFF")
    span0, span1 = c.execute("SELECT min(startNs), max(endNs) FROM TASK").fetchone()
    shift = span1 - span0 + 1_000_000
    while (size := db.stat().st_size) < size_bytes:
        (top,) = c.execute("SELECT max(globalTaskId) + 1 FROM TASK").fetchone()
        k = c.execute("SELECT (max(endNs) - min(startNs)) / ? + 1 FROM TASK", (shift,)).fetchone()[0]
        # the last round copies only the tasks still needed (the file grows about in proportion to them)
        upto = top + int(top * min(1.0, (size_bytes - size) / size)) + 1
        c.execute(
            "INSERT INTO COMPUTE_TASK_INFO SELECT name, globalTaskId + ?, blockDim, mixBlockDim, taskType, opType, "
            "inputFormats, inputDataTypes, inputShapes, outputFormats, outputDataTypes, outputShapes, attrInfo, waitNs "
            "FROM COMPUTE_TASK_INFO WHERE globalTaskId + ? < ?",
            (top, top, upto),
        )
        c.execute(
            "INSERT INTO TASK SELECT startNs + ?, endNs + ?, deviceId, connectionId, globalTaskId + ?, globalPid, "
            "taskType, contextId, streamId, taskId, modelId, depth FROM TASK WHERE globalTaskId + ? < ?",
            (k * shift, k * shift, top, top, upto),
        )
        c.commit()
        print(
            f"  TASK rows {c.execute('SELECT count(*) FROM TASK').fetchone()[0]:,}, "
            f"file {db.stat().st_size / 1e9:.2f} GB",
            flush=True,
        )
    lo, hi = c.execute("SELECT min(startNs), max(endNs) + 1 FROM TASK").fetchone()
    c.execute("DELETE FROM STEP_TIME")
    width = (hi - lo) // steps + 1
    c.executemany(
        "INSERT INTO STEP_TIME (id, startNs, endNs) VALUES (?, ?, ?)",
        [(i + 1, lo + i * width, lo + (i + 1) * width - 1) for i in range(steps)],
    )
    c.commit()
    c.close()
    return db


def measure(script: str, *args: str) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one child process running ``script``. CPU time (user + system) is the
    figure to compare on a shared machine: wall time there also counts the time other processes held the cores."""
    path = Path("/tmp/profan_bench_db_child.py")
    path.write_text(script)
    res = subprocess.run(
        [sys.executable, "-c", MEASURED, str(path), *args], capture_output=True, text=True, check=False, cwd=REPO
    )
    if res.returncode != 0:
        raise SystemExit(f"{script[:60]!r} failed: {res.stderr[-2000:]}")
    line = next(x for x in res.stderr.splitlines() if x.startswith("WALL"))
    _, wall, _, cpu, _, rss = line.split()
    return float(wall), float(cpu), int(rss) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench/data/db_1gb")
    ap.add_argument("--skip", default="", help="comma-separated ways to leave out (substring match)")
    args = ap.parse_args()
    db = generate(args.out, int(args.size_gb * 1e9), args.steps)
    c = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    rows = c.execute("SELECT count(*) FROM TASK").fetchone()[0]
    c.close()
    print(f"DB {db.stat().st_size:,} bytes, TASK rows {rows:,}, {args.steps} steps; load {os.getloadavg()}")
    results = {}
    skip = [s for s in args.skip.split(",") if s]
    for name, script in [*WAYS.items(), ("profan analyze (whole pipeline)", PROFAN)]:
        if any(s in name for s in skip):
            continue
        target = str(args.out) if script is PROFAN else str(db)
        runs = [measure(script, target, QUERY) for _ in range(args.runs)]
        results[name] = runs
        print(
            f"| {name} | " + " | ".join(f"{w:.1f} s wall, {c:.1f} s CPU, {r:,.0f} MB" for w, c, r in runs) + " |",
            flush=True,
        )
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
