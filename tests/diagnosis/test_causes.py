"""The diagnosis: causes that explain the findings, with a conservative gain per step and what to change.

Checked on the bundled real samples (the cause each one has, its gain recomputed from the raw rows) and on
synthetic clusters with one planted fault of each kind the generator has (the first cause names the planted rank
or link, and the headline stays short however many ranks the job has)."""

from __future__ import annotations

import csv
import gzip
import json
import statistics

import polars as pl
import pytest
import tomllib
from conftest import ASCEND, TORCH, analysed

import profan
from profan.synth import generate

QWEN3 = ASCEND / "msinsight-qwen3-4rank-2025q4"
DLRM = TORCH / "dlrm_v100_8rank"
# every bundled sample that is a profile (msinsight-metadata-2025 is one metadata file; mstt-advisor-ut holds
# three collections, each analysed on its own)
FIXTURES = [
    *(
        ASCEND / name
        for name in (
            "msinsight-qwen3-4rank-2025q4",
            "msinsight-alexnet-2rank-2025/level0",
            "msinsight-alexnet-2rank-2025/level1",
            "msinsight-alexnet-2rank-2025/level2",
            "msinsight-gpt3-2rank-2023",
            "mstt-advisor-ut/test/ut/advisor/compute_advice/data",
            "mstt-advisor-ut/test/ut/advisor/advisor_backend/compute_advice",
            "mstt-advisor-ut/test/ut/advisor/timeline_advice",
            "vllm-ascend-msprof-gmm-1op",
        )
    ),
    # a torch sample, or each run of it where it holds several (gloo_moe_cpu_4rank: one folder per planted fault)
    *sorted(run for p in TORCH.iterdir() if p.is_dir() for run in (sorted(p.glob("*/")) or [p])),
]


def _step_row(rank: int) -> dict:
    path = next(QWEN3.glob(f"rank_{rank}_ascend_pt")) / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    with open(path, newline="", encoding="utf-8") as fh:
        return next(csv.DictReader(fh))


def _computing(rank: int) -> float:
    return float(_step_row(rank)["Computing"])


def test_qwen3_slow_pipeline_stage_is_a_cause(qwen3_report):
    """Stage 1 (ranks 2, 3; profiler_metadata.json's pp groups) computes 1.73× stage 0: the first cause (the
    exposed transfer that overlap could hide is less, below), its gain its excess over the stages' mean Computing,
    recomputed from step_trace_time.csv."""
    c = qwen3_report.causes[0]
    assert c.id == "C1" and c.check == "pipeline-stage-imbalance"
    assert c.ranks == (2, 3) and c.steps == (13,)
    stage0 = statistics.fmean([_computing(0), _computing(1)])
    stage1 = statistics.fmean([_computing(2), _computing(3)])
    assert c.impact_us == pytest.approx(stage1 - (stage0 + stage1) / 2, abs=1e-3)
    assert 84_000 < c.impact_us < 86_000
    assert "stage 1 (ranks 2, 3)" in c.title and "ranks 2, 3" in c.action
    assert "MatMulV3 (4096,151936;151936,1024)" in c.action  # the LM head over the 151,936-token vocabulary
    assert "mean" in c.assumption and c.verify and c.alternatives
    # the waiting of every rank is folded under it, with the slow stage's own kernel findings
    explained = {f.check for f in qwen3_report.findings if f.explained_by == "C1"}
    assert {"comm-exposed-split", "comm-wait-dominated", "pipeline-stage-imbalance", "kernel-boundness"} <= explained
    assert set(c.explains) == {f.id for f in qwen3_report.findings if f.explained_by == "C1"}


