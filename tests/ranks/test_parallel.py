"""Reading ranks in worker processes gives exactly the sequential result; input errors still surface as one line."""

from __future__ import annotations

import os

import msgspec
import polars as pl
import pytest
from conftest import FIXTURES

import profan
from profan.model.errors import ProfanError, ProfanInputError
from profan.ranks.rankmap import load_ranks, resolve_jobs
from profan.rulepack.pack import load
from profan.sources.discovery.discover import discover
from profan.synth import generate

pytestmark = pytest.mark.slow  # large generated inputs or many examples: left out of the fast loop


def _canon(f) -> dict:
    d = f.to_dict()
    for ev in d["evidence"]:
        for kind in ("lines", "events", "pointers"):
            if kind in ev:
                ev[kind] = sorted(ev[kind])
    return d


def test_process_pool_matches_sequential(tmp_path):
    generate(
        tmp_path / "c", ranks=8, layers=2, steps=1, seed=9, straggler_rank=6, straggler_extra_us=3000.0, trace=False
    )
    seq = profan.analyze(tmp_path / "c", jobs=1)
    par = profan.analyze(tmp_path / "c", jobs=2)
    # rows of equal duration may be listed in another order (polars' group order depends on its thread count),
    # so cited locators are compared as sets; everything else must be identical
    assert [_canon(f) for f in par.findings] == [_canon(f) for f in seq.findings]
    assert set(par.tables) == set(seq.tables)
    for name, t in seq.tables.items():  # same rows; sums may differ in the last bit (summation order)
        p = par.tables[name]
        assert p.height == t.height and p.columns == t.columns, name
        for c, dt in t.schema.items():
            if dt.is_numeric():
                assert p[c].sum() == pytest.approx(t[c].sum(), rel=1e-9, abs=1e-9), (name, c)
            elif dt == pl.String and name != "top_kernels":  # top-N lists may pick another of equal-time ties
                assert sorted(p[c].drop_nulls()) == sorted(t[c].drop_nulls()), (name, c)
    assert [f.rank for f in par.findings if f.check == "straggler" and f.severity != "info"] == [6]


