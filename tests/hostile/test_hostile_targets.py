"""Hostile output targets: `-o` (and ``--tables``) naming something that is not a regular file — a device node, a
FIFO, a terminal, a link to stdout, a socket, a link to a file — and a link planted where the temporary file
used to be made. Each is written into as a stream (the node still what it was, the reader receiving the very
report a file would hold) or refused in one line; never replaced by a regular file, and nothing outside the
named output is touched."""

from __future__ import annotations

import io
import json
import os
import pty
import socket
import stat
import threading
import zipfile

import openpyxl
import polars as pl
import pytest
from conftest import assert_one_line_error, one_rank, run_cli, run_process

from profan.app import output

READ_TIMEOUT_S = 60


def _data(tmp_path):
    data = tmp_path / "data"
    one_rank(data)
    return data


def _file_report(tmp_path, data, fmt: str = "md") -> bytes:
    """The report a regular file receives: what every stream must receive too."""
    ref = tmp_path / f"reference.{fmt}"
    res = run_cli("analyze", str(data), "-q", "-o", str(ref))
    assert res.returncode == 0, res.stderr
    return ref.read_bytes()


class Reader(threading.Thread):
    """Reads a FIFO (or a terminal's master side) to its end, as the process at the other end of `-o` would."""

    def __init__(self, opener):
        super().__init__(daemon=True)
        self.opener, self.data, self.error = opener, b"", None

    def run(self):
        try:
            with self.opener() as fh:
                while chunk := fh.read(1 << 16):
                    self.data += chunk
        except OSError as exc:  # a terminal's master reads EIO once the slave side is closed
            self.error = exc

    def received(self) -> bytes:
        self.join(READ_TIMEOUT_S)
        assert not self.is_alive(), "the reader never saw the end of the report"
        return self.data


def _node(path) -> tuple[int, int]:
    st = os.lstat(path)
    return stat.S_IFMT(st.st_mode), st.st_rdev


# ------------------------------------------------------------------------------------------ character devices


def test_dev_null_stays_a_device_after_a_report_is_written_to_it(tmp_path):
    data = _data(tmp_path)
    before = _node("/dev/null")
    assert stat.S_ISCHR(before[0])
    for args in (["analyze", str(data), "-f", "md"], ["compare", str(data), str(data), "-f", "json"]):
        res = run_cli(*args, "-q", "-o", "/dev/null")
        assert res.returncode == 0, res.stderr
        assert _node("/dev/null") == before
    assert not list(tmp_path.glob("**/.profan-*"))


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root (the FIFO tests cover streams)")
def test_own_device_nodes_are_written_into_never_replaced(tmp_path):
    """A copy of /dev/null (1, 3) takes the report; a copy of /dev/full (1, 7) answers ENOSPC: one line. Each
    node is still the same character device afterwards."""
    data = _data(tmp_path)
    null, full = tmp_path / "null", tmp_path / "full"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    nodes = {p: _node(p) for p in (null, full)}
    assert run_cli("analyze", str(data), "-q", "-f", "md", "-o", str(null)).returncode == 0
    res = run_cli("analyze", str(data), "-q", "-f", "xlsx", "-o", str(full))
    assert_one_line_error(res, str(full), "cannot write: No space left on device")
    assert {p: _node(p) for p in nodes} == nodes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "full", "null"]


# ------------------------------------------------------------------------------------------ FIFOs and terminals


@pytest.mark.parametrize("fmt", ["md", "json", "html", "xlsx"])
def test_a_fifo_reader_receives_the_report_in_every_format(tmp_path, fmt):
    data = _data(tmp_path)
    fifo = tmp_path / f"pipe.{fmt}"
    os.mkfifo(fifo)
    reader = Reader(lambda: open(fifo, "rb"))  # noqa: SIM115 - closed by the reader's with
    reader.start()
    res = run_cli("analyze", str(data), "-q", "-o", str(fifo))
    assert res.returncode == 0, res.stderr
    got = reader.received()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if fmt == "md":
        assert got == _file_report(tmp_path, data, "md")
    elif fmt == "json":
        assert json.loads(got)["source"]["ranks"][0]["rows_read"]["kernel_details"] == 2463
    elif fmt == "html":
        assert got.startswith(b"<!DOCTYPE html>") and got.rstrip().endswith(b"</html>")
    else:
        assert openpyxl.load_workbook(io.BytesIO(got)).sheetnames[:2] == ["Summary", "Causes"]