def test_qwen3_exposed_transfer_is_a_cause_beside_the_waiting(qwen3_report):
    """Every rank's exposed communication is mostly waiting for the slow stage, which the stage's cause explains;
    but 93 ms of it is transfer (Overlapped is 0.0 on every rank: nothing hides it), and balancing the stages
    removes none of that. So the transfer is a cause of its own, citing the exposed-communication findings while
    they stay under the stage's cause (their waiting is what they say). Its gain is the least rank's transfer
    that overlap can hide: not the tied word embedding's gradient all-reduce between the first and last stage
    (group embd, 32.6 ms), which Megatron runs after the pipeline flush where no overlap setting reaches. So it
    ranks second, after the slow stage's 84.85 ms."""
    group = next(f for f in qwen3_report.findings if f.check == "comm-exposed-split")
    c = qwen3_report.causes[1]
    assert c.check == "comm-exposed-split" and c.id == "C2"
    assert group.explained_by == "C1" and group.id not in c.explains and c.explains == ()
    transfer = {m.rank: m.metrics["transfer_ms"] for m in group.members}
    assert transfer == pytest.approx({0: 92.97342, 1: 92.93442, 2: 93.0237, 3: 92.9819}, abs=1e-5)
    embd = {}  # per rank, the transfer of its embd-group collectives, read from communication.json
    for m in group.members:
        raw = json.loads((QWEN3 / f"rank_{m.rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").read_text())
        allreduce = [v for k, v in raw["step13"]["collective"].items() if k.startswith("hcom_allReduce__")]
        # the embedding's all-reduce is the rank's one large one (622 MB): the others are a few bytes
        largest = max(allreduce, key=lambda v: v["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"])
        assert largest["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"] > 600
        embd[m.rank] = largest["Communication Bandwidth Info"]["HCCS"]["Transit Time(ms)"]
    assert embd == pytest.approx(
        {
            r: x
            for r, x in qwen3_report.tables["communication"]
            .filter(pl.col("group_name") == "embd")
            .group_by("rank")
            .agg(pl.col("transfer_ms").sum())
            .iter_rows()
        },
        abs=1e-6,
    )
    assert c.impact_us == pytest.approx(min(transfer[r] - embd[r] for r in transfer) * 1000, abs=1e-3)
    assert 59_000 < c.impact_us < 61_000 < qwen3_report.causes[0].impact_us
    assert "Not counted: 32.6–32.7 ms per step in group embd, the embedding gradients' all-reduce" in c.assumption
    for m in group.members:  # each rank's transfer alone is more than the check's min_share of its step
        assert m.metrics["transfer_ms"] * 1000 >= 0.05 * m.metrics["step_us"]
        line = _step_row(m.rank)
        assert float(line["Overlapped"]) == 0.0
    assert {e.file for e in c.evidence} >= {e.file for m in group.members for e in m.evidence}
    assert c.title == (
        "Communication transfers are not hidden behind compute: 92.9–93.0 ms per step of transfer is exposed on 4 ranks"
    )
    # the action names the largest transfers of the least exposed rank (1) that overlap can hide: the data-parallel
    # reduce-scatters, not the embedding all-reduce (its Transit Time recorded as 0, its transfer read from the
    # bandwidth info, HCCS), which the assumption names instead
    raw = json.loads((QWEN3 / "rank_1_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json").read_text())
    ops = raw["step13"]["collective"]
    allreduce = next(v for k, v in ops.items() if k.startswith("hcom_allReduce__061_1_1@"))
    assert allreduce["Communication Time Info"]["Transit Time(ms)"] == 0
    hccs = allreduce["Communication Bandwidth Info"]["HCCS"]["Transit Time(ms)"]
    assert hccs == pytest.approx(embd[1]) and "group embd" not in c.action
    assert "The largest transfers (rank 1, step 13): hcom_reduceScatter__" in c.action


def test_qwen3_headline_is_short(qwen3_report):
    headline = qwen3_report.headline
    assert len(headline) <= 6
    assert headline[0].id == "C1"
    # 28 measured findings, folded into a handful
    assert len(qwen3_report.ungrouped()) == 28 and len(qwen3_report.findings) < 12


def test_dlrm_first_cause_is_rank_7():
    """Rank 7 reaches the NCCL collectives last (its host is slow); the gain is how much later than the
    second-latest rank it arrived, summed over the collectives of the step. Before it, one thing its host does
    late: at the step's start every rank but 1 waits 1.0-1.3 ms for its data loader with the GPU idle, 10% or more
    of the period on ranks 2, 6 and 7 (tests/analyses/test_idle_between.py), a gain of the least of theirs."""
    report = analysed(DLRM)
    loader, c = report.causes[:2]
    steps = report.tables["trace_steps"].filter(pl.col("scope") == "step")
    least = steps.filter(pl.col("rank").is_in([2, 6, 7]))["loading_before_us"].min()
    assert loader.check == "idle-between-steps" and loader.ranks == (2, 6, 7)
    assert loader.impact_us == pytest.approx(least) == pytest.approx(1157.0)
    assert c.check == "straggler" and c.ranks == (7,)
    straggler = next(f for f in report.ungrouped() if f.check == "straggler" and f.rank == 7)
    assert c.impact_us == pytest.approx(straggler.metrics["lag_us"]) == pytest.approx(795.0)
    assert "profan compare DIR --ranks 0,7" in c.action  # the host-gap action, with the typical rank
    # the exposed communication of the seven others is what they wait for it
    exposed = next(f for f in report.findings if f.check == "exposed-communication")
    assert exposed.explained_by == c.id and 7 not in exposed.ranks
    assert len(report.headline) <= 6


