#!/usr/bin/env bash
# Every measurement behind the scale issue's targets, one after the other in one series (so their ratios share the
# host's load), each script's full output kept in LOG_DIR and its summary lines printed. Not a test: it takes
# 30-45 minutes on 2 cores and writes ~7.5 GB of generated inputs (bench/data/, DATA_DIR).
#
#   bash bench/run_all.sh [LOG_DIR] [DATA_DIR]        # defaults: /tmp/profan-bench-logs, /tmp/profan-bench-scale
#
# Needs the bench extra (pandas, the json + pandas baseline) and, for the HTA comparison, HTA in a venv of its own
# (never a profan dependency): python3 -m venv /tmp/htavenv && /tmp/htavenv/bin/pip install HolisticTraceAnalysis
# (or HTA_PYTHON=/path/to/python naming another).
# The HTML page is measured in Debian's Chromium through Playwright (the test extra). Whatever is missing is
# skipped with a line saying so.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=${1:-/tmp/profan-bench-logs}
data=${2:-/tmp/profan-bench-scale}
mkdir -p "$logs"
py=${PYTHON:-python}
hta_py=${HTA_PYTHON:-/tmp/htavenv/bin/python}

step() {  # step NAME PATTERN COMMAND...: run, keep the log, print the lines matching PATTERN
  local name=$1 pattern=$2
  shift 2
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  grep -E "$pattern" "$logs/$name.log"
  echo "   ($name: exit $rc, $((SECONDS - t0)) s; log $logs/$name.log)"
}

echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ), profan $(git rev-parse --short HEAD)"
step kernels "^\||×|target|RSS" "$py" bench/bench_kernels.py --size-gb 0.944 --runs 3
step trace_view "run [0-9]|×|RSS|target" "$py" bench/bench_trace.py --ascend --size-mb 770 --repeat 3
if [ -x "$hta_py" ]; then
  step hta "^\||×|load" "$py" bench/bench_hta.py --runs 3 --hta-python "$hta_py"
  # a real 8-rank job's step repeated to 100 steps (~83 MB a rank), and the same job as 32 ranks (~2.7 GB)
  step kineto8 "^\||×|load|RSS" "$py" bench/bench_kineto_scale.py --ranks 8 --steps 100 --runs 3 \
    --hta-python "$hta_py"
  step kineto32 "^\||×|load|RSS" "$py" bench/bench_kineto_scale.py --ranks 32 --steps 100 --runs 1 \
    --hta-python "$hta_py"
else
  echo "== hta: skipped (no HTA at $hta_py)"
fi
step help "real" bash -c "for i in 1 2 3; do { time profan --help >/dev/null; } 2>&1; done"
step serving "^\||×|^  run" "$py" bench/bench_serving.py --iterations 10000 --runs 3 --data-dir "$data"
step scale "^\|" "$py" bench/bench_scale.py --ranks 1 16 64 256 1000 --data "$data"
if [ -x /usr/bin/chromium ]; then
  step html "^\||met|interactive" "$py" bench/bench_html.py "$data/r64" "$data/r1000" --repeat 3
else
  echo "== html: skipped (no /usr/bin/chromium)"
fi
