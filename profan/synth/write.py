"""The synthetic cluster's files: what torch_npu writes for each simulated rank (`profan.synth.model._Sim`) —
kernel_details.csv, step_trace_time.csv, communication.json, communication_matrix.json, trace_view.json, the
profiler_info/metadata files — and ground_truth.json beside them."""

from __future__ import annotations

import csv
import json
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from profan.synth.model import RANKS_PER_NODE, Group, Row, _Sim, group_of

EPOCH_US = 1_764_246_877_000_000.0  # a plausible epoch-µs origin (2025-11)
HOST_PID = 41000

KERNEL_HEADER_LINE = (  # the K4 header of CANN 8.3 with PipeUtilization, exactly as written
    "Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),Duration(us),"
    "Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
    "Output Data Types,Output Formats,Context ID,aicore_time(us),aic_total_cycles,aic_mac_time(us),aic_mac_ratio,"
    "aic_scalar_time(us),aic_scalar_ratio,aic_mte1_time(us),aic_mte1_ratio,aic_mte2_time(us),aic_mte2_ratio,"
    "aic_fixpipe_time(us),aic_fixpipe_ratio,aic_icache_miss_rate,aiv_time(us),aiv_total_cycles,aiv_vec_time(us),"
    "aiv_vec_ratio,aiv_scalar_time(us),aiv_scalar_ratio,aiv_mte2_time(us),aiv_mte2_ratio,aiv_mte3_time(us),"
    "aiv_mte3_ratio,aiv_icache_miss_rate,cube_utilization(%)"
)
KERNEL_HEADER = KERNEL_HEADER_LINE.split(",")
STEP_HEADER = [
    "Device_id",
    "Step",
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
]
TRANSPORTS = ("RDMA", "HCCS", "PCIE", "SDMA", "SIO")
MATRIX_TYPES = (
    "send",
    "reduce",
    "invalid",
    "broadcast",
    "allreduce",
    "receive",
    "allgather",
    "reducescatter",
    "scatter",
    "alltoall",
    "alltoallv",
    "alltoallvc",
    "batchsendrecv",
)
_MATRIX_TYPE = re.compile("|".join(MATRIX_TYPES))


# ------------------------------------------------------------------------------------------------- writing


def _pick(v, r: int):
    return v[r] if isinstance(v, list) else v


