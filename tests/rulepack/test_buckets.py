"""Bucket rules as data, tested like semgrep's: every rule's examples are decided by that rule and by no earlier
one; hand-labelled kernels of real traces (tests/labels/) land in their bucket (≥ 95 % of the labelled device
time); no fixture leaves 5 % of its device time unclassified; and the evidence a rule used is kept (module,
forward op, place in the layer) — eager attention is attention, convolutions are conv, MoE stays MoE."""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import json
import re
from pathlib import Path

import polars as pl
import pytest
import tomllib
from conftest import FIXTURES, ROOT

from profan.rulepack.classify import MATCH_FIELDS, classify, classify_distinct
from profan.rulepack.pack import load
from profan.sources.trace import kineto, kineto_rank
from profan.sources.trace.kineto_context import module_paths

RULES = ROOT / "rules" / "buckets"
LABELS = Path(__file__).resolve().parents[1] / "labels"
TIMESFORMER = FIXTURES / "torch" / "timesformer_h100_1rank"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")  # and the 2020-21 names


@pytest.fixture(scope="module")
def pack():
    return load()


# ------------------------------------------------------------------------------------------- rule examples


def _examples() -> list[tuple[str, str, int, dict]]:
    out = []
    for path in sorted(RULES.glob("*.toml")):
        doc = tomllib.loads(path.read_text())
        applies = doc["pack"]["applies_to"]
        for rule in doc["rule"]:
            for i, row in enumerate(rule.get("examples", [])):
                out.append((applies, rule["id"], i, row))
    return out


def test_every_rule_has_examples():
    for path in sorted(RULES.glob("*.toml")):
        for rule in tomllib.loads(path.read_text())["rule"]:
            assert rule.get("examples"), f"{path.name}: rule {rule['id']} has no examples"
            for row in rule["examples"]:
                assert set(row) <= set(MATCH_FIELDS), f"{rule['id']}: example fields {set(row) - set(MATCH_FIELDS)}"
                assert set(rule["match"]) <= set(row), f"{rule['id']}: an example lacks a field the rule matches"


@pytest.mark.parametrize("applies, rule_id, i, row", _examples(), ids=lambda v: v if isinstance(v, str) else None)
def test_an_example_is_decided_by_its_rule_and_no_earlier_one(pack, applies, rule_id, i, row):
    frame = pl.DataFrame({f: [row.get(f)] for f in MATCH_FIELDS}, schema={f: pl.String for f in MATCH_FIELDS})
    if applies == "gpu" and row.get("op") is None:  # a trace's op is the short label of the name
        frame = frame.with_columns(kineto.op_of(pl.col("name")))
    got = classify(frame, pack.rules_for(applies)).row(0, named=True)
    assert got["rule_id"] == rule_id, f"example {i} of {rule_id} is decided by {got['rule_id']}: {row}"
    expected = next(r.bucket for r in pack.rules if r.id == rule_id)
    assert got["bucket"] == expected


def test_a_context_field_a_table_lacks_matches_nothing(pack):
    """Ascend rows have no `module`: a module rule must not fire there, nor raise."""
    frame = pl.DataFrame({"op": ["MatMulV3"], "name": ["MatMulV3"], "type": ["MatMulV3"], "core": ["AI_CORE"]})
    got = classify(frame, pack.rules_for("gpu")).row(0, named=True)
    assert got["rule_id"] == "GPU-GEMM-001" and got["decided_by"] is None


