"""The per-rank map as Ray tasks gives the same report, byte for byte, as reading the ranks locally.

A local Ray instance (2 CPUs) is started by the test itself; the CLI's ``--executor ray`` then joins it (``auto``)
instead of starting its own. Skipped, saying why, when Ray is not installed (``pip install 'profan[ray]'``)."""

from __future__ import annotations

import pytest
from conftest import run_cli

from profan.synth import generate

pytestmark = pytest.mark.ray  # starts a local Ray cluster: left out of the fast loop

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'profan[ray]' to test --executor ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def cluster64(tmp_path_factory):
    """64 ranks with a planted straggler, so the report has causes, grouped findings and every table."""
    root = tmp_path_factory.mktemp("ray") / "c64"
    generate(root, ranks=64, layers=1, steps=2, seed=7, straggler_rank=9, straggler_extra_us=4000.0, trace=False)
    return root


def test_ray_and_local_reports_are_identical(local_ray, cluster64, tmp_path, monkeypatch):
    """The JSON reports of `analyze` read locally (one process) and as Ray tasks are the same bytes, apart from
    the timings line; the Ray run did use the cluster (each batch's ranks came back from a Ray task)."""
    local, on_ray = tmp_path / "local.json", tmp_path / "ray.json"
    assert run_cli("analyze", str(cluster64), "-j", "1", "-q", "-o", str(local)).returncode == 0
    fetched = []
    get = ray.get
    monkeypatch.setattr(ray, "get", lambda ref, **kw: fetched.append(ref) or get(ref, **kw))
    done = run_cli("analyze", str(cluster64), "--executor", "ray", "-q", "-o", str(on_ray))
    assert done.returncode == 0, done.stderr
    a, b = (p.read_text(encoding="utf-8").splitlines() for p in (local, on_ray))
    assert len(a) == len(b) > 1000
    differ = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    assert all('"read":' in x or '"analyse":' in x for x, _ in differ), differ[:3]
    assert any('"rank": 9' in line for line in a)  # the straggler is named, on both sides
    assert len(fetched) >= 64 // 16  # at least one task per batch of 16 ranks


def test_ray_compare_matches_local(local_ray, cluster64, tmp_path):
    """`compare --executor ray` of two ranks: the same Markdown as the local run."""
    args = ("compare", str(cluster64), "--ranks", "0,9", "-q")
    local = run_cli(*args, "-j", "1")
    on_ray = run_cli(*args, "--executor", "ray")
    assert local.returncode == on_ray.returncode == 0, on_ray.stderr
    assert on_ray.stdout == local.stdout and "rank 9" in local.stdout.lower()


def test_ray_executor_refuses_jobs(cluster64):
    done = run_cli("analyze", str(cluster64), "--executor", "ray", "-j", "2")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "drop -j" in done.stderr


def test_an_address_nobody_answers_is_one_line(cluster64, monkeypatch):
    """Ray retries an unreachable cluster for minutes; profan says so at once, in one line."""
    import socket

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process, whatever ran before

    with socket.socket() as s:  # a port on this machine that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = run_cli("analyze", str(cluster64), "--executor", "ray", "--ray-address", f"127.0.0.1:{port}")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert f"--ray-address 127.0.0.1:{port}: no Ray cluster answers there" in done.stderr
