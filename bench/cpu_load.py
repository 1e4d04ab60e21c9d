"""Run one generator command and say how much of the machine other processes used meanwhile.

Why: on a shared machine, another process taking a core stretches some ranks' ops and makes a fault-free run look
imbalanced; a capture's PROVENANCE says how busy the machine was. Others' CPU is the machine's busy time over the
run (/proc/stat) less the command's own (its children's rusage); it prints one JSON line after the command's output:

    python bench/cpu_load.py --idle-wait 60 -- python bench/gloo_moe.py --fault none --out /tmp/x
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime


def busy_seconds() -> float:
    """The machine's busy CPU time so far (all cores; user, nice, system, irq, softirq, steal), in seconds."""
    with open("/proc/stat", encoding="ascii") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_idle(most_s: float, quiet_s: float = 3.0, share: float = 0.05) -> float:
    """Wait (at most ``most_s``) until the machine has been below ``share`` busy for ``quiet_s``; the seconds
    waited. Others' work that started later is still measured, not prevented."""
    t0 = time.perf_counter()
    cores = os.cpu_count() or 1
    while time.perf_counter() - t0 < most_s:
        before = busy_seconds()
        time.sleep(quiet_s)
        if busy_seconds() - before < share * quiet_s * cores:
            break
    return round(time.perf_counter() - t0, 1)


def main(argv: list[str]) -> int:
    waited = 0.0
    if argv[:1] == ["--idle-wait"]:
        waited, argv = wait_idle(float(argv[1])), argv[2:]
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    if not command:
        print("usage: cpu_load.py -- COMMAND ...", file=sys.stderr)
        return 2
    busy0, wall0 = busy_seconds(), time.perf_counter()
    rc = subprocess.call(command)
    wall, busy = time.perf_counter() - wall0, busy_seconds() - busy0
    own = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_s = own.ru_utime + own.ru_stime
    cores = os.cpu_count() or 1
    print(
        json.dumps(
            {
                "rc": rc,
                "waited_idle_s": waited,
                "wall_s": round(wall, 1),
                "own_cpu_s": round(own_s, 1),
                "others_cpu_s": round(max(busy - own_s, 0.0), 1),
                "others_share": round(max(busy - own_s, 0.0) / (wall * cores), 3),
                "ended": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
    )
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
