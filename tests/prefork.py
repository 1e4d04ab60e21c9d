"""A fork server for tests that must run ``profan`` as a process of its own: one interpreter imports profan (its
CLI, pipeline, renderers, polars, pyarrow, plotly, …) once, then forks a fresh process per command.

Why: the hostile corpus (``tests/hostile/test_hostile_corpus.py``) runs ~110 commands, and a fresh ``python -m profan``
spends ~0.7 s of CPU on interpreter start and imports before it reads a byte — more than most of its commands
then spend on their input. A forked command is still a process of its own: its own exit code, its own stdout and
stderr (files), its own session (a timeout kills it and its workers with ``killpg``), stdin on /dev/null, the
environment and working folder of the request, and its peak RSS taken by ``os.wait4`` from its parent. What it
skips is only the work every fresh command repeats identically.

Fork safety: importing polars and pyarrow starts allocator and clean-up threads, but no polars thread pool (that
starts on first use, which the server never makes); a forked child holds only the forking thread, and each
command starts its pool afresh. The server itself never analyses anything. Peak RSS: a forked child begins with
the server's pages (~150 MB of imports), which a fresh ``python -m profan`` also holds once it has imported them.

Protocol (a Unix socket; one connection per command): the client sends one JSON line ``{"args", "cwd", "env",
"stdout", "stderr", "exec"}``; the server forks a *launcher* for it and goes back to ``accept``. The launcher forks
the command, sends ``<pid>\\n``, reaps it with ``os.wait4`` and sends ``<exit code> <ru_maxrss kB>\\n``. With
``exec`` the command is ``exec``-ed (a wrapper such as ``setpriv`` must start the interpreter itself); otherwise
it runs ``profan.app.cli.main(args)`` with ``sys.exit`` semantics as in ``python -m profan``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# what profan's commands import on first use; a name missing here (renamed) only costs its import in each command
PRELOAD = (
    "profan.app.cli",
    "profan.app.output",
    "profan.render.brief",
    "profan.render.evidence_doc",
    "profan.render.rules_index",
    "profan.app.drill",
    "profan.pipeline",
    "profan.comparison",
    "profan.figures",
    "profan.figures.charts",
    "profan.figures.memory",
    "profan.figures.step_timeline",
    "profan.render",
    "profan.render.html",
    "profan.render.xlsx",
    "profan.render.markdown",
    "profan.render.json_report",
    "profan.render.compare_markdown",
    "profan.sources.common.cache",
    "profan.sources.ascend_db.reader",
    "profan.rulepack.pack",
    "plotly.graph_objects",
    "openpyxl",
    "jinja2",
    "sqlite3",
)


# ------------------------------------------------------------------------------------------------ the server


def serve(sock_path: str) -> None:
    """Import, listen, say ``ready`` on stdout, then fork a launcher per connection until killed."""
    for name in PRELOAD:
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(16)
    listener.settimeout(2.0)
    parent = os.getppid()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while os.getppid() == parent:  # the test process gone (killed, not closed): go too
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        request = json.loads(conn.makefile("rb").readline())
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            _launch(conn, request)  # never returns
        conn.close()
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass  # reap launchers that are done


def _launch(conn: socket.socket, request: dict) -> None:
    """The launcher: fork the command, tell its pid, reap it and tell its exit code and peak RSS."""
    pid = os.fork()
    if pid == 0:
        conn.close()
        _command(request)  # never returns
    conn.sendall(f"{pid}\n".encode())
    _, status, usage = os.wait4(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    with contextlib.suppress(OSError):
        conn.sendall(f"{code if code >= 0 else 128 - code} {usage.ru_maxrss}\n".encode())
    os._exit(0)


def _command(request: dict) -> None:
    """The command's process: a session of its own, the request's folder, environment and files, then profan."""
    try:
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path in ((0, os.devnull), (1, request["stdout"]), (2, request["stderr"])):
            new = os.open(path, os.O_RDONLY) if fd == 0 else os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(new, fd)
            os.close(new)
        if request.get("exec"):
            os.execvpe(request["args"][0], request["args"], os.environ)
    except BaseException:
        traceback.print_exc()
        os._exit(127)
    os._exit(_run_main(request["args"]))


def _run_main(args: list[str]) -> int:
    """``python -m profan ARGS`` after start-up: the exit code as the interpreter would give it (``SystemExit``'s
    code, 1 and a traceback for an uncaught exception), after the ``atexit`` work and flushed output."""
    from profan.app.cli import main

    sys.argv = [str(Path(importlib.import_module("profan").__file__).parent / "__main__.py"), *args]
    code = 0
    try:
        main(list(args))
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


# ------------------------------------------------------------------------------------------------ the client


class ForkServer:
    """The test side: start the server (``with ForkServer() as fs``), then ``fs.run(...)`` from any thread."""

    def __init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="prefork")  # short: a Unix socket path has ~100 bytes
        self.path = os.path.join(self._dir, "sock")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        ready = self.proc.stdout.readline()
        if ready != b"ready\n":
            self.close()
            raise RuntimeError(f"the fork server did not start: {ready!r}")

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def run(self, request: dict, timeout: float) -> tuple[int | None, float, int]:
        """(exit code or None when killed at ``timeout``, seconds, peak RSS in kB) of one command. ``request``:
        args, cwd, env, stdout, stderr (file paths) and exec (run ``args`` as a program, not as profan's)."""
        t0 = time.monotonic()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = conn.makefile("rb")
            pid = int(reply.readline())
            conn.settimeout(max(0.0, timeout - (time.monotonic() - t0)))
            timed_out, hwm = False, 0
            try:
                line = reply.readline()
            except TimeoutError:
                timed_out, hwm = True, _vm_hwm(pid)
                with contextlib.suppress(ProcessLookupError):  # its own session: the command and its workers
                    os.killpg(pid, signal.SIGKILL)
                conn.settimeout(None)
                reply = conn.makefile("rb")  # a timed-out makefile refuses further reads
                line = reply.readline()
        seconds = time.monotonic() - t0
        code, rss = (int(x) for x in line.split())
        return (None if timed_out else code), seconds, max(rss, hwm)


def _vm_hwm(pid: int) -> int:
    """VmHWM (kB) of a running process, read from /proc just before it is killed."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        return next((int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM:")), 0)
    except (OSError, ValueError, IndexError):
        return 0


if __name__ == "__main__":
    serve(sys.argv[1])