@pytest.mark.parametrize(
    "root", FIXTURES, ids=lambda p: str(p.relative_to(ASCEND if p.is_relative_to(ASCEND) else TORCH))
)
def test_every_cause_is_whole_and_gains_fit_in_the_step(root):
    """On every bundled sample: each cause has evidence, an action, a way to verify and an assumption; the gains
    of the causes of a step add up to no more than the step; symptoms and causes point at each other."""
    report = analysed(root)
    ids = {f.id for f in report.findings}
    for c in report.causes:
        assert c.evidence and c.action and c.verify and c.assumption
        assert "{" not in c.title + c.action + c.verify + c.assumption  # every template filled
        if c.impact_us is not None and c.step_us is not None:
            assert 0 <= c.impact_us <= c.step_us
        assert set(c.explains) <= ids
        for fid in c.explains:
            assert report.finding(fid).explained_by == c.id
    for f in report.findings:
        assert f.explained_by is None or f.id in report.cause(f.explained_by).explains
    by_step: dict[int | None, float] = {}
    for c in report.causes:
        for s in c.steps or (None,):
            by_step[s] = by_step.get(s, 0.0) + (c.impact_us or 0.0)
    # a step's gains fit in the longest time a cause measures it by: the step period (its window and the idle
    # time before it) where a cause of the time between steps measures that, else the window
    step_us: dict[int | None, float | None] = {}
    for c in report.causes:
        for s in c.steps or (None,):
            step_us[s] = max(step_us.get(s) or 0.0, c.step_us) if c.step_us is not None else step_us.get(s)
    assert all(step_us[s] is None or total <= step_us[s] + 1e-6 for s, total in by_step.items())


def test_group_members_keep_their_evidence(qwen3_report, tmp_path):
    """A group is one finding over its ranks; each member keeps its own evidence and id, and the JSON report
    reads back with them."""
    group = next(f for f in qwen3_report.findings if f.check == "comm-exposed-split")
    assert group.ranks == (0, 1, 2, 3) and group.steps == (13,) and len(group.members) == 4
    assert [m.id for m in group.members] == [f"{group.id}.{i}" for i in range(1, 5)]
    # worst first: the severest, then the most communication not overlapped (the check's `worst_by`)
    order = {"critical": 0, "warning": 1, "info": 2}
    exposed = {m.rank: (order[m.severity], -m.metrics["comm_not_overlapped_us"]) for m in group.members}
    assert [m.rank for m in group.members] == sorted(exposed, key=exposed.get) == [1, 0, 2, 3]
    for m in group.members:
        assert m.evidence[0].file == f"rank_{m.rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    assert qwen3_report.finding(f"{group.id}.3").rank == 2 and qwen3_report.finding(f"{group.id}.1").rank == 1
    from profan.model.report import from_dict

    doc = json.loads(json.dumps(qwen3_report.to_dict()))
    back = from_dict(doc)
    assert back.to_dict()["causes"] == doc["causes"] and doc["headline"] == ["C1", "C2", "C3", "C4"]
    member = next(m for f in doc["findings"] for m in f["members"] if m["id"] == f"{group.id}.3")
    assert back.finding(f"{group.id}.3").to_dict() == member


def test_every_cause_check_has_its_texts():
    """A check with a [check.cause] table has every text a cause needs, and explains only checks that exist."""
    from profan.rulepack.pack import rules_dir

    checks = tomllib.loads((rules_dir() / "checks.toml").read_text(encoding="utf-8"))["check"]
    ids = {c["id"] for c in checks}
    with_cause = [c for c in checks if "cause" in c]
    assert len(with_cause) >= 8
    for c in with_cause:
        assert {"title", "assumption", "action", "verify", "explains"} <= set(c["cause"]), c["id"]
        assert set(c["cause"]["explains"]) <= ids


# ------------------------------------------------------------------------------- synthetic clusters, one fault each

FAULTS = {
    "compute straggler": dict(straggler_rank=37, straggler_kind="compute", straggler_op="FlashAttentionScore"),
    "host-gap straggler": dict(straggler_rank=37, straggler_kind="host_gap"),
    "hot expert": dict(hot_expert=37, hot_factor=8.0),
    "slow link": dict(slow_link=(3, 5), slow_link_factor=4.0),
}


@pytest.fixture(scope="module", params=[*FAULTS, "none"])
def planted(request, tmp_path_factory):
    """A 64-rank cluster with one fault (or none), generated and analysed once. One layer and one step: the fault
    shows in every step alike, and each more step or layer only adds rows to read at 64 ranks."""
    out = tmp_path_factory.mktemp("planted")
    truth = generate(out, ranks=64, layers=1, steps=1, seed=11, **FAULTS.get(request.param, {}))
    return request.param, truth, profan.analyze(out)


def test_the_first_cause_names_the_planted_fault(planted):
    kind, truth, report = planted
    if kind == "none":
        assert report.causes == [] and report.headline == []
        return
    assert len(report.headline) <= 8
    first = report.causes[0]
    if kind == "slow link":
        assert first.check == "comm-slow-link" and first.ranks == (3, 5)
    elif kind == "hot expert":
        assert first.check == "moe-expert-imbalance" and first.ranks == (truth["expert_imbalance"]["hot_rank"],)
    else:
        assert first.check == "straggler" and first.ranks == (37,)
        assert first.metrics["why_text"] == truth["straggler"]["cause_class"].replace("_", " ")
    assert first.impact_us is not None and 0 < first.impact_us <= first.step_us