def test_worker_input_error_is_one_profan_error(tmp_path):
    generate(tmp_path / "c", ranks=4, layers=1, steps=1, seed=2, trace=False)
    bad = next((tmp_path / "c").glob("*41002*")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    bad.write_text(bad.read_text().splitlines()[0] + "\n")  # header only
    with pytest.raises(ProfanInputError, match="no data rows"):
        profan.analyze(tmp_path / "c", jobs=2)


@pytest.mark.parametrize("bad_ranks", [(3,), (1, 3)])
def test_input_error_of_this_process_or_a_worker_names_the_first_bad_rank(tmp_path, bad_ranks):
    """With two jobs, whichever worker meets a bad rank first, the error is the one a sequential read gives (the
    first bad rank in order)."""
    generate(tmp_path / "c", ranks=4, layers=1, steps=1, seed=2, trace=False)
    for r in bad_ranks:
        bad = next((tmp_path / "c").glob(f"*4100{r}*")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        bad.write_text(bad.read_text().splitlines()[0] + "\n")  # header only
    with pytest.raises(ProfanInputError, match="no data rows") as seq:
        profan.analyze(tmp_path / "c", jobs=1)
    with pytest.raises(ProfanInputError, match="no data rows") as par:
        profan.analyze(tmp_path / "c", jobs=2)
    assert par.value.path == seq.value.path and f"4100{bad_ranks[0]}" in par.value.path


class _KillsWorker:
    """Unpickled in a worker process, ends it at once (as the kernel's OOM killer would)."""

    def __reduce__(self):
        return (os._exit, (1,))


def test_dead_worker_is_one_profan_error(tmp_path):
    generate(tmp_path / "c", ranks=4, layers=1, steps=1, seed=2, trace=False)
    disc = discover(tmp_path / "c")
    disc.ranks[0].files["poison"] = _KillsWorker()  # the worker that takes rank 0 ends
    with pytest.raises(ProfanError, match="worker process died"):
        load_ranks(disc.ranks, disc.root, load(), jobs=2)


def test_jobs_resolution(monkeypatch, tmp_path):
    from profan.ranks import rankmap
    from profan.ranks.rankmap import AUTO_MIN_BYTES, GZ_FACTOR, work_bytes

    monkeypatch.delenv("PROFAN_JOBS", raising=False)
    monkeypatch.setattr(rankmap, "_cores", lambda: 2)
    big = AUTO_MIN_BYTES
    assert resolve_jobs(None, 64, big) == 1  # a library call never starts processes unasked
    assert resolve_jobs(3, 2) == 2  # never more workers than ranks
    assert resolve_jobs(0, 64, big) == 2  # automatic: one per core for enough ranks holding enough bytes
    assert resolve_jobs(0, 64, big - 1) == 1  # few bytes: a worker's start costs what it saves
    assert resolve_jobs(0, 3, 10 * big) == 1  # few ranks
    monkeypatch.setenv("PROFAN_JOBS", "0")
    assert resolve_jobs(None, 64, big) == 2
    monkeypatch.setenv("PROFAN_JOBS", "2")
    assert resolve_jobs(None, 64) == 2
    # the bytes weighed: the real files of the ranks, a .gz trace counted as the JSON it unpacks to (about)
    qwen = discover(FIXTURES / "ascend" / "msinsight-qwen3-4rank-2025q4").ranks
    on_disk = sum(p.stat().st_size for rs in qwen for p in rs.files.values())
    assert work_bytes(qwen) == on_disk > 0
    nccl = discover(FIXTURES / "torch" / "nccl_a100_1rank").ranks
    (gz,) = [p for rs in nccl for p in rs.files.values()]
    assert str(gz).endswith(".gz") and work_bytes(nccl) == GZ_FACTOR * gz.stat().st_size


def test_real_cluster_report_is_identical_sequential_and_parallel():
    """On real traces the whole report — every cited row, every example name, every table — is the same whether
    ranks are read in this process or in workers: ties in time are broken by name or row, never by the order
    a hash grouping happened to produce. Only whether a rank's trace came from the parse cache (its ``info``
    says so) may differ: the first run that parses a trace caches it for the later ones."""

    def doc(jobs: int) -> dict:
        d = profan.analyze(FIXTURES / "torch" / "dlrm_v100_8rank", jobs=jobs).to_dict()
        d["meta"].pop("timings_s")
        for rank in d["source"]["ranks"]:
            rank["info"].pop("cache", None)
        return d

    seq, par, again = doc(1), doc(2), doc(1)
    assert [f["check"] for f in seq["findings"]].count("straggler") >= 1
    # as text, so the order of keys and rows counts too
    assert msgspec.json.encode(par) == msgspec.json.encode(seq) == msgspec.json.encode(again)


def test_a_batch_that_fails_as_a_whole_is_read_rank_by_rank(tmp_path, monkeypatch):
    """Should a step computed for a whole batch fail, the batch's ranks are read one at a time: the report is
    the same, and a rank with an input error is still the one reported, first in order. (The batched step is
    made to fail here, in this process: the sequential read.)"""
    import shutil

    from profan.sources.ascend_text import matrix as ascend_matrix

    root = tmp_path / "qwen"
    shutil.copytree(FIXTURES / "ascend" / "msinsight-qwen3-4rank-2025q4", root)
    want = profan.analyze(root, jobs=1).to_dict()
    alone = ascend_matrix.rank_link_totals

    failed = []

    def broken(parts):
        if len(parts) > 1:
            failed.append(len(parts))
            raise RuntimeError("batched step failed")
        return alone(parts)

    monkeypatch.setattr(ascend_matrix, "rank_link_totals", broken)
    got = profan.analyze(root, jobs=1).to_dict()
    assert failed == [4]  # the batch of four failed, and its ranks were read again one by one
    for d in (want, got):
        d["meta"].pop("timings_s")
    assert got == want
    bad = root / "rank_2_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    bad.write_text(bad.read_text().splitlines(keepends=True)[0])
    with pytest.raises(ProfanInputError, match=r"rank_2_ascend_pt.*no data rows"):
        profan.analyze(root, jobs=1)
    assert failed == [4, 3]


@pytest.mark.parametrize(("n", "jobs"), [(5, 2), (8, 8), (64, 2), (40, 1)])
def test_every_process_gets_a_share_of_the_ranks(n, jobs, monkeypatch):
    """Ranks go to the executor in batches of at most `rankmap.BATCH`, in order, each rank once; a few (big) ranks
    are shared out so that every process gets some."""
    from types import SimpleNamespace

    from profan.ranks import executor as parallel
    from profan.ranks import rankmap

    sources = [SimpleNamespace(rank=i, files={}) for i in range(n)]
    seen = []

    class Recording:
        def map(self, fn, batches):
            for b in batches:
                seen.append([s.rank for s in b])
                yield [SimpleNamespace(rank=s.rank) for s in b]

    monkeypatch.setattr(parallel, "executor", lambda j: Recording())
    got = rankmap.load_ranks(sources, FIXTURES, load(), jobs=jobs)
    assert [r.rank for r in got] == [i for b in seen for i in b] == list(range(n))
    assert max(map(len, seen)) <= rankmap.BATCH and len(seen) >= jobs


def test_a_process_pool_yields_every_batch_once_in_order():
    """Whichever worker finishes first, the results come in the batches' order."""
    from profan.ranks import executor as parallel

    batches = [[0] * i for i in range(40)]
    assert list(parallel.ProcessPool(3).map(len, batches)) == list(range(40))
    assert list(parallel.InProcess().map(len, batches)) == list(range(40))


def test_the_command_line_sets_the_allocator_to_return_freed_memory_unless_the_user_did(monkeypatch):
    """polars' jemalloc reads its settings from the environment once: the command line sets them (inherited by
    its workers) before polars is imported, and leaves a user's own settings alone."""
    from conftest import run_cli

    from profan.app.cli import JEMALLOC_ENV, JEMALLOC_SETTINGS

    monkeypatch.delenv(JEMALLOC_ENV, raising=False)
    assert run_cli("--version").returncode == 0
    assert os.environ[JEMALLOC_ENV] == JEMALLOC_SETTINGS == "background_thread:true,dirty_decay_ms:250,muzzy_decay_ms:0"
    monkeypatch.setenv(JEMALLOC_ENV, "narenas:2")
    assert run_cli("--version").returncode == 0
    assert os.environ[JEMALLOC_ENV] == "narenas:2"


def test_a_ranks_link_rows_carry_only_their_own_text(tmp_path):
    """A rank's result crosses to the reduce pickled (and is held there, a rank among thousands): its link rows'
    pointers must not keep the text of the whole batch's matrix entries they were cut from."""
    import pickle

    from profan.ranks import rankmap

    generate(tmp_path / "c", ranks=16, layers=1, steps=1, seed=3, trace=False, tp=8)
    got = rankmap.read_ranks(discover(tmp_path / "c").ranks, tmp_path / "c", load())
    assert len(got) == 16
    for r in got:
        links = r.comm_links
        assert links.height > 0 and links["pointers"].list.len().min() >= 1
        assert len(pickle.dumps(links)) < 2 * links.estimated_size() + 8192, r.rank


def _frames_agree(x: pl.DataFrame, y: pl.DataFrame) -> bool:
    """Row by row, in order; floats to 1e-12 of each other (a sum's last bits depend on the order a parallel
    grouping added its rows, from one run to the next in one thread too)."""
    from polars.testing import assert_frame_equal

    try:
        assert_frame_equal(x, y, check_exact=False, rel_tol=1e-12, abs_tol=1e-9)
    except AssertionError:
        return False
    return True


def _same_rank(a, b) -> list[str]:
    """The fields in which two reads of one rank differ (frames compared row by row, in order)."""
    import dataclasses

    differ = []
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "info":  # but whether the parse cache served it: the first read fills the cache
            x, y = ({k: v for k, v in d.items() if k != "cache"} for d in (x, y))
        if f.name == "windows" and x is not None and y is not None:  # a set: its order varies in one thread too
            x, y = x.sort(x.columns), y.sort(y.columns)
        if x is None or y is None:
            same = x is y
        elif isinstance(x, pl.DataFrame):
            same = _frames_agree(x, y)
        elif isinstance(x, dict) and any(isinstance(v, pl.DataFrame) for v in x.values()):
            same = x.keys() == y.keys() and all(_frames_agree(x[k], y[k]) for k in x)
        else:
            same = x == y
        if not same:
            differ.append(f.name)
    return differ


@pytest.mark.parametrize(
    "sample",
    [
        "ascend/msinsight-qwen3-4rank-2025q4",
        "ascend/msinsight-alexnet-2rank-2025-db",
        "ascend/msinsight-gpt3-2rank-2023",
        "torch/dlrm_v100_8rank",
        "torch/memory_gloo_2rank",
    ],
)
def test_ranks_read_over_threads_are_the_ranks_read_one_after_the_other(sample):
    """This process reads a batch's ranks over its cores as threads: each rank's every table, in order, is what
    one thread reads (the real samples: Ascend with its batch-wide collectives, a DB export, the 2023 format,
    Kineto, memory)."""
    from profan.ranks.rankmap import read_ranks

    disc = discover(FIXTURES / sample)
    pack = load()
    one = read_ranks(disc.ranks, disc.root, pack, threads=1)
    two = read_ranks(disc.ranks, disc.root, pack, threads=2)
    assert len(one) == len(two) == len(disc.ranks) > 1
    assert [r.rank for r in two] == [r.rank for r in one]
    assert [(r.rank, _same_rank(a, r)) for a, r in zip(one, two, strict=True)] == [(r.rank, []) for r in one]
    assert sum(r.groups.height for r in two if r.groups is not None) > 0


def test_threads_report_the_first_bad_rank_in_order(tmp_path):
    """Two bad ranks read by two threads at once: the error kept is the first one in order, as one thread
    reading them one after the other reports it."""
    from profan.ranks.rankmap import read_ranks

    generate(tmp_path / "c", ranks=4, layers=1, steps=1, seed=2, trace=False)
    for r in (1, 2):
        bad = next((tmp_path / "c").glob(f"*4100{r}*")) / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
        bad.write_text(bad.read_text().splitlines()[0] + "\n")  # header only
    disc = discover(tmp_path / "c")
    got = read_ranks(disc.ranks, disc.root, load(), threads=2)
    errors = [(i, g.path) for i, g in enumerate(got) if isinstance(g, ProfanInputError)]
    assert [i for i, _ in errors] == [1, 2] and "41001" in errors[0][1]
    with pytest.raises(ProfanInputError, match="no data rows") as first:
        load_ranks(disc.ranks, disc.root, load(), jobs=1)
    assert "41001" in first.value.path


@pytest.mark.parametrize(("jobs", "threads"), [(0, 2), (1, 1), (None, 1)])
def test_only_the_automatic_choice_reads_a_small_job_over_threads(monkeypatch, jobs, threads):
    """``-j 0`` (the command line's default) reads a job too small for processes (DLRM: 8 ranks, 7.4 MB) over this
    process's cores as threads; ``-j 1`` and a library call that asks for nothing stay on one thread."""
    from profan.ranks import rankmap

    monkeypatch.delenv("PROFAN_JOBS", raising=False)
    monkeypatch.setattr(rankmap, "_cores", lambda: 2)
    asked = []
    read = rankmap.read_ranks
    monkeypatch.setattr(rankmap, "read_ranks", lambda *a, **kw: asked.append(kw["threads"]) or read(*a, **kw))
    disc = discover(FIXTURES / "torch" / "dlrm_v100_8rank")
    got = load_ranks(disc.ranks, disc.root, load(), jobs=jobs)
    assert [r.rank for r in got] == list(range(8))
    assert asked == [threads]


def test_a_failed_read_over_threads_drops_the_ranks_not_begun():
    """The first rank fails (or the user interrupts) while the others wait their turn: the error comes back at
    once and the ranks not begun are never read, rather than the whole batch finishing first."""
    import threading
    import time

    from profan.ranks.rankmap import _each

    ran = []
    lock = threading.Lock()

    def read(i: int) -> int:
        with lock:
            ran.append(i)
        if i == 0:
            time.sleep(0.05)
            raise KeyboardInterrupt
        time.sleep(0.01)
        return i

    with pytest.raises(KeyboardInterrupt):
        _each(read, range(64), threads=2)
    time.sleep(0.1)  # the one in flight beside it ends
    assert 0 in ran and len(ran) < 16
    assert _each(lambda i: i * i, range(5), threads=2) == [0, 1, 4, 9, 16]


def test_a_ctrl_c_while_threads_read_stops_at_once():
    """The user interrupts while two threads read: the interrupt reaches the waiting thread within a slice of the
    wait, not once the ranks in flight are read, and the ranks not begun never start. The signal is delivered to
    a reading thread, as the OS may deliver a Ctrl-C to any thread (SIGALRM, with a handler that raises
    KeyboardInterrupt as Python's SIGINT handler does: Python runs it in the main thread)."""
    import signal
    import threading
    import time

    from profan.ranks.rankmap import _each

    started = []
    lock = threading.Lock()

    def read(i: int) -> int:
        with lock:
            started.append(i)
        if i == 0:
            time.sleep(0.2)
            signal.pthread_kill(threading.get_ident(), signal.SIGALRM)
        time.sleep(1.0)
        return i

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        t0 = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            _each(read, range(8), threads=2)
        waited = time.perf_counter() - t0
    finally:
        signal.signal(signal.SIGALRM, old)
    assert waited < 0.8  # the two in flight take 1 s: the interrupt did not wait for them
    time.sleep(1.0)  # they end; nothing else begins
    assert sorted(started) == [0, 1]
