"""The RL step ledger on real captures (fixtures/torch/rl_grpo_cpu, bench/rl_loop.py): phases against the loop's
own timers (metrics.jsonl), the long tail and the weight sync as the verdict's lead, and trace sets with a trace
of an unknown role, a missing rank, or a rank profiled at another time."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from profan.model.textfmt import fmt_ms
from profan.pipeline import analyze

RUNS = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "rl_grpo_cpu"
TIMER = {
    "generation": "gen",
    "reward": "reward",
    "old log-prob": "old_log_prob",
    "reference": "ref",
    "actor update": "update_actor",
    "weight sync": "update_weights",
}


def timers(run: str) -> dict[int, dict[str, float]]:
    """The loop's own timers, per step, in µs (read from the fixture, not from profan)."""
    lines = (RUNS / run / "metrics.jsonl").read_text().splitlines()
    return {rec["step"]: {k[9:]: v * 1e6 for k, v in rec["data"].items()} for rec in map(json.loads, lines)}


@pytest.fixture(scope="module")
def reports():
    return {run: analyze(RUNS / run) for run in ("normal", "long_tail", "slow_sync")}


ALL_RUNS = ("normal", "long_tail", "slow_sync", "under_batched", "logprob_small", "update_heavy", "colocated")


@pytest.mark.parametrize("run", ALL_RUNS)
def test_every_phase_within_5_percent_of_the_loops_timer(reports, run):
    rep = reports[run] if run in reports else analyze(RUNS / run)
    assert not [w for w in rep.warnings if "timing_s/" in w], rep.warnings
    phases = rep.tables["rl_phases"].filter(pl_col_measured_trace())
    truth = timers(run)
    assert sorted(set(phases["phase"])) == sorted(TIMER)
    assert sorted(set(phases["step"])) == sorted(truth)
    for row in phases.iter_rows(named=True):
        if TIMER[row["phase"]] not in truth[row["step"]]:
            # colocated: the weights reach the rollout engine in its wake-up (timed as reshard, inside
            # generation); the loop times no separate sync
            assert (run, row["phase"]) == ("colocated", "weight sync")
            continue
        want = truth[row["step"]][TIMER[row["phase"]]]
        assert abs(row["phase_us"] - want) / want < 0.05, (row["phase"], row["step"], row["phase_us"], want)
    steps = rep.tables["rl_steps"]
    for row in steps.iter_rows(named=True):
        assert abs(row["step_us"] - truth[row["step"]]["step"]) / truth[row["step"]]["step"] < 0.05


def pl_col_measured_trace():
    import polars as pl

    return pl.col("measured") == "trace"


def test_every_trace_is_read_with_its_role(reports):
    ranks = reports["normal"].source["ranks"]
    assert [(r["info"]["role"], r["info"]["role_rank"]) for r in ranks] == [
        ("rollout", 0),
        ("rollout", 1),
        ("actor", 0),
    ]
    assert ranks[2]["rank_origin"] == "actor rank 0 (file name actor_prof_rank-0.json.gz)"
    assert not [w for w in reports["normal"].warnings if "appears in" in w]


def test_ledger_busy_per_rank_and_phase(reports):
    import polars as pl

    led = reports["normal"].tables["rl_ledger"]
    actor = led.filter((pl.col("role") == "actor") & (pl.col("phase") == "actor update"))
    rollout = led.filter((pl.col("role") == "rollout") & (pl.col("phase") == "actor update"))
    assert (actor["busy_us"] / actor["window_us"]).min() > 0.8  # the trainer computes through its update
    assert rollout["busy_us"].max() == 0.0  # the rollout pool waits for it
    assert ((led["busy_us"] + led["idle_us"] - led["window_us"]).abs() < 1e-6).all()


def test_normal_run_has_nothing_at_warning(reports):
    rep = reports["normal"]
    assert not [c for c in rep.causes if c.severity in ("critical", "warning")]
    assert not [f for f in rep.findings if f.severity in ("critical", "warning")]
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "profan",
            "analyze",
            str(RUNS / "normal"),
            "--format",
            "json",
            "-o",
            "/dev/null",
            "--fail-on",
            "warning",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr


def step_gap(run: str) -> float:
    """Mean step time over the normal run's, from the loop's own timers (µs)."""
    a, b = timers(run), timers("normal")
    return sum(a[s]["step"] - b[s]["step"] for s in a) / len(a)


def test_long_tail_leads_names_the_worker_and_gain_is_the_step_gap(reports):
    lead = reports["long_tail"].causes[0]
    assert lead.check == "rl-long-tail"
    assert "rollout rank 1" in lead.title
    gap = step_gap("long_tail")
    assert abs(lead.impact_us - gap) / gap < 0.35, (lead.impact_us, gap)
    tail = reports["long_tail"].tables["rl_rollout"]
    lengths = set(zip(tail["role_rank"], tail["forwards"], strict=True))
    assert sorted(lengths) == [(0, 16), (1, 64)]  # ground_truth.toml response_len