def test_verdicts_remembered_across_ranks_are_those_of_a_fresh_classification(pack):
    """`classify_distinct` remembers the verdicts of the kernels it has seen (a job's ranks share most of them):
    every rank of the real DLRM job gets, row for row, what classifying its events afresh gives, whatever was
    classified before it; and a rule list that differs is never answered from another's verdicts."""
    from profan.rulepack import classify as classifying

    classifying._verdicts.clear()
    rules = pack.rules_for("gpu")
    ranks = [kineto.load(p).device for p in sorted((FIXTURES / "torch" / "dlrm_v100_8rank").glob("*.json"))]
    assert len(ranks) == 8
    for dev in ranks:  # rank 0 fills the memo, the others mostly read it
        assert classify_distinct(dev, rules).equals(classify(dev, rules), null_equal=True)
    (remembered,) = classifying._verdicts.values()
    fresh = pl.concat([r.select(remembered.columns[:-3]) for r in ranks]).unique()
    assert remembered.height == fresh.height  # each distinct kernel of the job classified once
    # the same kernels under a pack where GEMMs are "other": a verdict of its own
    other = [dataclasses.replace(r, bucket="other") if r.bucket == "gemm" else r for r in rules]
    got = classify_distinct(ranks[0], other)
    assert set(got.filter(pl.col("rule_id") == "GPU-GEMM-001")["bucket"]) == {"other"}
    assert set(classify_distinct(ranks[0], rules).filter(pl.col("rule_id") == "GPU-GEMM-001")["bucket"]) == {"gemm"}
    assert len(classifying._verdicts) == 2
    # a long-lived process given many rules files keeps the verdicts of a few rule lists at a time
    for n in range(classifying.MEMO_LISTS + 1):
        classify_distinct(ranks[0], [dataclasses.replace(rules[0], id=f"X-{n}"), *rules[1:]])
        assert len(classifying._verdicts) <= classifying.MEMO_LISTS


# ------------------------------------------------------------------------------------- the raw traces, read here


@functools.cache
def _trace(rel: str) -> list[dict]:
    """The trace's events as the JSON holds them (read once per test run; the tests only read them)."""
    path = FIXTURES / rel
    with gzip.open(path, "rt") if path.name.endswith(".gz") else open(path) as fh:
        return json.load(fh)["traceEvents"]


def _device_events(events: list[dict]) -> list[tuple[int, dict, dict | None]]:
    """(event index, device event, launching cpu_op or None), the link read from External id / correlation."""
    ops = {
        e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})
    }
    runtime = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    out = []
    for i, e in enumerate(events):
        if e.get("ph") != "X" or e.get("cat") not in DEVICE_CATS or not isinstance(e.get("dur"), (int, float)):
            continue
        args = e.get("args", {})
        ext = args.get("External id")
        if ext not in ops and args.get("correlation") in runtime:
            ext = runtime[args["correlation"]].get("args", {}).get("External id")
        out.append((i, e, ops.get(ext)))
    return out


def _matches(label: dict, event: dict, op: dict | None) -> bool:
    if "name" in label and not re.search(label["name"], event["name"]):
        return False
    if "op" in label and not re.fullmatch(label["op"], op["name"] if op else ""):
        return False
    return "dims" not in label or (op is not None and json.dumps(op["args"].get("Input Dims")) == label["dims"])


@functools.cache
def _loaded(rel: str) -> kineto.KinetoTrace:
    return kineto.load(FIXTURES / rel)


def _profan_buckets(rel: str, pack) -> dict[int, str]:
    kt = _loaded(rel)
    dev = kineto_rank.classify_events(kt.device, pack.rules_for("gpu"), pack.roles)
    return dict(zip(dev["event_idx"].to_list(), dev["bucket"].to_list(), strict=True))


def _score(pairs: list[tuple[float, str | None, str]]) -> tuple[float, float, list]:
    """(labelled share of all device time, right share of labelled time, the wrong (label, profan) times)."""
    total = sum(d for d, _, _ in pairs)
    labelled = [(d, want, got) for d, want, got in pairs if want is not None]
    right = sum(d for d, want, got in labelled if want == got)
    wrong: dict[tuple, float] = {}
    for d, want, got in labelled:
        if want != got:
            wrong[(want, got)] = wrong.get((want, got), 0.0) + d
    lab = sum(d for d, _, _ in labelled)
    return lab / total, right / lab, sorted(wrong.items(), key=lambda kv: -kv[1])


TRACE_LABELS = sorted(p.name for p in LABELS.glob("*.toml") if "trace" in tomllib.loads(p.read_text()))
KERNEL_LABELS = sorted(p.name for p in LABELS.glob("*.toml") if "files" in tomllib.loads(p.read_text()))