def test_a_fifo_in_the_tables_folder_receives_its_table(tmp_path):
    data = _data(tmp_path)
    tables = tmp_path / "tables"
    tables.mkdir()
    fifo = tables / "steps.parquet"
    os.mkfifo(fifo)
    reader = Reader(lambda: open(fifo, "rb"))  # noqa: SIM115
    reader.start()
    res = run_cli("analyze", str(data), "-q", "--tables", str(tables), "-f", "json")
    assert res.returncode == 0, res.stderr
    steps = pl.read_parquet(io.BytesIO(reader.received()))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert steps.equals(pl.read_parquet(_table(tmp_path, data, "steps")))


def _table(tmp_path, data, name: str):
    folder = tmp_path / "reference_tables"
    assert run_cli("analyze", str(data), "-q", "--tables", str(folder), "-f", "json").returncode == 0
    return folder / f"{name}.parquet"


def test_a_fifo_nobody_reads_is_one_line_at_once_and_stays_a_fifo(tmp_path):
    data = _data(tmp_path)
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    res = run_process("analyze", str(data), "-q", "-o", str(fifo))
    assert_one_line_error(res, str(fifo), "is a FIFO that no process is reading")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_terminal_receives_the_report(tmp_path):
    data = _data(tmp_path)
    master, slave = pty.openpty()
    name = os.ttyname(slave)
    reader = Reader(lambda: os.fdopen(master, "rb", buffering=0))
    reader.start()
    try:
        res = run_cli("analyze", str(data), "-q", "-f", "md", "-o", name)
        node, device = _node(name), os.fstat(slave).st_rdev  # a pty's node goes with its last side: seen before
    finally:
        os.close(slave)
    assert res.returncode == 0, res.stderr
    got = reader.received().replace(b"\r\n", b"\n")  # the terminal's line discipline adds a CR to each LF
    assert got == _file_report(tmp_path, data, "md")
    assert node == (stat.S_IFCHR, device)


@pytest.mark.parametrize("to", ["/proc/self/fd/1", "/dev/stdout"])
def test_a_link_to_stdout_writes_the_report_on_stdout(tmp_path, to):
    data = _data(tmp_path)
    link = tmp_path / "out.md"
    link.symlink_to(to)
    res = run_process("analyze", str(data), "-q", "-o", str(link))
    assert res.returncode == 0, res.stderr
    assert res.stdout.encode() == _file_report(tmp_path, data, "md")
    assert link.is_symlink() and os.readlink(link) == to


# ------------------------------------------------------------------------------------------ refused targets


def test_a_socket_and_a_block_device_are_refused_before_any_work(tmp_path):
    data = _data(tmp_path)
    sock_path = tmp_path / "r.md"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    try:
        res = run_cli("analyze", str(data), "-q", "-o", str(sock_path))
        assert_one_line_error(res, str(sock_path), "is a socket; a report is written only to a regular file")
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    finally:
        server.close()
    if os.geteuid() == 0:
        block = tmp_path / "disk.md"
        os.mknod(block, stat.S_IFBLK | 0o600, os.makedev(7, 0))
        assert_one_line_error(run_cli("analyze", str(data), "-q", "-o", str(block)), "is a block device")
        assert _node(block) == (stat.S_IFBLK, os.makedev(7, 0))


