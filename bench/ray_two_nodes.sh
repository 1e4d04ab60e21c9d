#!/usr/bin/env bash
# Ray beyond one machine, on one machine: a head node and a second node (`ray start --address`, CPUs of its
# own), then `analyze --executor ray --ray-address` of a 64-rank job against it. Prints whether the JSON report
# equals the local run's (timings aside) and the ranks each node read. Not a test (two Ray nodes take ~1 GB and
# half a minute to start on 2 cores).
#
#   bash bench/ray_two_nodes.sh [RANKS] [WORK_DIR]     # defaults: 64, /tmp/profan-ray-two-nodes
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-64}
work=${2:-/tmp/profan-ray-two-nodes}
port=${RAY_PORT:-6391}
py=${PYTHON:-python}
profan=${PROFAN:-profan}
mkdir -p "$work"
trap 'ray stop --force >/dev/null 2>&1 || true' EXIT
# Ray's token authentication: every node and the driver read the same token (on a real cluster, copy it to each
# node or set RAY_AUTH_TOKEN there)
export RAY_AUTH_MODE=token
ray get-auth-token --generate >/dev/null
"$py" -c "from profan.synth import generate; generate('$work/job', ranks=$ranks, layers=1, steps=2, seed=7, straggler_rank=9, straggler_extra_us=4000.0, trace=False)"
ray start --head --port "$port" --num-cpus 1 --include-dashboard false --disable-usage-stats >/dev/null
ray start --address "127.0.0.1:$port" --num-cpus 1 --disable-usage-stats >/dev/null
echo "nodes: $("$py" -c "import ray; ray.init(address='127.0.0.1:$port', logging_level='error'); print(len([n for n in ray.nodes() if n['Alive']])); ray.shutdown()")"
"$profan" analyze "$work/job" -j 1 -q -f json -o "$work/local.json"
t0=$SECONDS
"$profan" analyze "$work/job" --executor ray --ray-address "127.0.0.1:$port" -v -f json -o "$work/ray.json" 2>"$work/ray.log"
echo "ray run: $((SECONDS - t0)) s"
grep -E "ranks read per node|at a time" "$work/ray.log"
if diff <(grep -vE '"(read|analyse|discover|diagnose|render)":' "$work/local.json") \
        <(grep -vE '"(read|analyse|discover|diagnose|render)":' "$work/ray.json") >/dev/null; then
  echo "report: identical to the local run (timings aside)"
else
  echo "report: DIFFERS from the local run"; exit 1
fi