def test_slow_sync_leads_with_the_weight_sync(reports):
    lead = reports["slow_sync"].causes[0]
    assert lead.check == "rl-weight-sync"
    gap = step_gap("slow_sync")
    assert abs(lead.impact_us - gap) / gap < 0.35, (lead.impact_us, gap)


def copy_run(tmp_path: Path, run: str = "normal") -> Path:
    dst = tmp_path / run
    shutil.copytree(RUNS / run, dst)
    return dst


def test_unknown_role_is_read_and_named(tmp_path):
    """A trace of the job that is no RL role's (here a gloo training rank's, named as verl names a role's trace,
    with a prefix of no known role): read as the unknown role, named in a warning."""
    job = copy_run(tmp_path)
    plain = RUNS.parent / "gloo_healthy_seeds" / "r2_seed1" / "rank1.pt.trace.json.gz"
    shutil.copy(plain, job / "e2e" / "sampler_prof_rank-0.json.gz")
    rep = analyze(job)
    said = [w for w in rep.warnings if "role cannot be told" in w]
    assert said and "e2e/sampler_prof_rank-0.json.gz (rank 0)" in said[0]
    roles = [r["info"]["role"] for r in rep.source["ranks"]]
    assert roles.count("unknown role") == 1 and len(roles) == 4


def test_a_role_of_no_known_name_is_read_from_the_trace_and_named(tmp_path):
    """A rollout trace renamed with a prefix of no known role: its annotations tell the role, and a warning says
    it was read so."""
    job = copy_run(tmp_path)
    (job / "e2e" / "rollout_prof_rank-1.json.gz").rename(job / "e2e" / "sampler_prof_rank-1.json.gz")
    rep = analyze(job)
    said = [w for w in rep.warnings if "their role read from their content" in w]
    assert said and "e2e/sampler_prof_rank-1.json.gz as rollout rank 1" in said[0]
    gen = rep.tables["rl_rollout"]  # its generation is read with the others'
    assert set(gen["role"]) == {"rollout"} and gen["rank"].n_unique() == 2


def test_missing_rank_is_named(tmp_path):
    job = copy_run(tmp_path)
    (job / "e2e" / "rollout_prof_rank-1.json.gz").rename(job / "e2e" / "rollout_prof_rank-2.json.gz")
    rep = analyze(job)
    assert any(w.startswith("rollout rank(s) 1 missing") for w in rep.warnings), rep.warnings


def test_rank_profiled_at_another_time_is_left_out_and_named(tmp_path):
    job = copy_run(tmp_path)
    shutil.copy(RUNS / "slow_sync" / "e2e" / "rollout_prof_rank-1.json.gz", job / "e2e" / "rollout_prof_rank-1.json.gz")
    rep = analyze(job)
    said = [w for w in rep.warnings if "profiled at another time" in w]
    assert said and said[0].startswith("e2e/rollout_prof_rank-1.json.gz (rollout rank 1)")
    assert set(rep.tables["rl_ledger"]["role_rank"].to_list()) == {0}


def test_the_ledger_is_in_every_output(reports, tmp_path):
    import openpyxl

    from profan.render.brief import brief

    rep = reports["long_tail"]
    doc = rep.to_dict()
    gen = doc["rl_ledger"]["steps"][0]["phases"][0]
    assert (
        gen["phase"] == "generation" and abs(gen["phase_us"] - timers("long_tail")[1]["gen"]) / gen["phase_us"] < 0.05
    )
    assert [r["role"] for r in doc["rl_ledger"]["ranks"]] == ["rollout", "rollout", "actor"]
    small = brief(rep, max_bytes=4000)["summary"]["rl_ledger"]  # the MCP analyze tool's default size
    steps = doc["rl_ledger"]["steps"]
    mean_gen = sum(s["phases"][0]["phase_us"] for s in steps) / len(steps) / 1000
    assert small["phases"][0] == {
        "phase": "generation",
        "ms": round(mean_gen, 1),
        "timer_ms": round(sum(timers("long_tail")[s]["gen"] for s in (1, 2)) / 2000, 1),
        "max_diff_pct": round(max(abs(s["phases"][0]["diff_pct"]) for s in steps), 1),
    }
    assert small["busy_share"]["rollout 1"] == round(doc["rl_ledger"]["ranks"][1]["busy_share"], 3)
    run = RUNS / "long_tail"
    for fmt in ("md", "html", "xlsx"):
        cmd = [sys.executable, "-m", "profan", "analyze", str(run), "--format", fmt, "-o", str(tmp_path / f"r.{fmt}")]
        assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    md = (tmp_path / "r.md").read_text()
    want = (
        f"| 1 | generation | {fmt_ms(gen['phase_us'])} | {fmt_ms(gen['timer_us'])} | {gen['diff_pct']:+.1f}% | trace |"
    )
    assert "## RL step ledger" in md and want in md
    assert "rl_phases" in (tmp_path / "r.html").read_text()
    assert "Rl phases" in openpyxl.load_workbook(tmp_path / "r.xlsx").sheetnames