def _fmt_ts(us: float) -> str:
    return f"{us:.3f}"


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _subtract(xs: list[tuple[float, float]], ys: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    for a, b in xs:
        cur = a
        for c, d in ys:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


def _length(xs: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in xs)


def _pipes(core: str, rng: random.Random, dur: float) -> list[str]:
    """The 25 PMU columns after Context ID: plausible ratios for cube / vector / mixed kernels."""
    if core == "COMMUNICATION":
        return ["N/A"] * 25
    cube = core in ("AI_CORE", "MIX_AIC")
    vec = core in ("AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
    mac = round(0.6 + 0.2 * rng.random(), 3) if cube else 0.0
    aic = [
        round(dur, 3) if cube else 0.0,
        int(dur * 1800) if cube else 0,
        round(dur * mac, 3),
        mac,
        round(dur * 0.05, 3) if cube else 0.0,
        0.05 if cube else 0.0,
        round(dur * 0.2, 3) if cube else 0.0,
        0.2 if cube else 0.0,
        round(dur * 0.3, 3) if cube else 0.0,
        0.3 if cube else 0.0,
        round(dur * 0.1, 3) if cube else 0.0,
        0.1 if cube else 0.0,
        0.01 if cube else 0.0,
    ]
    vr = round(0.3 + 0.3 * rng.random(), 3) if vec else 0.0
    aiv = [
        round(dur, 3) if vec else 0.0,
        int(dur * 1800) if vec else 0,
        round(dur * vr, 3),
        vr,
        round(dur * 0.05, 3) if vec else 0.0,
        0.05 if vec else 0.0,
        round(dur * 0.6, 3) if vec else 0.0,
        0.6 if vec else 0.0,
        round(dur * 0.2, 3) if vec else 0.0,
        0.2 if vec else 0.0,
        0.01 if vec else 0.0,
    ]
    cu = round(100 * mac * 0.9, 3) if cube else 0.0
    return [str(x) for x in [*aic, *aiv, cu]]


def _block_dim(core: str) -> tuple[str, str]:
    return {
        "AI_CORE": ("24", "0"),
        "MIX_AIC": ("24", "48"),
        "AI_VECTOR_CORE": ("48", "0"),
        "COMMUNICATION": ("0", "N/A"),
    }.get(core, ("48", "0"))


@dataclass(frozen=True)
class RowPlace:
    """Where a task's row sits in its rank's kernel_details.csv: the rank, its device id, the start as written
    (skewed epoch µs) and the wait since the previous task ended."""

    rank: int
    device: str
    start: str
    wait: float


def _comm_kernel_row(row: Row, place: RowPlace) -> list:
    """An HCCL op's kernel_details row: no task id, shapes or PMU counters (N/A, as torch_npu writes them)."""
    return [
        row.step,
        place.device,
        4294967295,
        "N/A",
        "N/A",
        row.name,
        row.type,
        "N/A",
        row.core,
        place.start,
        f"{row.dur:.3f}",
        f"{place.wait:.6f}",
        0,
        *["N/A"] * 34,
    ]


def _compute_kernel_row(row: Row, place: RowPlace, task: int, rng: random.Random) -> list:
    """A compute kernel's kernel_details row at ``place``: its shapes, block dims and PMU counters."""
    block_dim, mix_block_dim = _block_dim(row.core)
    shapes = _pick(row.shapes, place.rank)
    out_shapes = _pick(row.out_shapes, place.rank)
    inputs = shapes.count(";") + 1
    return [
        row.step,
        place.device,
        4294967295,
        task,
        2,
        row.name,
        row.type,
        "dynamic",
        row.core,
        place.start,
        f"{row.dur:.3f}",
        f"{place.wait:.6f}",
        block_dim,
        mix_block_dim,
        "NO",
        shapes,
        row.dtypes,
        ";".join(["ND"] * inputs),
        out_shapes,
        "DT_BF16",
        "ND",
        "N/A",
        *_pipes(row.core, rng, row.dur),
    ]


def _trace_metadata(
    pid: int, hardware: int, hccl: int, ov: int, groups: list[Group], gtid: dict[str, int]
) -> list[dict]:
    """The process and lane names of a rank's trace: host, Ascend Hardware (stream 2), HCCL (a lane per group and
    up to 8 plane lanes after it) and Overlap Analysis (its four lanes)."""
    evidence: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "CPU"}},
        {"name": "process_name", "pid": hardware, "tid": 0, "args": {"name": "Ascend Hardware"}, "ph": "M"},
        {"name": "process_labels", "pid": hardware, "tid": 0, "args": {"labels": "NPU"}, "ph": "M"},
        {"name": "thread_name", "pid": hardware, "tid": 2, "args": {"name": "Stream 2"}, "ph": "M"},
        {"name": "process_name", "pid": hccl, "tid": 0, "args": {"name": "HCCL"}, "ph": "M"},
        {"name": "process_labels", "pid": hccl, "tid": 0, "args": {"labels": "NPU"}, "ph": "M"},
        {"name": "process_name", "pid": ov, "tid": 0, "args": {"name": "Overlap Analysis"}, "ph": "M"},
        {"name": "process_labels", "pid": ov, "tid": 0, "args": {"labels": "NPU"}, "ph": "M"},
    ]
    lanes = ["Computing", "Communication", "Communication(Not Overlapped)", "Free"]
    evidence += [
        {"name": "thread_name", "pid": ov, "tid": index, "args": {"name": lane}, "ph": "M"}
        for index, lane in enumerate(lanes)
    ]
    for group in groups:
        tid = gtid[group.hccl_name]
        evidence.append(
            {
                "name": "thread_name",
                "pid": hccl,
                "tid": tid,
                "args": {"name": f"Group {group.hash} Communication"},
                "ph": "M",
            }
        )
        for pl_ in range(min(8, len(group.ranks) - 1)):
            evidence.append(
                {"name": "thread_name", "pid": hccl, "tid": tid + 1 + pl_, "args": {"name": f"Plane {pl_}"}, "ph": "M"}
            )
    return evidence


