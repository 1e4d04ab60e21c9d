"""The MCP server's stdio: the SDK's transport (`mcp.server.stdio.stdio_server`), fed by a reader and a writer of
profan's own.

Why not the SDK's own streams:

* **Pipelined requests, then end of input.** A client may write all its requests and close stdin (``< requests``,
  or a pipe closed after the last write). The SDK ends the session at end of input and drops what is still in
  flight: of 500 pipelined ``tools/list`` with stdin closed after them, about 250 were answered (fewer on a busy
  machine), none of the rest ever. Here the end of input is passed on only once every request read has been
  answered (or `DRAIN_S` has passed).
* **A line of tens of MB.** The SDK reads a line whole, however long, and validates it. Here a request line longer
  than `MAX_REQUEST_BYTES` is answered with one JSON-RPC error naming the bound, and only its first bytes are
  held (to find its id).
* **Threads.** The SDK reads stdin through anyio's default thread pool, which the tool calls share (they run in
  threads): forty slow calls would stop it reading. Reading and writing here each have a thread of their own.

As the SDK does, file descriptors 0 and 1 are pointed at ``/dev/null`` and stderr while serving, so nothing a tool
prints can corrupt the wire.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.to_thread

MAX_REQUEST_BYTES = 4 << 20  # a request is a tool name and a few paths; 4 MiB is thousands of times that
DRAIN_S = 600.0  # after end of input, how long requests still in flight may take to be answered
READ_BYTES = 1 << 16
ID_AT_HEAD = re.compile(rb'^\s*\{\s*(?:"jsonrpc"\s*:\s*"2\.0"\s*,\s*)?"id"\s*:\s*(-?\d{1,19}|"[^"\\]{0,200}")')
TOO_LONG_CODE = -32600  # JSON-RPC "Invalid Request"


class Writer:
    """stdout as the SDK's transport writes it (``await write(text)``, ``await flush()``), one thread of its own;
    counts the responses written, so the reader knows when every request read has been answered."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.limiter = anyio.CapacityLimiter(1)
        self.requests = self.answered = 0

    async def write(self, text: str) -> None:
        await anyio.to_thread.run_sync(self.send, text.encode("utf-8"), limiter=self.limiter)

    async def flush(self) -> None:
        """Every `send` writes through to the descriptor: nothing is buffered."""

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        with self.lock:
            while view:
                view = view[os.write(self.fd, view) :]
            if _is_response(data):
                self.answered += 1

    def expect(self, line: bytes) -> None:
        """Count a request line read (one that carries an id and a method: it will be answered); a cancellation
        takes one back (a cancelled request may go unanswered)."""
        kind = _request_kind(line)
        if kind:
            with self.lock:
                self.requests += 1 if kind == "request" else -1

    async def drained(self, within_s: float) -> None:
        """Return once every request counted has been answered, or after ``within_s``."""
        end = time.monotonic() + within_s
        while time.monotonic() < end:
            with self.lock:
                if self.answered >= self.requests:
                    return
            await anyio.sleep(0.01)


def _request_kind(line: bytes) -> str:
    """ "request" for a request (it has an id and a method), "cancel" for a cancellation, else ""."""
    try:
        msg = json.loads(line)
    except ValueError:
        return ""
    if not isinstance(msg, dict) or not isinstance(msg.get("method"), str):
        return ""
    if "id" in msg:
        return "request"
    return "cancel" if msg["method"] == "notifications/cancelled" else ""


def _is_response(data: bytes) -> bool:
    try:
        msg = json.loads(data)
    except ValueError:
        return False
    return isinstance(msg, dict) and "id" in msg and ("result" in msg or "error" in msg) and "method" not in msg


class Lines:
    """stdin as the request lines the SDK's transport iterates over (``async for line in stdin``), read in a
    thread of its own, each at most `MAX_REQUEST_BYTES`; a longer one is answered with an error and skipped."""

    def __init__(self, fd: int, out: Writer, most: int = MAX_REQUEST_BYTES) -> None:
        self.fd, self.out, self.most = fd, out, most
        self.buf = bytearray()
        self.eof = False
        self.limiter = anyio.CapacityLimiter(1)

    def __aiter__(self) -> Lines:
        return self

    async def __anext__(self) -> str:
        line = await anyio.to_thread.run_sync(self.next_line, limiter=self.limiter)
        if line is None:
            await self.out.drained(DRAIN_S)
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")

    def next_line(self) -> bytes | None:
        """The next request line within the bound (None at the end of input)."""
        while True:
            cut = self.buf.find(b"\n")
            if cut >= 0 or (self.eof and self.buf):
                end = cut if cut >= 0 else len(self.buf)
                line = bytes(self.buf[: end + 1])
                del self.buf[: end + 1]
                if line.strip():
                    self.out.expect(line)
                    return line
                continue
            if self.eof:
                return None
            if len(self.buf) > self.most:
                self._refuse_long_line()
                continue
            chunk = os.read(self.fd, READ_BYTES)
            self.eof = not chunk
            self.buf += chunk

    def _refuse_long_line(self) -> None:
        """Answer a request line past the bound with one error (its id, when it leads the line), and drop the
        rest of the line as it arrives: it is never held whole."""
        head = bytes(self.buf[:512])
        self.buf.clear()
        while not self.eof:
            chunk = os.read(self.fd, READ_BYTES)
            self.eof = not chunk
            cut = chunk.find(b"\n")
            if cut >= 0:
                self.buf += chunk[cut + 1 :]
                break
        found = ID_AT_HEAD.match(head)
        error = {
            "jsonrpc": "2.0",
            "id": json.loads(found.group(1)) if found else None,
            "error": {
                "code": TOO_LONG_CODE,
                "message": f"profan: error: request refused: longer than {self.most:,} bytes (the MCP server's "
                "bound on one request; pass paths, not file contents)",
            },
        }
        self.out.send(json.dumps(error).encode() + b"\n")


def serve_stdio(run: Callable[[object, object], Awaitable[None]]) -> None:
    """Run ``run(stdin_lines, stdout_writer)`` (which enters the SDK's `stdio_server` with them) on fds 0 and 1,
    those two pointed at ``/dev/null`` and stderr meanwhile."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    try:
        writer = Writer(wire_out)
        anyio.run(run, Lines(wire_in, writer), writer)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)