def test_step_cost_parts_add_up_to_the_step_and_cite_their_rows(qwen3_report):
    """compute + exposed transfer + exposed waiting + idle = the step (step_trace_time.csv: Stage/step time is
    Computing + Communication(Not Overlapped) + Free), the split from communication.json."""
    cost = qwen3_report.tables["step_cost"]
    assert cost["rank"].to_list() == [0, 1, 2, 3]
    for row in cost.iter_rows(named=True):
        path = QWEN3 / row["file"]
        with open(path, newline="", encoding="utf-8") as fh:
            raw = list(csv.DictReader(fh))[row["line"] - 2]  # line 1 is the header
        assert row["compute_us"] == pytest.approx(float(raw["Computing"]))
        exposed = row["exposed_transfer_us"] + row["exposed_wait_us"]
        assert exposed == pytest.approx(float(raw["Communication(Not Overlapped)"]))
        assert row["idle_us"] == pytest.approx(float(raw["Free"]))
        assert row["exposed_unsplit_us"] is None and row["split_file"].endswith("communication.json")
    # rank 0 waits most of its exposed time: 92.97 ms of transfer (communication.json), the rest waiting
    assert cost.row(0, named=True)["exposed_transfer_us"] == pytest.approx(92973.42, abs=0.01)


@pytest.mark.parametrize("level", ["level1", "level2"])
def test_alexnet_ranks_wait_for_peer_5_outside_the_capture(level):
    """Ranks 0 and 1 of an 8-rank job wait in HCCL Notify_Wait for peer 5, which was not profiled: that is the
    first cause, with the wait both ranks share as its gain, and their exposed communication folded under it."""
    report = analysed(ASCEND / "msinsight-alexnet-2rank-2025" / level)
    c = report.causes[0]
    assert c.check == "comm-waited-peer" and c.ranks == (5,)
    assert "not in this capture" in c.title
    waits = [f.metrics["wait_us"] for f in report.ungrouped() if f.check == "comm-waited-peer"]
    assert len(waits) == 2 and c.impact_us == pytest.approx(min(waits))  # one step captured
    explained = {f.check for f in report.findings if f.explained_by == c.id}
    assert {"comm-exposed-split", "comm-wait-dominated", "comm-waited-peer"} <= explained


def test_a_team_rewords_an_action_in_its_own_rules_file(tmp_path):
    """The texts of a cause are rules: a user file rewords the action (its numbers still filled in); a
    misspelt text name is a one-line error naming the file."""
    own = tmp_path / "ours.toml"
    own.write_text(
        '[[check]]\nid = "pipeline-stage-imbalance"\n[check.cause]\n'
        'action = "Ask the model team to move {move_ms:,.0f} ms off ranks {slow_ranks}."\n',
        encoding="utf-8",
    )
    report = profan.analyze(QWEN3, rules=[own])
    stage = next(c for c in report.causes if c.check == "pipeline-stage-imbalance")
    assert stage.action == "Ask the model team to move 85 ms off ranks 2, 3."
    assert stage.verify.startswith("Profile again")  # the texts it does not set stay
    own.write_text('[[check]]\nid = "pipeline-stage-imbalance"\n[check.cause]\nacton = "x"\n', encoding="utf-8")
    from profan.model.errors import ProfanInputError

    with pytest.raises(ProfanInputError, match="has no 'acton'"):
        profan.analyze(QWEN3, rules=[own])


def test_hot_expert_on_a_cpu_trace_with_a_team_rule(tmp_path):
    """On the gloo run whose router sends most tokens to rank 2's expert, a team rule that calls the main thread's
    linear layers experts changes the buckets, not the load: the MoE check counts tokens, cites trace events
    (not kernel_details.csv lines), and the hot expert's rank is the first cause."""
    rules = tmp_path / "team.toml"
    rules.write_text(
        '[pack]\nid = "team"\napplies_to = "cpu"\n\n[[rule]]\nid = "TEAM-MOE-001"\nname = "our experts"\n'
        'bucket = "moe"\nmatch = { name = "^aten::(linear|gelu)$" }\nwhy = "every linear layer is an expert"\n'
        'example = "aten::linear"\n',
        encoding="utf-8",
    )
    report = profan.analyze(TORCH / "gloo_moe_cpu_4rank" / "hot_expert", rules=[rules])
    c = report.causes[0]
    assert c.check == "moe-expert-imbalance" and c.ranks == (2,)
    assert "mean tokens" in c.title
    f = next(f for f in report.ungrouped() if f.check == "moe-expert-imbalance")
    assert f.evidence[0].select["source"] == "kineto_trace" and f.evidence[0].events
    assert f.metrics["hot_rank"] == 2 and f.metrics["ratio"] > 2