def test_a_timer_the_traces_disagree_with_is_a_warning(tmp_path):
    job = copy_run(tmp_path)
    lines = (job / "metrics.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["data"]["timing_s/reward"] *= 1.2  # the timer now says 20% more than the traces hold
    (job / "metrics.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    rep = analyze(job)
    said = [w for w in rep.warnings if w.startswith("RL phase reward in step 1:")]
    assert len(said) == 1 and "timing_s/reward (-16.6%, more than 5%)" in said[0], rep.warnings


def test_sync_cites_the_work_in_its_window_and_busy_is_of_the_host(reports):
    sync = next(c for c in reports["slow_sync"].causes if c.check == "rl-weight-sync")
    files = {e.file for e in sync.evidence}
    assert files == {
        "e2e/actor_prof_rank-0.json.gz",
        "e2e/rollout_prof_rank-0.json.gz",
        "e2e/rollout_prof_rank-1.json.gz",
        "metrics.jsonl",
    }
    assert set(reports["normal"].tables["rl_ledger"]["busy_of"]) == {"host (CPU-only trace)"}


def test_without_the_timer_log_the_ledger_says_it_is_not_reconciled(tmp_path):
    job = copy_run(tmp_path)
    (job / "metrics.jsonl").unlink()
    rep = analyze(job)
    assert "RL job: no per-step timer log (metrics.jsonl) beside the traces: the ledger is not reconciled" in rep.notes
    assert rep.tables["rl_phases"]["timer_us"].null_count() == rep.tables["rl_phases"].height


def test_a_bad_timer_line_is_counted_and_the_rest_read(tmp_path):
    job = copy_run(tmp_path)
    with open(job / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"step": "x"}\nnot json\n')
    rep = analyze(job)
    assert "metrics.jsonl: skipped 2 line(s) that are no {step, data} JSON record" in rep.warnings
    assert rep.tables["rl_phases"]["timer_us"].null_count() == 0  # advantage included: every phase has its timer


def test_one_role_alone_says_the_generation_is_unmarked():
    rep = analyze(RUNS / "normal" / "e2e" / "actor_prof_rank-0.json.gz")
    assert [w for w in rep.warnings if w.startswith("no trace of this RL job marks generation (generate_sequences)")]


def test_discrete_mode_role_folders_are_each_a_trace(tmp_path):
    """verl's discrete mode writes a role's rank once per annotated call, in a folder per call: each is read."""
    job = tmp_path / "discrete"
    for folder in ("rollout_generate", "actor_update", "actor_compute_log_prob"):
        (job / folder).mkdir(parents=True)
    shutil.copy(
        RUNS / "normal" / "e2e" / "rollout_prof_rank-0.json.gz", job / "rollout_generate" / "prof_rank-0.json.gz"
    )
    for folder in ("actor_update", "actor_compute_log_prob"):
        shutil.copy(RUNS / "normal" / "e2e" / "actor_prof_rank-0.json.gz", job / folder / "prof_rank-0.json.gz")
    rep = analyze(job)
    ranks = rep.source["ranks"]
    assert [(r["info"]["role"], r["info"]["role_rank"], r["path"]) for r in ranks] == [
        ("rollout", 0, "rollout_generate/prof_rank-0.json.gz"),
        ("actor", 0, "actor_compute_log_prob/prof_rank-0.json.gz"),
        ("actor", 0, "actor_update/prof_rank-0.json.gz"),
    ]
    assert ranks[2]["rank_origin"] == "actor rank 0 (folder actor_update/)"
    assert not [w for w in rep.warnings if "appears in" in w]


def test_update_dominated_under_a_lower_threshold_bounds_its_excess(tmp_path):
    import polars as pl

    rules = tmp_path / "update.toml"
    rules.write_text('[[check]]\nid = "rl-update-dominated"\nwarning_share = 0.40\ncritical_share = 0.80\n')
    rep = analyze(RUNS / "normal", rules=[rules])
    cause = next(c for c in rep.causes if c.check == "rl-update-dominated")
    phases = rep.tables["rl_phases"].filter(pl.col("phase") == "actor update")
    update, step = phases["phase_us"].mean(), rep.tables["rl_steps"]["step_us"].mean()
    assert cause.impact_us is None and abs(cause.bound_us - (update - 0.40 * step)) < 1e-3
    assert f"{100 * update / step:.1f}% of the RL step" in cause.title


def test_torch_npu_folders_in_verl_role_folders_are_one_job(tmp_path):
    """verl's npu tool writes a *_ascend_pt folder per rank in the role folders: once refused as two collections
    whose ranks overlap, now one job with the role said (the ledger itself reads Kineto traces)."""
    rank0 = RUNS.parent.parent / "ascend" / "msinsight-alexnet-2rank-2025" / "level0" / "rank0_ascend_pt"
    for folder in ("rollout_generate", "actor_update"):
        shutil.copytree(rank0, tmp_path / "npu" / folder / rank0.name)
    rep = analyze(tmp_path / "npu")
    assert [(r["info"]["role"], r["rank_origin"]) for r in rep.source["ranks"]] == [
        ("rollout", "rollout rank 0 (folder rollout_generate/)"),
        ("actor", "actor rank 0 (folder actor_update/)"),
    ]
    assert "RL job: its roles are read, but the step ledger reads the phases' annotations of Kineto traces only" in (
        rep.notes
    )