@pytest.mark.parametrize("label_file", TRACE_LABELS)
def test_labelled_trace_kernels_land_in_their_bucket(pack, label_file):
    """≥ 95 % of the hand-labelled device time is in the labelled bucket, and the labels cover ≥ 70 % of the
    trace's device time (durations from the raw JSON)."""
    doc = tomllib.loads((LABELS / label_file).read_text())
    got = _profan_buckets(doc["trace"], pack)
    pairs = []
    for idx, e, op in _device_events(_trace(doc["trace"])):
        want = next((k["bucket"] for k in doc["kernel"] if _matches(k, e, op)), None)
        pairs.append((float(e["dur"]), want, got.get(idx)))
    coverage, accuracy, wrong = _score(pairs)
    assert coverage >= 0.70, f"labels cover only {coverage:.1%} of the device time"
    assert accuracy >= 0.95, f"{accuracy:.1%} of labelled time in the right bucket; wrong (label, profan): {wrong}"


def _kernel_rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _shapes(text: str) -> str:
    return text.strip().strip('"').strip()


@pytest.mark.parametrize("label_file", KERNEL_LABELS)
def test_labelled_ascend_kernels_land_in_their_bucket(pack, label_file):
    """The same for kernel_details.csv rows (Ascend): profan's bucket of a row is its kernel group's."""
    from profan.ranks.kernel_pass import KernelRequest, reduce_kernel_files

    doc = tomllib.loads((LABELS / label_file).read_text())
    pairs = []
    for rel in doc["files"]:
        (kp,) = reduce_kernel_files([KernelRequest(FIXTURES / rel)], pack)
        g = kp.groups
        bucket = {
            (n, t, s): b
            for n, t, s, b in zip(g["name"], g["type"], g["input_shapes"].fill_null(""), g["bucket"], strict=True)
        }
        for row in _kernel_rows(FIXTURES / rel):
            t, s = row["Type"].strip(), _shapes(row["Input Shapes"])
            want = next(
                (
                    k["bucket"]
                    for k in doc["kernel"]
                    if re.fullmatch(k["type"], t) and ("shapes" not in k or re.fullmatch(k["shapes"], s))
                ),
                None,
            )
            pairs.append((float(row["Duration(us)"]), want, bucket.get((row["Name"].strip(), t, s))))
    coverage, accuracy, wrong = _score(pairs)
    assert coverage >= 0.70, f"labels cover only {coverage:.1%} of the kernel time"
    assert accuracy >= 0.95, f"{accuracy:.1%} of labelled time in the right bucket; wrong (label, profan): {wrong}"


# ----------------------------------------------------------------------------------------- unclassified < 5 %


def _torch_traces() -> list[str]:
    root = FIXTURES / "torch"
    files = [
        p for p in root.rglob("*.json*") if p.is_file() and "capture" not in p.parent.name and ".jsonl" not in p.name
    ]
    return sorted(str(p.relative_to(FIXTURES)) for p in files if not p.name.endswith(".toml"))


@pytest.mark.parametrize("rel", _torch_traces())
def test_a_trace_leaves_under_5_percent_unclassified(pack, rel):
    events = _trace(rel)
    dev = _device_events(events)
    kt = _loaded(rel)
    if kt.cpu_only:  # its top-level ops are classified by the cpu pack
        assert not dev
        d = kineto_rank.classify_events(kt.device, pack.rules_for("cpu"))
        share = d.filter(pl.col("bucket") == "unclassified")["dur_us"].sum() / d["dur_us"].sum()
    else:
        got = _profan_buckets(rel, pack)
        total = sum(float(e["dur"]) for _, e, _ in dev)
        share = sum(float(e["dur"]) for i, e, _ in dev if got.get(i) == "unclassified") / total
    assert share < 0.05, f"{rel}: {share:.1%} of device time unclassified"


def _kernel_files() -> list[str]:
    root = FIXTURES / "ascend"
    files = [*root.rglob("kernel_details.csv"), *root.rglob("op_summary_*.csv")]
    return sorted(str(p.relative_to(FIXTURES)) for p in files)


def _duration(row: dict) -> float:
    for key in ("Duration(us)", "Task Duration(us)"):
        try:
            return float(row[key])
        except (KeyError, TypeError, ValueError):
            continue
    return 0.0