def test_evidence_of_a_cause_without_rows():
    """`profan evidence DIR C1 --limit 0`: the cause's claim and where its rows are, without reading them back."""
    from conftest import run_cli

    res = run_cli("evidence", str(QWEN3), "C1", "--limit", "0", "--format", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["id"] == "C1" and doc["kind"] == "cause"
    assert doc["impact_us"] == pytest.approx(analysed(QWEN3).causes[0].impact_us, abs=1e-3)
    assert doc["evidence"] and all(item["rows"] == [] for item in doc["evidence"])
    assert doc["evidence"][0]["lines"] == [2]


@pytest.mark.parametrize("run", ["none", "sleep", "compute", "hot_expert", "async_grad"])
def test_verdict_on_real_gloo_runs_names_the_planted_fault_and_nothing_else(run):
    """Four CPU processes training a small MoE over gloo (bench/gloo_moe.py), one fault planted per run: the
    verdict's one cause names the planted rank (a sleeping rank's host gap, extra compute, a hot expert's rank —
    as an MoE imbalance, not as extra compute); the fault-free runs, with and without overlapping steps, have no
    cause."""
    folder = TORCH / "gloo_moe_cpu_4rank" / run
    truth = tomllib.loads((folder / "ground_truth.toml").read_text(encoding="utf-8"))
    report = analysed(folder)
    if truth["fault"] == "none":
        assert report.causes == []
        return
    assert len(report.causes) == 1 and report.causes[0].ranks == (truth["fault_rank"],)
    c = report.causes[0]
    # a hot expert is told from extra compute: the expert's work is found by its record_function range
    named = ("moe-expert-imbalance",) if truth["fault"] == "hot-expert" else ("straggler", "compute-imbalance")
    assert c.check in named and 0 < c.impact_us <= c.step_us
    if truth["fault"] == "sleep":  # 70 ms asleep per step before the all_reduce: its host, not its compute
        assert c.metrics["why_text"] == "host gap" and 40_000 < c.impact_us < 75_000
    assert len(report.headline) <= 3


def test_idle_split_recomputed_from_the_raw_trace():
    """DLRM rank 0, step 10: in each gap between device events of the step's window, the part before the launch
    call of the event that ends it is the device waiting for the host (idle_host_us); the rest of the idle time
    the work was already issued. Recomputed here from the trace's events and their runtime correlation."""
    from profan.rulepack.roles import defaults as roles

    report = analysed(DLRM)
    row = report.tables["trace_steps"].filter(rank=0, scope="step", step=10).row(0, named=True)
    path = DLRM / row["file"]
    events = json.loads(path.read_text(encoding="utf-8"))["traceEvents"]
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in roles().kineto_runtime_cats and "correlation" in e.get("args", {})
    }
    device = sorted(
        (
            max(e["ts"], row["start_us"]),
            min(e["ts"] + e["dur"], row["end_us"]),
            launch.get(e["args"].get("correlation")),
        )
        for e in events
        if e.get("cat") in roles().kineto_device_cats
        and e.get("ph") == "X"
        and e["ts"] < row["end_us"]
        and e["ts"] + e["dur"] > row["start_us"]
    )
    host = idle = 0.0
    reach = device[0][1]
    for start, end, launched in device[1:]:
        if start > reach:
            idle += start - reach
            host += min(max(launched - reach, 0.0), start - reach)
        reach = max(reach, end)
    assert row["free_us"] == pytest.approx(idle, abs=0.01)
    assert row["idle_host_us"] == pytest.approx(host, abs=0.01) and 4_000 < host < 6_000
    assert row["idle_other_us"] == pytest.approx(idle - host, abs=0.01)
    cost = report.tables["step_cost"].filter(rank=0).row(0, named=True)
    assert cost["idle_host_us"] == pytest.approx(host, abs=0.01)
    # the idle cause says it, without claiming a gain it cannot support
    idle_cause = next(c for c in report.causes if c.check == "device-idle")
    assert idle_cause.impact_us is None and "waited for the host" in idle_cause.assumption


# --------------------------------------------------------------- collectives that wait, with no one named to blame


def _late_peer_cause(report):
    return next(c for c in report.causes if c.check == "comm-wait-dominated")


