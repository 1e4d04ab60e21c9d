"""An RL job's roles and ranks read from the traces themselves where their names say nothing: copies of the real
normal run (fixtures/torch/rl_grpo_cpu/normal) renamed worker_a/b/c, read with the role their annotations mark
(verl's worker methods), the rank from distributedInfo where the header has one, else by path order (said), and
from the Ray worker's process name where no phase annotation tells it."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from profan.pipeline import analyze
from profan.sources.discovery.discover import discover

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "rl_grpo_cpu" / "normal"
NAMES = {"rollout_prof_rank-0": "worker_a", "rollout_prof_rank-1": "worker_b", "actor_prof_rank-0": "worker_c"}


def anonymous(tmp_path: Path) -> Path:
    """The normal run with its traces renamed so neither name nor folder tells a role."""
    job = tmp_path / "job"
    (job / "traces").mkdir(parents=True)
    for old, new in NAMES.items():
        shutil.copy(RUN / "e2e" / f"{old}.json.gz", job / "traces" / f"{new}.json.gz")
    shutil.copy(RUN / "metrics.jsonl", job / "metrics.jsonl")
    return job


def rewrite(path: Path, change) -> None:
    """The trace with ``change(doc)`` applied (its return, where it gives one, is the new document)."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    doc = change(doc) or doc
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_roles_from_annotations_and_ranks_by_path_order(tmp_path):
    disc = discover(anonymous(tmp_path))
    told = {rs.path.name: (rs.role, rs.role_rank, rs.rank_origin) for rs in disc.ranks}
    assert {name: t[:2] for name, t in told.items()} == {
        "worker_a.json.gz": ("rollout", 0),
        "worker_b.json.gz": ("rollout", 1),
        "worker_c.json.gz": ("actor", 0),
    }
    assert "its annotations (generate_sequences)" in told["worker_a.json.gz"][2]
    assert "by path order among its role (no distributedInfo)" in told["worker_b.json.gz"][2]


def test_the_ledger_of_the_renamed_copy_is_the_original_ledger(tmp_path):
    named, renamed = analyze(RUN), analyze(anonymous(tmp_path))
    cols = ["step", "phase", "phase_us", "timer_us"]
    assert renamed.tables["rl_phases"].select(cols).equals(named.tables["rl_phases"].select(cols))
    assert renamed.tables["rl_ledger"]["role"].to_list() == named.tables["rl_ledger"]["role"].to_list()


def test_rank_from_distributed_info(tmp_path):
    """verl's workers initialise torch.distributed, so Kineto writes distributedInfo: it gives the rank."""
    job = anonymous(tmp_path)
    for name, rank in (("worker_a", 1), ("worker_b", 0)):
        # Kineto writes distributedInfo before traceEvents, in the head discovery reads
        rewrite(job / "traces" / f"{name}.json.gz", lambda doc, r=rank: {"distributedInfo": {"rank": r}, **doc})
    ranks = {rs.path.name: (rs.role, rs.role_rank) for rs in discover(job).ranks}
    assert ranks["worker_a.json.gz"] == ("rollout", 1) and ranks["worker_b.json.gz"] == ("rollout", 0)


def test_role_from_the_ray_workers_process_name(tmp_path):
    """No phase annotation (a framework that marks none): the process name ray::RolloutWorker tells the role."""
    job = anonymous(tmp_path)

    def unmark(doc):
        for event in doc["traceEvents"]:
            if event.get("name") == "generate_sequences":
                event["name"] = "a_call"

    rewrite(job / "traces" / "worker_a.json.gz", unmark)
    disc = discover(job)
    worker = next(rs for rs in disc.ranks if rs.path.name == "worker_a.json.gz")
    assert worker.role == "rollout" and "its process name ray::RolloutWorker" in worker.rank_origin


@pytest.mark.parametrize("plain", ["serving_llama_cpu_mixed/trace.json.gz", "gloo_healthy_seeds/r2_seed1"])
def test_a_trace_of_no_rl_job_is_not_given_a_role(plain):
    """Plain torch captures (a serving run, a gloo training job: no RL annotation, no Ray worker) stay no RL job,
    though their content is read for a role."""
    disc = discover(RUN.parents[1] / plain)
    assert disc.ranks and all(rs.role is None for rs in disc.ranks)


def test_a_colocated_workers_trace_is_actor_rollout(tmp_path):
    """The colocated run's one trace, renamed: it generates and updates, so it is verl's actor_rollout."""
    shutil.copy(RUN.parent / "colocated" / "e2e" / "actor_rollout_prof_rank-0.json.gz", tmp_path / "worker.json.gz")
    (only,) = discover(tmp_path).ranks
    assert (only.role, only.role_rank) == ("actor_rollout", 0)
    assert "compute_log_prob" in only.rank_origin and "generate_sequences" in only.rank_origin