def test_a_link_to_a_file_or_to_nothing_is_refused_and_left_as_it_was(tmp_path):
    """Neither followed (it would write wherever a planted link points) nor replaced (``/dev/stdout`` would become
    a regular file when stdout is one)."""
    data = _data(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "notes.md"
    victim.write_text("my notes\n")
    link, dangling = tmp_path / "r.md", tmp_path / "d.md"
    link.symlink_to(victim)
    dangling.symlink_to(outside / "new.md")
    res = run_cli("analyze", str(data), "-q", "-o", str(link))
    assert_one_line_error(res, str(link), f"is a symbolic link to the file {victim}", "remove the link")
    res = run_cli("analyze", str(data), "-q", "-o", str(dangling))
    assert_one_line_error(res, str(dangling), "is a symbolic link to nothing")
    assert victim.read_text() == "my notes\n" and sorted(os.listdir(outside)) == ["notes.md"]
    assert os.readlink(link) == str(victim) and os.readlink(dangling) == str(outside / "new.md")


# ------------------------------------------------------------------------------------------ the temporary file


def test_a_link_planted_at_the_old_temporary_name_is_never_followed(tmp_path):
    """``.NAME.PID.tmp`` was predictable: a link planted there made the write land outside. The temporary file
    is now made with O_CREAT|O_EXCL under a random name; the planted link and its target stay as they were."""
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "r.md"
    planted = out_dir / f".{out.name}.{os.getpid()}.tmp"
    planted.symlink_to(outside)
    seen = []

    def render(tmp):
        st = os.lstat(tmp)
        seen.append((tmp, stat.S_ISREG(st.st_mode), stat.S_IMODE(st.st_mode)))
        tmp.write_text("# profan report\n")

    output.write(out, output.Inputs([]), render)
    ((tmp, regular, mode),) = seen
    assert tmp.parent == out_dir and tmp != planted and tmp.name.startswith(output.TEMP_PREFIX)
    assert regular and mode == 0o600  # made fresh by mkstemp, readable by its owner only while rendered
    assert outside.read_text() == "keep me\n" and os.readlink(planted) == str(outside)
    assert out.read_text() == "# profan report\n" and not os.path.lexists(tmp)
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~mask
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([planted.name, "r.md"])


def test_a_failed_render_leaves_the_old_report_and_no_temporary_file(tmp_path):
    out = tmp_path / "r.md"
    out.write_text("# profan report, the old one\n")

    def render(tmp):
        tmp.write_text("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(output.ProfanInputError, match="No space left on device"):
        output.write(out, output.Inputs([]), render)
    assert out.read_text() == "# profan report, the old one\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]


def test_every_renderer_writes_through_the_one_write_path(tmp_path, monkeypatch):
    """Each format and the tables reach their file only through `output.write` (counted here), so every guard
    above holds for all of them."""
    data = _data(tmp_path)
    calls = []
    real = output.write
    monkeypatch.setattr(output, "write", lambda out, *a, **k: (calls.append(out.name), real(out, *a, **k)))
    for fmt in ("md", "json", "html", "xlsx"):
        assert run_cli("analyze", str(data), "-q", "-o", str(tmp_path / f"r.{fmt}")).returncode == 0
    res = run_cli("analyze", str(data), "-q", "--tables", str(tmp_path / "t"), "-f", "json")
    assert res.returncode == 0, res.stderr
    assert run_cli("compare", str(data), str(data), "-q", "-o", str(tmp_path / "c.md")).returncode == 0
    tables = {p.name for p in (tmp_path / "t").iterdir()}
    assert len(tables) >= 5 and set(calls[4:-1]) == tables and len(calls) == len(tables) + 5
    assert calls[:4] == ["r.md", "r.json", "r.html", "r.xlsx"] and calls[-1] == "c.md"
    assert zipfile.is_zipfile(tmp_path / "r.xlsx")


@pytest.mark.parametrize("force", [False, True])
def test_skill_install_onto_a_link_is_one_line_and_leaves_its_target(tmp_path, force):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep\n")
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "profan").symlink_to(outside)
    res = run_cli("skill", "install", str(skills), *(["--force"] if force else []))
    assert_one_line_error(res, str(skills / "profan"), "is a symbolic link")
    assert sorted(os.listdir(outside)) == ["keep.txt"] and (skills / "profan").is_symlink()


def test_a_stream_without_an_extension_takes_the_default_format(tmp_path):
    """``-o /dev/stdout`` or a FIFO named ``pipe`` says no format: like stdout it gets Markdown (a regular file
    without an extension is still refused: a report.xlsx holding Markdown is worse than an error)."""
    data = _data(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = Reader(lambda: open(fifo, "rb"))  # noqa: SIM115
    reader.start()
    res = run_cli("analyze", str(data), "-q", "-o", str(fifo))
    assert res.returncode == 0, res.stderr
    assert reader.received() == _file_report(tmp_path, data, "md")
    assert run_cli("analyze", str(data), "-q", "-o", "/dev/null").returncode == 0
    res = run_cli("analyze", str(data), "-q", "-o", str(tmp_path / "noext"))
    assert_one_line_error(res, "cannot tell the format from a name without an extension")