def test_gpt3_ranks_wait_for_peers_the_capture_cannot_name():
    """Ranks 0 and 1 of a 16-rank GPT-3 job spend 116–118 ms of a 295 ms step waiting inside collectives; the
    capture has no parallel_group_info, so whom they wait for is unknown: a cause of its own, with no estimate
    (how much of the late ranks' time is removable is not in the capture) and the wait as its upper bound. Each
    rank's wait is the sum of its wait-dominated ops' elapse minus transit, recomputed from communication.json."""
    report = analysed(ASCEND / "msinsight-gpt3-2rank-2023")
    c = _late_peer_cause(report)
    assert c.impact_us is None and c.ranks == (0, 1) and c.steps == (2,)
    assert "peers the capture cannot name on ranks 0, 1" in c.title and "116.1–118.5 ms per step" in c.title
    assert "no parallel_group_info" in c.action and "hcom_allReduce__303_0 97.6 ms" in c.action
    waits = {}
    for e in c.evidence:  # the ops each rank's finding cites, read back from the file
        doc = json.loads((ASCEND / "msinsight-gpt3-2rank-2023" / e.file).read_text(encoding="utf-8"))
        rank = int(e.file.split("/")[0].rsplit("_", 1)[1])
        for pointer in e.pointers:
            _, step, kind, op = pointer.split("/")
            info = doc[step][kind][op]["Communication Time Info"]
            waits[rank] = waits.get(rank, 0.0) + info["Elapse Time(ms)"] - info["Transit Time(ms)"]
    assert waits == pytest.approx({0: 116.09, 1: 118.54}, abs=0.01)
    assert c.metrics["min_wait_ms"] == pytest.approx(waits[0])  # one step captured
    explained = {f.check for f in report.findings if f.explained_by == c.id}
    assert explained == {"comm-wait-dominated", "comm-exposed-split"}
    # the exposed communication is mostly waiting (its own split, from communication.json): it is this cause's
    # symptom, not the transfer cause's, which cites it for its transfer but leaves it here
    (exposed,) = [f for f in report.findings if f.check == "comm-exposed-split"]
    for m in exposed.members:
        assert m.metrics["waiting_ms"] > m.metrics["transfer_ms"] and m.metrics["mostly_waiting"]
    transfer = next(x for x in report.causes if x.check == "comm-exposed-split")
    assert exposed.explained_by == c.id and exposed.id not in transfer.explains
    # no estimate, but a bound (the least waiting rank's 116.1 ms) larger than the transfer's 17.8 ms: it comes
    # first, said as a bound
    assert [x.check for x in report.causes[:2]] == ["comm-wait-dominated", "comm-exposed-split"]
    assert c.impact_us is None and c.bound_us == pytest.approx(116091.4, abs=0.1)
    assert transfer.impact_us == pytest.approx(17820, abs=50)
    assert {e.file for e in c.evidence} == {f"test_rank_{r}/ASCEND_PROFILER_OUTPUT/communication.json" for r in (0, 1)}


def test_stage_zero_alone_waits_for_the_stage_outside_the_capture(tmp_path):
    """Only ranks 0 and 1 of the Qwen3 job (pipeline stage 0): their groups (parallel_group_info) hold ranks 2 and
    3, which are not captured — the cause says so, where the whole job names the slow stage."""
    import shutil

    for r in (0, 1):
        shutil.copytree(QWEN3 / f"rank_{r}_ascend_pt", tmp_path / f"rank_{r}_ascend_pt")
    report = profan.analyze(tmp_path)
    assert not any(c.check == "pipeline-stage-imbalance" for c in report.causes)
    c = _late_peer_cause(report)
    assert "ranks outside the capture on ranks 0, 1" in c.title and "(peers 2, 3 not captured)" in c.title
    assert c.impact_us is None and "hcom_batchSendRecv" in c.action


def test_with_stages_unjudged_the_ranks_that_do_not_wait_are_named_late(tmp_path):
    """The whole Qwen3 job with the stage check's thresholds out of reach (a team's rules file): every group member
    is captured, ranks 0–2 wait and rank 3 does not — the cause names rank 3 as the one they wait for."""
    rules = tmp_path / "rules.toml"
    rules.write_text('[[check]]\nid = "pipeline-stage-imbalance"\nwarning_ratio = 100.0\ncritical_ratio = 200.0\n')
    report = profan.analyze(QWEN3, rules=[rules])
    c = _late_peer_cause(report)
    assert c.ranks == (3,) and "Collectives on ranks 0–2 wait for rank 3" in c.title
    assert "--ranks 0,3" in c.action