class _Writer:
    def __init__(self, sim: _Sim, out: Path):
        self.sim, self.p, self.out = sim, sim.p, out
        rng = random.Random(sim.p.seed + 7)
        nodes = (sim.p.ranks + RANKS_PER_NODE - 1) // RANKS_PER_NODE
        self.skew = [0.0] + [rng.uniform(-1, 1) * sim.p.clock_skew_us for _ in range(nodes - 1)]

    def clock(self, rank: int, t: float) -> float:
        return EPOCH_US + t + self.skew[rank // RANKS_PER_NODE]

    def rank_dir(self, r: int) -> Path:
        return self.out / f"synth-node{r // RANKS_PER_NODE}_{HOST_PID + r}_20251127190000{r % 1000:03d}_ascend_pt"

    def write(self) -> dict:
        for index in range(self.p.ranks):
            d = self.rank_dir(index)
            (d / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True, exist_ok=True)
            self.kernel_details(index, d)
            self.step_trace(index, d)
            self.communication(index, d)
            self.matrix(index, d)
            if self.p.trace:
                self.trace_view(index, d)
            self.info(index, d)
            self.metadata(index, d)
        text = json.dumps(self.ground_truth(), indent=1)
        (self.out / "ground_truth.json").write_text(text)
        return json.loads(text)  # as a reader sees it (rank keys are strings)

    def kernel_details(self, r: int, path: Path) -> None:
        rng = random.Random(self.p.seed * 1000 + r)
        with open(path / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", "w", newline="", encoding="utf-8") as handle:
            w = csv.writer(handle, lineterminator="\n")
            w.writerow(KERNEL_HEADER)
            prev_end = None
            task = 30000
            for row in self.sim.rows[r]:
                task += 1
                wait = 0.0 if prev_end is None else max(0.0, row.start - prev_end)
                prev_end = row.start + row.dur
                place = RowPlace(r, str(r % RANKS_PER_NODE), _fmt_ts(self.clock(r, row.start)) + "\t", wait)
                if row.core == "COMMUNICATION":
                    w.writerow(_comm_kernel_row(row, place))
                else:
                    w.writerow(_compute_kernel_row(row, place, task, rng))

    def _step_rows(self, r: int, step: int) -> list[Row]:
        return [row for row in self.sim.rows[r] if row.step == step]

    def step_trace(self, r: int, path: Path) -> None:
        with open(path / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", "w", newline="", encoding="utf-8") as handle:
            w = csv.writer(handle, lineterminator="\n")
            w.writerow(STEP_HEADER)
            for step, (s0, s1) in self.sim.step_bounds.items():
                rows = self._step_rows(r, step)
                comp = _union([(row.start, row.start + row.dur) for row in rows if row.core != "COMMUNICATION"])
                comm = _union([(row.start, row.start + row.dur) for row in rows if row.core == "COMMUNICATION"])
                notov = _subtract(comm, comp)
                busy = _length(_union(comp + comm))
                free = (s1 - s0) - busy
                prep = min(row.start for row in rows) - s0
                w.writerow(
                    [
                        r % RANKS_PER_NODE,
                        step,
                        _length(comp),
                        _length(notov),
                        _length(comm) - _length(notov),
                        _length(comm),
                        free,
                        s1 - s0,
                        0,
                        _length(notov),
                        prep,
                    ]
                )

    def _comm_ops(self, r: int, step: int) -> list[Row]:
        return [x for x in self._step_rows(r, step) if x.core == "COMMUNICATION"]

    def _bw_info(self, r: int, x: Row) -> dict:
        """Bandwidth per transport of one op on rank r: intra-node peers over HCCS, others over RDMA."""
        info = {}
        for trace in TRANSPORTS:
            peers = {
                key: value
                for key, value in x.links.items()
                if (trace == "HCCS" and key // RANKS_PER_NODE == r // RANKS_PER_NODE)
                or (trace == "RDMA" and key // RANKS_PER_NODE != r // RANKS_PER_NODE)
            }
            size = x.size_mb * len(peers) / max(1, len(x.links)) if peers else 0
            t = max(peers.values()) if peers else 0
            info[trace] = {
                "Transit Size(MB)": size,
                "Transit Time(ms)": round(t, 5),
                "Bandwidth(GB/s)": round(size / t, 4) if t else 0,
                "Large Packet Ratio": 1.0 if size else 0,
                "Size Distribution": {f"{size / max(1, len(peers)):.6f}": [len(peers), round(t, 5)]} if size else {},
            }
        return info

    def communication(self, r: int, path: Path) -> None:
        doc = {}
        for step in self.sim.step_bounds:
            ops = {}
            tot = dict.fromkeys(
                ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)"),
                0.0,
            )
            for x in self._comm_ops(r, step):
                el = x.dur / 1000.0
                idle = max(0.0, el - x.transit_ms - x.wait_ms)
                ops[f"{x.name}@{x.group.hash}"] = {
                    "Communication Time Info": {
                        "Start Timestamp(us)": round(self.clock(r, x.start), 3),
                        "Elapse Time(ms)": el,
                        "Transit Time(ms)": x.transit_ms,
                        "Wait Time(ms)": x.wait_ms,
                        "Synchronization Time(ms)": x.wait_ms,
                        "Idle Time(ms)": idle,
                        "Wait Time Ratio": round(x.wait_ms / (x.wait_ms + x.transit_ms), 4)
                        if x.wait_ms + x.transit_ms
                        else 0,
                        "Synchronization Time Ratio": round(x.wait_ms / (x.wait_ms + x.transit_ms), 4)
                        if x.wait_ms + x.transit_ms
                        else 0,
                    },
                    "Communication Bandwidth Info": self._bw_info(r, x),
                }
                for key, v in (
                    ("Elapse Time(ms)", el),
                    ("Transit Time(ms)", x.transit_ms),
                    ("Wait Time(ms)", x.wait_ms),
                    ("Synchronization Time(ms)", x.wait_ms),
                    ("Idle Time(ms)", idle),
                ):
                    tot[key] += v
            if ops:
                ops["Total Op Info"] = {
                    "Communication Time Info": {**tot, "Wait Time Ratio": 0, "Synchronization Time Ratio": 0},
                    "Communication Bandwidth Info": {},
                }
            doc[f"step{step}"] = {"p2p": {}, "collective": ops}
        (path / "ASCEND_PROFILER_OUTPUT" / "communication.json").write_text(json.dumps(doc))

    def matrix(self, r: int, path: Path) -> None:
        """Aggregated shape: ``<type>-top1/middle/bottom1-3/total@hash`` -> ``{"src-dst": link}`` (group-local)."""
        doc = {}
        for step in self.sim.step_bounds:
            sect: dict = {}
            by_key: dict[tuple[str, int], list[Row]] = {}
            for x in self._comm_ops(r, step):
                low = x.type.lower()
                match = _MATRIX_TYPE.search(low)  # first regex hit, as torch_npu does (alltoallv -> alltoall)
                t = match.group(0) if match else "invalid"
                by_key.setdefault((t, x.group.hash), []).append(x)
            for (t, h), xs in by_key.items():
                g = xs[0].group
                me = g.ranks.index(r)
                xs = sorted(xs, key=lambda x: x.dur, reverse=True)
                picks = {"top1": xs[0], "middle": xs[len(xs) // 2], "bottom1": xs[-1]}
                for label, x in picks.items():
                    sect[f"{t}-{label}@{h}"] = {
                        f"{me}-{g.ranks.index(link)}": self._link(r, link, x, True) for link in x.links
                    }
                sect[f"{t}-total@{h}"] = {
                    f"{me}-{g.ranks.index(link)}": {
                        key: value for key, value in self._link(r, link, xs[0], False, xs).items()
                    }
                    for link in xs[0].links
                }
            doc[f"step{step}"] = {"p2p": {}, "collective": sect}
        (path / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json").write_text(json.dumps(doc))

    def _link(self, r: int, q: int, x: Row, with_name: bool, xs: list[Row] | None = None) -> dict:
        xs = xs or [x]
        size = sum(y.size_mb / max(1, len(y.links)) for y in xs)
        t = sum(y.links.get(q, 0.0) for y in xs)
        same = q // RANKS_PER_NODE == r // RANKS_PER_NODE
        link = {
            "Transport Type": "HCCS" if same else "RDMA",
            "Transit Size(MB)": size,
            "Transit Time(ms)": round(t, 5),
            "Bandwidth(GB/s)": round(size / t, 4) if t else 0,
        }
        if with_name:
            link["Op Name"] = x.name
        return link

    def trace_view(self, r: int, path: Path) -> None:
        """The rank's trace_view.json: process and lane names, ProfilerStep spans, device tasks (compute on the
        hardware stream, HCCL ops and their per-peer copies on group lanes) and the Overlap Analysis lanes."""
        dev = r % RANKS_PER_NODE
        pid = HOST_PID + r

        def fpid(sort_index: int) -> int:
            return (pid << 10) | (sort_index << 5) | dev

        hardware, hccl, ov = fpid(13), fpid(15), fpid(23)
        groups = sorted(
            {row.group.hccl_name: row.group for row in self.sim.rows[r] if row.group}.values(),
            key=lambda group: group.hccl_name,
        )
        gtid = {group.hccl_name: index * 16 for index, group in enumerate(groups)}
        evidence = _trace_metadata(pid, hardware, hccl, ov, groups, gtid)
        for step, (s0, s1) in self.sim.step_bounds.items():
            evidence.append(
                {
                    "ph": "X",
                    "name": f"ProfilerStep#{step}",
                    "pid": pid,
                    "tid": pid,
                    "ts": _fmt_ts(self.clock(r, s0)),
                    "dur": round(s1 - s0, 3),
                    "cat": "cpu_op",
                    "args": {},
                }
            )
        conn = 1000
        for row in self.sim.rows[r]:
            conn += 1
            if row.core != "COMMUNICATION":
                evidence.append(self._compute_event(r, row, hardware, conn))
            else:
                evidence += self._hccl_events(r, row, hccl, gtid[row.group.hccl_name], conn)
        evidence += self._overlap_events(r, ov)
        with open(path / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", "w", encoding="utf-8") as handle:
            json.dump(evidence, handle, separators=(",", ":"))

    def _compute_event(self, r: int, x: Row, hardware: int, conn: int) -> dict:
        """A compute kernel on the Ascend Hardware stream."""
        return {
            "name": x.name,
            "pid": hardware,
            "tid": 2,
            "ts": _fmt_ts(self.clock(r, x.start)),
            "dur": round(x.dur, 6),
            "args": {
                "Model Id": 4294967295,
                "Task Type": "AI_CORE" if "AIC" in x.core or x.core == "AI_CORE" else "AI_VECTOR_CORE",
                "Physic Stream Id": 2,
                "Task Id": conn,
                "Batch Id": 0,
                "Subtask Id": 4294967295,
                "connection_id": conn,
            },
            "ph": "X",
        }

    def _hccl_events(self, r: int, x: Row, hccl: int, tid: int, conn: int) -> list[dict]:
        """An HCCL op on its group's lane, then one Memcpy per peer (at most 8) on the group's plane lanes, all
        ending with the op: the transfer is its last ``transit_ms``."""
        evidence = [
            {
                "name": x.name,
                "pid": hccl,
                "tid": tid,
                "ts": _fmt_ts(self.clock(r, x.start)),
                "dur": round(x.dur, 6),
                "args": {
                    "connection_id": conn,
                    "model id": 4294967295,
                    "data_type": "BF16",
                    "alg_type": "MESH",
                    "count": x.count,
                },
                "ph": "X",
            }
        ]
        t0 = x.start + x.dur - x.transit_ms * 1000
        for index, q in enumerate(sorted(x.links)[:8]):
            same_node = q // RANKS_PER_NODE == r // RANKS_PER_NODE
            evidence.append(
                {
                    "name": "Memcpy",
                    "pid": hccl,
                    "tid": tid + 1 + index,
                    "ts": _fmt_ts(self.clock(r, t0)),
                    "dur": round(x.links[q] * 1000, 6),
                    "args": {
                        "notify_id": "4294967295",
                        "duration estimated(us)": round(x.links[q] * 1000, 3),
                        "stream id": 3,
                        "task id": conn,
                        "context id": index,
                        "task type": "Memcpy",
                        "src rank": x.group.ranks.index(r),
                        "dst rank": x.group.ranks.index(q),
                        "transport type": "SDMA" if same_node else "RDMA",
                        "size(Byte)": int(x.size_mb * 1e6 / max(1, len(x.links))),
                        "data type": "BF16",
                        "link type": "HCCS" if same_node else "ROCE",
                        "bandwidth(GB/s)": round(x.size_mb / max(1, len(x.links)) / x.links[q], 4)
                        if x.links[q]
                        else 0.0,
                        "model id": 4294967295,
                    },
                    "ph": "X",
                }
            )
        return evidence

    def _overlap_events(self, r: int, ov: int) -> list[dict]:
        """The Overlap Analysis lanes per step: Computing, Communication, Communication(Not Overlapped), Free."""
        evidence: list[dict] = []
        for step, (s0, s1) in self.sim.step_bounds.items():
            rows = self._step_rows(r, step)
            comp = _union([(row.start, row.start + row.dur) for row in rows if row.core != "COMMUNICATION"])
            comm = _union([(row.start, row.start + row.dur) for row in rows if row.core == "COMMUNICATION"])
            free = _subtract([(s0, s1)], _union(comp + comm))
            for tid, name, spans in (
                (0, "Computing", comp),
                (1, "Communication", comm),
                (2, "Communication(Not Overlapped)", _subtract(comm, comp)),
                (3, "Free", free),
            ):
                evidence += [
                    {
                        "name": name,
                        "pid": ov,
                        "tid": tid,
                        "ts": _fmt_ts(self.clock(r, a)),
                        "dur": round(b - a, 3),
                        "ph": "X",
                    }
                    for a, b in spans
                ]
        return evidence

    def info(self, r: int, path: Path) -> None:
        doc = {
            "config": {
                "common_config": {
                    "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                    "schedule": {
                        "wait": 0,
                        "active": self.p.steps,
                        "warmup": 1,
                        "repeat": 1,
                        "skip_first": self.p.first_step - 1,
                    },
                    "record_shapes": True,
                    "profile_memory": False,
                    "with_stack": False,
                    "with_flops": False,
                    "with_modules": False,
                },
                "experimental_config": {
                    "_profiler_level": "Level1",
                    "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                    "_l2_cache": False,
                    "_msprof_tx": False,
                    "_mstx": False,
                    "_data_simplification": True,
                    "record_op_args": False,
                    "_export_type": ["text"],
                },
            },
            "start_info": {"syscnt_enable": True, "freq": 100},
            "end_info": {},
            "torch_npu_version": "2.7.1",
            "cann_version": "8.3.RC1",
            "rank_id": str(r),
        }
        (path / f"profiler_info_{r}.json").write_text(json.dumps(doc, indent=4))

    def metadata(self, r: int, path: Path) -> None:
        p = self.p
        info = {}
        for kind in ("world", "tp", "dp", "exp"):
            g = group_of(self.sim.groups, kind, r)
            info[g.hccl_name] = {"group_name": g.group_name, "group_rank": g.ranks.index(r), "global_ranks": g.ranks}
        doc = {
            "distributed_args": {
                "tensor_model_parallel_size": p.tp,
                "pipeline_model_parallel_size": 1,
                "data_parallel_size": p.ranks // p.tp,
                "context_parallel_size": 1,
                "expert_model_parallel_size": p.ep,
                "sequence_parallel": p.tp > 1,
                "rank": r,
                "world_size": p.ranks,
            },
            "ENV_VARIABLES": {"ASCEND_GLOBAL_LOG_LEVEL": "3"},
            "parallel_group_info": info,
        }
        (path / "profiler_metadata.json").write_text(json.dumps(doc))

    def ground_truth(self) -> dict:
        p, sim = self.p, self.sim
        truth: dict = {
            "params": {key: (list(value) if isinstance(value, tuple) else value) for key, value in asdict(p).items()},
            "steps": list(sim.step_bounds),
            "rank_dirs": {r: self.rank_dir(r).name for r in range(p.ranks)},
            "groups": {
                g.hccl_name: {"group_name": g.group_name, "ranks": g.ranks, "hash": str(g.hash)}
                for group in sim.groups.values()
                for g in group
            },
            "straggler": None,
            "expert_imbalance": None,
            "slow_link": None,
            "slow_kernel": None,
        }
        if p.straggler_rank is not None:
            truth["straggler"] = {
                "rank": p.straggler_rank,
                "kind": p.straggler_kind,
                "cause_class": "compute" if p.straggler_kind == "compute" else "host_gap",
                "op": p.straggler_op if p.straggler_kind == "compute" else None,
                "extra_us_per_step": p.straggler_extra_us,
            }
        if p.hot_expert is not None and p.hot_factor != 1.0:
            recv = [sim._recv_tokens(layer) for layer in range(p.layers)]
            per_rank = [sum(x[r] for x in recv) for r in range(p.ranks)]
            mean = sum(per_rank) / len(per_rank)
            hot_rank = max(range(p.ranks), key=lambda r: per_rank[r])
            per_expert = [sum(token[index] for token in sim.tokens) for index in range(p.experts)]
            truth["expert_imbalance"] = {
                "hot_expert": p.hot_expert,
                "hot_rank": hot_rank,
                "experts_of_hot_rank": [
                    group_of(sim.groups, "exp", hot_rank).ranks.index(hot_rank) * p.experts_per_rank + j
                    for j in range(p.experts_per_rank)
                ],
                "tokens_per_rank": per_rank,
                "tokens_per_expert": per_expert,
                "rank_max_over_mean": max(per_rank) / mean,
                "expert_max_over_mean": max(per_expert) / (sum(per_expert) / len(per_expert)),
            }
        if p.slow_link is not None:
            truth["slow_link"] = {"ranks": list(p.slow_link), "factor": p.slow_link_factor}
        if p.slow_kernel is not None:
            truth["slow_kernel"] = {"op": p.slow_kernel, "factor": p.slow_kernel_factor}
        return truth
