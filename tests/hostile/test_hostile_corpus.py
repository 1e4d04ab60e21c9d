"""Run the hostile corpus (``tests/hostile_corpus.py``) through the real CLI, one process per command.

Every class must give exit 0 (a report; its warnings say what was skipped) or exit 2 (exactly one non-empty line
on stderr, starting ``profan: error: ``) — never exit 3, never a traceback, never a hang (60 s timeout per
command), peak RSS below 1 GB. Nothing outside the case folder may be read into an output: a canary folder beside
it holds a random secret that must never appear on stdout, stderr or in any written file. Nothing may be written
but the named outputs: the case folder's entries (path, type, size, mtime_ns) are snapshotted before and after
each command, and the canary folder must not change at all. Then each class's own checks run (the error names the
file, the warning counts the skipped rows exactly, …).

Each command is a process of its own, forked from a server that has imported profan once (``tests/prefork.py``:
a fresh ``python -m profan`` spends ~0.7 s of CPU on start-up and imports, more than most commands here spend on
their input, and the corpus runs ~150 of them). It runs with its own exit code, stdout and stderr files, stdin
on /dev/null, the case's folder and environment, in a session of its own; a class that needs a wrapper (setpriv)
``exec``-s ``WRAPPER python -m profan ARGS`` from that fork instead.

Peak RSS: the server forks a launcher per command, which forks the command and reaps it with ``os.wait4``; the
command's ``ru_maxrss`` is its peak RSS and that of every process it waited for (its workers), in kB. Why not
simpler ways: ``getrusage(RUSAGE_CHILDREN)`` is a max over every child this test process ever reaped, so it cannot
measure one command among many; and ``os.wait4`` on a child started straight from this process is no better,
because the child starts from pytest's address space (hundreds of MB after building the big cases). A forked
command starts from the server's (~70 MB: the interpreter and the imports every ``python -m profan`` analysis
makes itself), so that floor is what every figure carries. It is a measurement, not a cap: a command that goes
past 1 GB is reported with the figure it reached.
A command past the timeout is killed with its whole process group (it runs in a session of its own); its figure
is then the larger of its VmHWM read just before and what ``wait4`` reports.

The classes run in a pool of 3 threads (each waiting on a command's process; the heavy classes and likely hangs first),
once per session; each class is then one test, so a failure names its class. Running a subset (``-k``) builds and
runs only the selected classes.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import hostile_corpus as hc
import pytest
from prefork import ForkServer

pytestmark = pytest.mark.process  # runs profan in child processes: left out of the fast loop

TIMEOUT_S = 60
MAX_RSS_KB = 1 << 20  # 1 GiB
WORKERS = 3
ERROR_PREFIX = "profan: error: "


@dataclass
class Outcome:
    case: hc.Case | None = None
    results: list[hc.Result] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PROFAN_NO_CACHE", None)
    env.pop("PROFAN_JOBS", None)
    env["PROFAN_CACHE_DIR"] = str(cache)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(
    server: ForkServer, args: list[str], wrapper: tuple[str, ...], cwd: Path, env: dict[str, str], log: Path
) -> tuple[int | None, str, str, float, int]:
    """(exit code or None on timeout, stdout, stderr, seconds, peak RSS in kB) of ``profan ARGS``: forked from the
    preloaded server, or with a ``wrapper`` (setpriv) ``exec``-ed as ``WRAPPER python -m profan ARGS``."""
    out_path, err_path = log.with_suffix(".out"), log.with_suffix(".err")
    request = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(out_path), "stderr": str(err_path)}
    if wrapper:
        request.update(args=[*wrapper, sys.executable, "-m", "profan", *args], exec=True)
    rc, seconds, rss = server.run(request, timeout=TIMEOUT_S)
    return (
        rc,
        out_path.read_bytes().decode("utf-8", "replace"),
        err_path.read_bytes().decode("utf-8", "replace"),
        seconds,
        rss,
    )


def _snapshot(root: Path, skip: Path | None = None) -> dict[str, tuple]:
    """Every entry under ``root`` (not following links): files by (size, mtime_ns), links by target, folders and
    other entries by kind. ``skip``: a folder left out (the case's own cache)."""
    snap: dict[str, tuple] = {}
    if not root.exists():
        return snap
    for dirpath, dirnames, filenames in os.walk(root):
        d = Path(dirpath)
        if skip is not None:
            dirnames[:] = [n for n in dirnames if d / n != skip]
        for n in dirnames + filenames:
            p = d / n
            try:
                st = p.lstat()
            except OSError:
                continue
            rel = str(p.relative_to(root))
            if p.is_symlink():
                snap[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                snap[rel] = ("dir",)
            elif p.is_file():
                snap[rel] = ("file", st.st_size, st.st_mtime_ns)
            else:
                snap[rel] = ("other", st.st_mode)
    return snap


def _texts(path: Path) -> list[str]:
    """A written file's text, and the members of a zip (an .xlsx) decompressed."""
    try:
        raw = path.read_bytes()
    except OSError:
        return []
    texts = [raw.decode("utf-8", "replace")]
    if raw[:2] == b"PK":
        try:
            with zipfile.ZipFile(path) as z:
                texts += [z.read(m).decode("utf-8", "replace") for m in z.namelist()]
        except (zipfile.BadZipFile, OSError):
            pass
    return texts


def _allowed(rel: str, outputs: set[str]) -> bool:
    """A changed entry is allowed when it is a named output or a folder on the way to one."""
    return rel in outputs or any(o.startswith(rel + os.sep) for o in outputs)


def _run_case(server: ForkServer, name: str, base: Path) -> Outcome:
    oc = Outcome()
    t0 = time.monotonic()
    folder = base / name
    folder.mkdir(parents=True)
    try:
        case = hc.CLASSES[name](folder / "case")
    except Exception as exc:  # the generator's own bug: reported against the class, never hides the others
        oc.failures.append(f"generator crashed: {type(exc).__name__}: {exc}")
        return oc
    oc.case = case
    if case.skip:
        return oc
    cache = case.cache_dir or folder / "cache"
    env = _env(cache)
    forbidden = (case.secret, *case.forbidden)
    canary_before = _snapshot(case.canary)
    try:
        for i, step in enumerate(case.steps):
            where = f"step {i + 1}"
            try:
                if step.before is not None:
                    step.before()
                args = step.args() if callable(step.args) else list(step.args)
            except Exception as exc:
                oc.failures.append(f"{where}: setting up the step failed: {type(exc).__name__}: {exc}")
                break
            before = _snapshot(case.root, skip=case.cache_dir)
            rc, out, err, secs, rss = _run(server, args, case.wrapper, case.root, env, folder / f"step{i + 1}")
            res = hc.Result(case=case, step=step, args=args, rc=rc, stdout=out, stderr=err, seconds=secs, maxrss_kb=rss)
            oc.results.append(res)
            where = f"step {i + 1} (profan {' '.join(a if len(a) < 120 else a[:60] + '…' for a in args)})"
            oc.failures += [f"{where}: {f}" for f in _shared_checks(res, before, case, forbidden)]
            if rc is None:
                continue  # a hang says it all; the class's own checks would only repeat it
            for check in step.checks:
                try:
                    check(res)
                except AssertionError as exc:
                    oc.failures.append(f"{where}: {exc}")
                except Exception as exc:
                    oc.failures.append(f"{where}: check raised {type(exc).__name__}: {exc}")
        if _snapshot(case.canary) != canary_before:
            oc.failures.append("the canary folder outside the case changed")
    finally:
        if case.cleanup is not None:
            case.cleanup()
        oc.seconds = time.monotonic() - t0
    return oc


def _shared_checks(res: hc.Result, before: dict[str, tuple], case: hc.Case, forbidden: tuple[str, ...]) -> list[str]:
    bad: list[str] = []
    err = res.stderr
    if res.rc is None:
        bad.append(f"hang: killed after {TIMEOUT_S} s (RSS {res.maxrss_kb // 1024} MB)")
    elif res.rc not in res.step.rc:
        line = err.strip().splitlines()[-1] if err.strip() else ""
        bad.append(f"exit {res.rc}, expected {' or '.join(map(str, res.step.rc))}; stderr: {line[:400]!r}")
    if res.rc == 2:
        lines = [x for x in err.splitlines() if x.strip()]
        if len(lines) != 1 or not lines[0].startswith(ERROR_PREFIX):
            bad.append(
                f"exit 2 needs exactly one line starting {ERROR_PREFIX!r}; stderr has {len(lines)}: {err[:400]!r}"
            )
    if "Traceback" in err or "Traceback" in res.stdout:
        bad.append("a traceback: " + err[err.find("Traceback") :][:400])
    if res.maxrss_kb >= MAX_RSS_KB:
        bad.append(f"peak RSS {res.maxrss_kb // 1024} MB >= 1 GB")
    after = _snapshot(case.root, skip=case.cache_dir)
    outputs = {str(p.relative_to(case.root)) for p in res.step.outputs if p.is_relative_to(case.root)}
    changed = sorted(
        rel for rel in set(before) | set(after) if before.get(rel) != after.get(rel) and not _allowed(rel, outputs)
    )
    if changed:
        bad.append(f"wrote outside its output: {changed[:5]}")
    written = [case.root / rel for rel in after if after[rel] != before.get(rel) and after[rel][0] == "file"]
    cache = case.cache_dir or case.root.parent / "cache"
    written += [p for p in cache.rglob("*") if p.is_file()] if cache.is_dir() else []
    for text, where in [
        (res.stdout, "stdout"),
        (err, "stderr"),
        *[(t, str(p.relative_to(case.root.parent))) for p in written for t in _texts(p)],
    ]:
        for secret in forbidden:
            if secret in text:
                bad.append(f"read outside the folder: {secret[:40]!r} appears in {where}")
                break
    return bad


@pytest.fixture(scope="session")
def corpus(request, tmp_path_factory) -> dict[str, Outcome]:
    wanted = {
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_hostile_class" and hasattr(item, "callspec")
    }
    base = tmp_path_factory.mktemp("hostile")
    # heavy classes (big inputs, likely hangs) go first, so the pool is not left waiting on them at the end
    order = sorted(wanted, key=lambda n: (not _is_heavy(n), n))
    t0 = time.monotonic()
    with ForkServer() as server, ThreadPoolExecutor(max_workers=WORKERS) as pool:
        outcomes = dict(zip(order, pool.map(lambda n: _run_case(server, n, base), order), strict=True))
    wall = time.monotonic() - t0
    _summary(outcomes, wall, base)
    return outcomes


def _is_heavy(name: str) -> bool:
    return name in hc.HEAVY


def _summary(outcomes: dict[str, Outcome], wall: float, base: Path) -> None:
    lines = [f"hostile corpus: {len(outcomes)} classes in {wall:.1f} s wall ({WORKERS} workers)"]
    for name, oc in sorted(outcomes.items()):
        runs = ", ".join(f"rc={r.rc} {r.seconds:.1f}s {r.maxrss_kb // 1024}MB" for r in oc.results)
        state = "SKIP" if oc.case and oc.case.skip else "FAIL" if oc.failures else "ok"
        lines.append(f"  {state:4} {name:36} {runs}")
        lines += [f"         - {f[:300]}" for f in oc.failures]
    text = "\n".join(lines)
    (base / "summary.txt").write_text(text + "\n")
    print("\n" + text)


@pytest.mark.parametrize("name", sorted(hc.CLASSES))
def test_hostile_class(corpus, name):
    oc = corpus[name]
    if oc.case is not None and oc.case.skip:
        pytest.skip(oc.case.skip)
    assert not oc.failures, (
        f"{name} ({oc.case.builds if oc.case else '?'}; expected: "
        f"{oc.case.expect if oc.case else '?'}):\n" + "\n".join(oc.failures)
    )


def test_the_corpus_has_45_classes_or_more():
    assert len(hc.CLASSES) >= 45, sorted(hc.CLASSES)


def test_builders_stay_inside_their_folder(tmp_path):
    """Every builder runs without profan, writes only under its own parent folder (the case and its canary) and
    returns a well-formed case; the whole corpus is built here in a few seconds, minus the big inputs."""
    light = [n for n in sorted(hc.CLASSES) if not _is_heavy(n)]
    for name in light:
        parent = tmp_path / name
        parent.mkdir()
        case = hc.CLASSES[name](parent / "case")
        assert case.root == parent / "case" and case.canary.parent == parent, name
        assert case.steps and case.secret in (case.canary / "secret.txt").read_text(), name
        assert sorted(p.name for p in parent.iterdir()) == ["case", "case.canary"], name
        if case.cleanup:
            case.cleanup()
    assert sorted(p.name for p in tmp_path.iterdir()) == light
    shutil.rmtree(tmp_path, ignore_errors=True)