def test_when_every_peer_waits_too_the_cause_says_the_late_one_changes(tmp_path):
    """The whole Qwen3 job, stages unjudged and shorter waits counted (a team's rules file): rank 3 now waits too,
    so every member of the groups is captured and waiting — the ranks wait for one another, and the action is
    about the late rank changing from collective to collective, not about capturing more ranks."""
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[check]]\nid = "pipeline-stage-imbalance"\nwarning_ratio = 100.0\ncritical_ratio = 200.0\n\n'
        '[[check]]\nid = "comm-wait-dominated"\nwait_ratio = 0.2\nmin_elapse_ms = 0.1\n'
    )
    report = profan.analyze(QWEN3, rules=[rules])
    c = _late_peer_cause(report)
    waiting = sorted({r for f in report.findings if f.explained_by == c.id for r in f.ranks})
    assert waiting == [0, 1, 2, 3] and c.ranks == (0, 1, 2, 3)
    assert c.title.startswith("Collectives on ranks 0–3 wait for one another: ")
    assert "(every peer is captured and waits too)" in c.title
    assert "the late one changes from collective to collective" in c.action and "--ranks 0,1" in c.action
    assert "Profile every rank" not in c.action and "{" not in c.action + c.title + c.verify


def test_idle_split_of_a_capture_without_steps_is_said_by_the_cause():
    """The vLLM MoE decode capture has no ProfilerStep: its idle time is judged over the whole trace, and the cause
    says how much of it the device waited for the host (each gap's part before the next event's launch call,
    recomputed here over the whole trace) — as it does for a stepped trace."""
    from profan.rulepack.roles import defaults as roles

    moe = TORCH / "moe_b200_rank0"
    report = analysed(moe)
    row = report.tables["trace_steps"].filter(rank=0, scope="trace").row(0, named=True)
    events = json.loads(gzip.decompress((moe / row["file"]).read_bytes()))["traceEvents"]
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in roles().kineto_runtime_cats and "correlation" in e.get("args", {})
    }
    device = sorted(
        (e["ts"], e["ts"] + e["dur"], launch.get(e["args"].get("correlation")))
        for e in events
        if e.get("cat") in roles().kineto_device_cats and e.get("ph") == "X"
    )
    host, reach = 0.0, device[0][1]
    for start, end, launched in device[1:]:
        if start > reach and launched is not None:
            host += min(max(launched - reach, 0.0), start - reach)
        reach = max(reach, end)
    assert row["idle_host_us"] == pytest.approx(host, abs=0.01) and 60_000 < host < 65_000
    idle_cause = next(c for c in report.causes if c.check == "device-idle")
    assert idle_cause.impact_us is None
    assert f"{host / 1000:,.1f} ms per rank in the traced span (no steps) the device waited for the host" in (
        idle_cause.assumption
    )