@pytest.mark.parametrize("rel", _kernel_files())
def test_a_kernel_file_leaves_under_5_percent_unclassified(pack, rel):
    from profan.ranks.kernel_pass import KernelRequest, reduce_kernel_files

    (kp,) = reduce_kernel_files([KernelRequest(FIXTURES / rel)], pack)
    total = sum(_duration(r) for r in _kernel_rows(FIXTURES / rel))
    unclassified = kp.groups.filter(pl.col("bucket") == "unclassified")["time_us"].sum()
    assert total > 0 and unclassified / total < 0.05


# ------------------------------------------------------------------------------- the evidence behind a bucket


def _module_frames(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("cat") == "python_function" and e.get("name", "").startswith("nn.Module: ")]


def test_module_paths_nest_as_the_frames_do(pack):
    """Each module frame's path is the chain of module frames that hold it on its thread, checked by brute force
    on the raw frames."""
    events = _trace("torch/timesformer_h100_1rank/facebook_timesformer-base-finetuned-k400__1016002.json.gz")
    frames = _module_frames(events)
    ev = pl.DataFrame(
        {
            "cat": [e["cat"] for e in frames],
            "ph": ["X"] * len(frames),
            "name": [e["name"] for e in frames],
            "tid": [str(e["tid"]) for e in frames],
            "ts_us": [float(e["ts"]) for e in frames],
            "dur_us": [float(e["dur"]) for e in frames],
            "event_idx": list(range(len(frames))),
        }
    )
    got = module_paths(ev, pack.roles).sort("ts_us", "end_us", descending=[False, True])
    assert got.height == len(frames)
    short = [re.sub(r"_\d+$", "", e["name"].removeprefix("nn.Module: ")) for e in frames]
    for k in (0, len(frames) // 3, len(frames) // 2, len(frames) - 1):
        f = frames[k]
        end = f["ts"] + f["dur"]
        holders = sorted(
            (g for g in frames if g["tid"] == f["tid"] and g["ts"] <= f["ts"] and g["ts"] + g["dur"] >= end),
            key=lambda g: (g["ts"], -(g["ts"] + g["dur"])),
        )
        want = "/".join(short[frames.index(g)] for g in holders)
        row = got.filter((pl.col("ts_us") == float(f["ts"])) & (pl.col("path").str.ends_with(short[k])))
        assert want in row["path"].to_list()


def test_eager_attention_is_attention_by_its_module(pack):
    """TimeSformer's softmax and bmm kernels are launched inside TimesformerSelfAttention: attention, and the
    top-kernel evidence names the module. Before, by name alone, they were 'other' and 'ffn'."""
    rel = "torch/timesformer_h100_1rank/facebook_timesformer-base-finetuned-k400__1016002.json.gz"
    kt = _loaded(rel)
    dev = kineto_rank.classify_events(kt.device, pack.rules_for("gpu"), pack.roles)
    events = _trace(rel)
    softmax = [(i, e) for i, e, op in _device_events(events) if op and op["name"] == "aten::_softmax"]
    assert softmax
    rows = dev.filter(pl.col("event_idx").is_in([i for i, _ in softmax]))
    assert set(rows["bucket"]) == {"attention"} and set(rows["rule_id"]) == {"GPU-ATTN-005"}
    assert all(d.startswith("module=") and "SelfAttention" in d for d in rows["decided_by"])
    want = sum(float(e["dur"]) for _, e in softmax)
    assert rows["dur_us"].sum() == pytest.approx(want)


def test_eager_attention_without_modules_is_told_by_its_pattern(pack):
    """The same trace without its module frames: a bmm beside a bmm and a softmax between two bmms are still
    attention (rules GPU-ATTN-006/007, place in the layer), while DLRM's lone interaction bmm and its backward
    pair stay dense GEMMs."""
    rel = "torch/timesformer_h100_1rank/facebook_timesformer-base-finetuned-k400__1016002.json.gz"
    kt = _loaded(rel)
    dev = kineto_rank.classify_events(
        kt.device.with_columns(pl.lit(None, pl.String).alias("module")), pack.rules_for("gpu")
    )
    eager = {
        i: op["name"]
        for i, e, op in _device_events(_trace(rel))
        if op and op["name"] in ("aten::bmm", "aten::_softmax")
    }
    rows = dev.filter(pl.col("event_idx").is_in(list(eager)))
    assert rows.height == len(eager) > 0
    assert set(rows["bucket"]) == {"attention"} and set(rows["rule_id"]) == {"GPU-ATTN-006", "GPU-ATTN-007"}
    rel = "torch/dlrm_v100_8rank/worker0_step_12.1694128201545.pt.trace.json"
    kt = _loaded(rel)
    dlrm = kineto_rank.classify_events(kt.device, pack.rules_for("gpu"))
    bmm = dlrm.filter(pl.col("context") == "aten::bmm")
    assert bmm.height > 0 and set(bmm["bucket"]) == {"gemm"}


def test_timesformer_timeline_matches_tracelens_and_has_attention():
    """busy / idle / total device time equal TraceLens's expected timeline for the same trace, and attention is
    there."""
    import profan

    report = profan.analyze(TIMESFORMER)
    want = {}
    with open(TIMESFORMER / "tracelens_gpu_timeline.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            want[row["type"]] = float(row["time ms"])
    t = report.tables["trace_steps"].filter(pl.col("scope") == "trace").row(0, named=True)
    assert t["busy_us"] / 1000 == pytest.approx(want["busy_time"], abs=0.005)
    assert t["free_us"] / 1000 == pytest.approx(want["idle_time"], abs=0.005)
    assert t["step_us"] / 1000 == pytest.approx(want["total_time"], abs=0.005)
    b = report.breakdown
    assert b.filter(pl.col("bucket") == "attention")["time_us"].sum() > 0


def test_convolutions_are_never_ffn_or_gemm(pack):
    """Every kernel launched by a convolution op, or named as a cuDNN/MIOpen/CK convolution, is conv."""
    conv_op = re.compile(r"convolution|conv[123]d", re.I)
    for rel in (
        "torch/nccl_a100_1rank/nccl_data.json.gz",
        str(TIMESFORMER.relative_to(FIXTURES) / "facebook_timesformer-base-finetuned-k400__1016002.json.gz"),
    ):
        got = _profan_buckets(rel, pack)
        picked = [(i, e) for i, e, op in _device_events(_trace(rel)) if op and conv_op.search(op["name"])]
        kernels = [(i, e) for i, e in picked if e["cat"] == "kernel"]
        assert kernels
        assert {got[i] for i, _ in kernels} == {"conv"}


def test_the_moe_sample_keeps_its_moe_split(pack):
    """Every kernel vLLM's moe_forward launches is MoE, as before: the module and position rules come after."""
    rel = "torch/moe_b200_rank0/eager_trace.json.gz"
    got = _profan_buckets(rel, pack)
    moe = [(i, e) for i, e, op in _device_events(_trace(rel)) if op and op["name"] == "vllm::moe_forward"]
    assert moe and {got[i] for i, _ in moe} == {"moe"}


def test_backward_kernels_know_their_forward_op(pack):
    """On DLRM's autograd thread a kernel inside AddmmBackward0 has fwd_context = the forward op of the same
    Sequence number on the forward thread (read here from the raw events)."""
    rel = "torch/dlrm_v100_8rank/worker0_step_12.1694128201545.pt.trace.json"
    events = _trace(rel)
    kt = _loaded(rel)
    with_fwd = kt.device.filter(pl.col("fwd_context").is_not_null())
    assert with_fwd.height > 0
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    fwd = {}
    for e in sorted(ops, key=lambda e: e["ts"]):
        a = e.get("args", {})
        if "Sequence number" in a and a.get("Fwd thread id", 0) == 0:
            fwd[a["Sequence number"]] = e["name"]  # the last to start with the number
    nodes = [e for e in ops if e.get("args", {}).get("Fwd thread id", 0) > 0]
    for row in with_fwd.iter_rows(named=True):
        t = row["launch_us"]
        around = [n for n in nodes if str(n["tid"]) == row["launch_tid"] and n["ts"] <= t <= n["ts"] + n["dur"]]
        assert around, row["event_idx"]
        inner = max(around, key=lambda n: n["ts"])
        assert fwd[inner["args"]["Sequence number"]] == row["fwd_context"]