def test_idle_before_the_steps_first_task_is_the_host_preparing_the_step():
    """AlexNet on two NPUs (level1): step_trace_time.csv's Preparing — from the step's start to its first device
    task — is 70–77% of each rank's Free, so the idle cause says the host is preparing the step and what to do
    about it (read back from the raw CSVs). Qwen3's Preparing is 0.2 ms of 130–160 ms idle: the general case."""
    import csv

    root = ASCEND / "msinsight-alexnet-2rank-2025" / "level1"
    report = analysed(root)
    c = next(c for c in report.causes if c.check == "device-idle")
    preparing, free = {}, {}
    for r in (0, 1):
        with open(root / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as fh:
            (row,) = list(csv.DictReader(fh))
        preparing[r], free[r] = float(row["Preparing"]), float(row["Free"])
    assert all(preparing[r] >= 0.5 * free[r] for r in (0, 1))
    assert preparing == pytest.approx({0: 17902.5, 1: 20433.25})
    assert "most of it before each step's first task: the host is preparing the step" in c.title
    assert "17.9–20.4 ms per rank" in c.action and "num_workers" in c.action
    assert c.metrics["min_preparing_ms"] == pytest.approx(17.9025)
    assert c.impact_us is None
    # of it, the data loader's span in trace_view.json (it lies within Preparing: after the step's start)
    loader = {}
    for r in (0, 1):
        events = json.loads((root / f"rank{r}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
        (step,) = [e for e in events if e.get("name") == "ProfilerStep#50"]
        (span,) = [e for e in events if str(e.get("name", "")).startswith("enumerate(DataLoader)#")]
        assert float(span["ts"]) > float(step["ts"]) and float(span["dur"]) < preparing[r]
        loader[r] = float(span["dur"])
    assert loader == pytest.approx({0: 3332.4, 1: 3606.2}, abs=0.1)
    assert "; of it, 3.3–3.6 ms inside the data loader (trace_view.json))" in c.action
    general = next(c for c in analysed(QWEN3).causes if c.check == "device-idle")
    assert "preparing" not in general.title and "Preparing" not in general.action
    # where to read the host's ops in that time: trace_view.json here; the DB export's PYTORCH_API table; and a
    # level0 capture, which holds neither, says so instead of pointing at a file it lacks
    assert "trace_view.json's CPU ops between the step's start (ProfilerStep#N)" in c.action
    db = next(c for c in analysed(ASCEND / "msinsight-alexnet-2rank-2025-db").causes if c.check == "device-idle")
    assert "The DB's CPU ops (table PYTORCH_API)" in db.action and "trace_view.json" not in db.action
    level0 = root.parent / "level0"
    assert not list(level0.rglob("trace_view.json"))
    bare = next(c for c in analysed(level0).causes if c.check == "device-idle")
    assert "which this capture does not hold" in bare.action and "trace_view.json's" not in bare.action


def test_every_cause_is_measured_against_the_verdict_s_step_and_their_gains_fit_in_it():
    """The timesformer trace idles between steps: its idle cause is of the step period and its attention cause of
    the step window. Folded, both are of the one step the verdict states (the period), so their shares read side
    by side. And a cause of no particular step draws on every step's room: with Qwen3's first cause made such a
    cause taking 70% of the step, a cause of one step taking 60% is capped to what is left."""
    from dataclasses import replace

    from profan.diagnosis.fold import fold
    from profan.diagnosis.step import denominator, step_summary
    from profan.rulepack.pack import load

    report = analysed(TORCH / "timesformer_h100_1rank")
    step = step_summary(report.tables, report.causes)
    assert step["period_us"] > 2 * step["step_us"]  # 378.1 ms against a 160.0 ms window
    assert {c.step_us for c in report.causes if c.impact_us is not None} == {denominator(step)}
    assert sum(c.impact_us for c in report.causes if c.impact_us is not None) <= step["period_us"]

    qwen = analysed(ASCEND / "msinsight-qwen3-4rank-2025q4")
    base = next(c for c in qwen.causes if c.impact_us is not None)
    d = base.step_us
    general = replace(base, steps=(), impact_us=0.7 * d, explains_keys=())
    one_step = replace(base, steps=(13,), impact_us=0.6 * d, explains_keys=())
    _, capped = fold([], [general, one_step], load(), d)
    assert [c.impact_us for c in capped] == pytest.approx([0.7 * d, 0.3 * d])
    assert "Capped at" in capped[1].assumption and "Capped at" not in capped[0].assumption


def test_of_two_ranks_the_slower_is_measured_against_the_other_and_the_waiting_rank_is_folded():
    """memory_gloo_2rank: rank 1 trains on twice rank 0's tokens. Of two ranks the median is their mean, which
    halves the gap: rank 1 computes 8,598.0 ms per median step against rank 0's 5,799.7 ms, 1.48×, and that is
    what the cause says and gains. Rank 0's exposed communication (it waits for rank 1 at every all-reduce) is
    that cause's symptom, folded under it, across the median steps the finding covers."""
    report = analysed(TORCH / "memory_gloo_2rank")
    (imb,) = [f for f in report.findings if f.check == "compute-imbalance"]
    cause = next(c for c in report.causes if c.check == "compute-imbalance")
    m = imb.metrics
    assert m["against"] == "rank 0" and m["median_rank"] == 0
    assert m["ratio"] == pytest.approx(m["max_computing_us"] / m["median_computing_us"], abs=1e-4)
    assert round(m["ratio"], 2) == 1.48
    assert cause.title.startswith("Rank 1 computes 1.48× rank 0:")
    assert cause.impact_us == pytest.approx(m["max_computing_us"] - m["median_computing_us"])
    exposed = [f for f in report.findings if f.check == "exposed-communication"]
    assert exposed and all(f.explained_by == cause.id for f in exposed)
    assert {r for f in exposed for r in (f.ranks or (f.rank,))} == {0}


def test_level0_exposed_communication_says_to_capture_the_split():
    """AlexNet at profiler Level0: no communication.json, so 64–70% of the step not overlapped with compute can
    be neither transfer to overlap nor waiting for a late rank, as far as the capture tells. It is no orphan
    symptom: a cause of its own, with no estimate, whose upper bound is the least exposed rank's time (from
    step_trace_time.csv) and whose action is the capture that splits it. At Level1 the same job has none."""
    folder = ASCEND / "msinsight-alexnet-2rank-2025"
    report = analysed(folder / "level0")
    (c,) = [c for c in report.causes if c.check == "exposed-communication"]
    exposed = {}
    for r in (0, 1):
        with open(folder / "level0" / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv") as fh:
            (row,) = list(csv.DictReader(fh))
        exposed[r] = float(row["Communication(Not Overlapped)"]) / 1000
    assert c.impact_us is None and c.ranks == (0, 1)
    assert f"least exposed rank's {min(exposed.values()):,.1f} ms" in c.assumption
    assert "profiler_level=torch_npu.profiler.ProfilerLevel.Level1" in c.action
    explained = [f for f in report.findings if f.explained_by == c.id]
    assert [f.check for f in explained] == ["exposed-communication"]
    assert not [i for i in report.headline if i.id.startswith("F")]  # no headline finding left unexplained
    level1 = analysed(folder / "level1")
    assert not [c for c in level1.causes if c.check == "exposed-communication"]
