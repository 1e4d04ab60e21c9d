"""`profan mcp`: the same answers as the CLI, as MCP tools on stdio, for agents that speak MCP.

Built on the official ``mcp`` SDK (2.x, ``mcp.server.mcpserver``), an optional dependency
(``pip install 'profan[mcp]'``) because it brings an HTTP stack the CLI does not need. The tools return the very
documents the CLI prints (``profan.brief``, ``profan.evidence``, ``profan.rules`` — built by ``profan.render.brief``,
``profan.render.evidence_doc`` and ``profan.render.rules_index``) as structured content, once, beside a one-line
text summary: an agent's context pays for every byte, so a result is never sent twice. A bad input comes back as a
tool error whose text is the CLI's one-line message (``profan: error: PATH: problem``), so an agent reads the same
words whichever door it used.

Every result is held to its ``max_bytes`` as it goes over the wire — the whole JSON-RPC response line, serialised
the way the SDK serialises it — by the same ladders of smaller forms the CLI's brief uses: a smaller cap drops the
least important findings, rows, locators and the later causes' detail step by step, never the first cause. The
advertised schemas are kept small for the same reason (the tool list is read at the start of every session): the
inputs are described in a few words each, and each output schema only names the document, whose full JSON Schema
``profan schema brief|evidence`` prints.

Reports are kept in memory per (path, rule files, hardware file) and per compared pair: ``evidence`` on what was just
analysed or compared answers from the same report, so its finding ids are the ones the agent saw.

An agent can be steered by what it reads (a trace, a report, a web page) into asking for any path, so the server
reads only inside the folders it was started with (``profan mcp --root DIR …``; default: the folder it was
started in): every path a tool is given — data, report, rule and hardware files, ``root`` — is resolved (symlinks
too) and refused unless it lies inside one of them.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from profan.model.errors import ProfanError, ProfanInputError
from profan.model.report import Report
from profan.trust import inside, report_root

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.tools import Tool
    from mcp.types import CallToolResult, Implementation, TextContent, ToolAnnotations
    from pydantic_core import to_json
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ProfanInputError(
        None, f"'profan mcp' needs the MCP SDK ({exc.name} is missing): pip install 'profan[mcp]'"
    ) from None

INSTRUCTIONS = """profan analyses profiler output (Ascend PyTorch profiler / msprof folders, PyTorch chrome traces) into
causes and the findings they explain, each backed by the exact source rows. Call `analyze` on the profiler folder and
read `causes` first: the estimated gain per step, the action (it names the kernels and shapes), how to verify it, the
competing explanations and the findings each explains. Then `evidence` with the same source and a cause (C1), finding
(F3) or member (F3.2) id: `limit=0` gives its message and metrics only, `limit=1` one raw source row per item. Every
result is capped by `max_bytes` as sent; what is left out is named. `compare` diffs two runs or two ranks; `rules`
explains a check."""

# Defaults sized for an agent's first look: the brief's causes and headline findings, then one claim's message and
# metrics, fit together in well under 8 KB; a caller that wants more asks for it.
BRIEF_BYTES = 4000
EVIDENCE_BYTES = 3000
RULES_BYTES = 13000  # the index of every check and bucket rule fits, with the JSON-RPC envelope

PARAMS = {
    "path": "profiler output: job, rank or PROF_* folder, ASCEND_PROFILER_OUTPUT, or a file",
    "max_bytes": "cap on the result as sent",
    "rules": "extra rule TOML files",
    "hardware": "hardware TOML (link priors, device)",
    "source": "analyze's path (same rules/hardware), compare's a, or a report.json",
    "finding_id": "cause C1, finding F3 or member F3.2",
    "limit": "rows per item (default all); 0: message, metrics, locators only",
    "root": "data folder, if a report.json's data moved",
    "a": "run A: job, rank folder or file",
    "b": "run B (evidence: compare's b)",
    "ranks": "two ranks of job a, e.g. [0, 2]",
    "id": "check or rule id; omit to list all",
}
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
ID_RESERVE = 10**19  # a 20-digit request id, when the tool is called outside a request


def _summary(doc: dict[str, Any]) -> str:
    """One line for clients that show only text: what the structured result is and what it leads with."""
    schema = doc.get("schema", "")
    if schema.startswith("profan.brief"):
        s = doc["summary"]
        lead = doc["causes"][0] if doc["causes"] else (doc["findings"] or [{}])[0]
        head = f"; {lead['id']}: {_short(lead['title'])}" if lead else ""
        return f"{schema} in structuredContent: {s['causes']} causes, {s['findings']} findings{head}"
    if schema.startswith("profan.evidence"):
        rows = sum(len(i["rows"]) for i in doc["evidence"])
        return f"{schema} in structuredContent: {doc['id']} ({doc['check']}), {rows} rows; {_short(doc['title'])}"
    checks = doc.get("checks_total", len(doc.get("checks", [])))
    listed = f"{checks} checks, {doc.get('rules_total', len(doc.get('rules', [])))} bucket rules"
    return f"{schema} in structuredContent: {doc['item']['id'] if 'item' in doc else listed}"


def _short(text: str) -> str:
    """A title for the summary line, clipped and quoted as a JSON string: it may carry kernel names from the trace,
    which stay escaped in the text an agent reads as they are in the structured content."""
    return json.dumps(text if len(text) <= 100 else text[:99] + "…", ensure_ascii=False)


def _result(doc: dict[str, Any]) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=_summary(doc))], structured_content=doc)


def wire_bytes(result: CallToolResult, request_id: int | str, stamp: dict[str, Any]) -> int:
    """Bytes of the JSON-RPC response line that carries ``result`` over stdio: the result dumped as the SDK dumps
    it (by alias, without None fields), in the 2026-era envelope (``resultType`` and the server-info stamp; an
    older protocol's response is smaller), compact JSON plus the newline."""
    body = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    body.setdefault("resultType", "complete")
    body["_meta"] = {**body.get("_meta", {}), SERVER_INFO: stamp}
    return len(to_json({"jsonrpc": "2.0", "id": request_id, "result": body})) + 1


def _error(exc: Exception) -> CallToolResult:
    """The CLI's one-line message, as a tool error the model can read and act on."""
    if isinstance(exc, ProfanError):
        text = f"profan: error: {exc}"
    else:
        text = f"profan: error: internal error: {type(exc).__name__}: {exc} (please report with the call you made)"
    return CallToolResult(content=[TextContent(type="text", text=text.splitlines()[0])], is_error=True)


class Roots:
    """The folders the server may read (resolved once, at start)."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [root.expanduser().resolve() for root in roots]

    def check(self, path: str | Path, what: str = "path") -> Path:
        p = Path(path).expanduser()
        if not any(inside(p, root) for root in self.roots):
            raise ProfanInputError(
                p,
                f"{what} lies outside the folders this server may read "
                f"({', '.join(map(str, self.roots))}); start it with 'profan mcp --root DIR'",
            )
        return p

    def all(self, paths: list[str] | None, what: str) -> list[str]:
        return [str(self.check(p, what)) for p in paths or []]


class Reports:
    """Reports analysed or compared in this session, keyed by what determines their finding ids."""

    KEEP = 8  # reports are small (tables, not rows), but a long session should not grow without bound

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple, Report] = OrderedDict()

    def _remember(self, key: tuple, make) -> Report:
        if key in self._cache:
            self._cache.move_to_end(key)
        else:
            self._cache[key] = make()
            while len(self._cache) > self.KEEP:
                self._cache.popitem(last=False)
        return self._cache[key]

    @staticmethod
    def _key(path: str) -> str:
        return str(Path(path).expanduser().resolve())

    def get(self, path: str, rules: list[str] | None, hardware: str | None) -> Report:
        from profan.pipeline import analyze

        key = ("analyze", self._key(path), tuple(rules or ()), hardware)
        return self._remember(
            key, lambda: analyze(Path(path).expanduser(), rules=[Path(r) for r in rules or []], hardware=hardware)
        )

    def compared(self, a: str, b: str | None, ranks: list[int] | None, rules: list[str] | None) -> Report:
        from profan.comparison.compare import compare

        if ranks is not None and len(ranks) != 2:
            raise ProfanInputError(None, f"ranks takes two rank numbers, e.g. [0, 1] (got {ranks})")
        pair = tuple(ranks) if ranks is not None else None
        key = ("compare", self._key(a), self._key(b) if b else None, pair, tuple(rules or ()))
        return self._remember(
            key,
            lambda: compare(
                Path(a).expanduser(),
                Path(b).expanduser() if b else None,
                ranks=pair,
                rules=[Path(r) for r in rules or []],
            ),
        )


class Tools:
    """profan's tools as one server serves them: every path is checked against the server's folders, the reports
    of the session are kept (so `evidence` answers with the ids `analyze` showed), and every result is measured
    as the response that carries it."""

    def __init__(self, roots: list[Path], stamp: dict[str, Any]) -> None:
        self.allowed = Roots(roots)
        self.reports = Reports()
        self.stamp = stamp

    def analyze(
        self,
        path: str,
        max_bytes: int = BRIEF_BYTES,
        rules: list[str] | None = None,
        hardware: str | None = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Analyse profiler output. Returns profan.brief/2: causes first (gain per step, action, verify,
        alternatives, findings explained), then findings no cause explains."""
        from profan.render.brief import brief

        def make(size: Callable[[dict[str, Any]], int]) -> dict[str, Any]:
            self.allowed.check(path)
            extra = self.allowed.all(rules, "rules file")
            report = self.reports.get(path, extra, self._one(hardware, "hardware file"))
            return brief(report, max_bytes=max_bytes, drill=_hint("the same source"), size=size)

        return self._answer(make, ctx)

    def evidence(
        self,
        source: str,
        finding_id: str,
        limit: int | None = None,
        max_bytes: int = EVIDENCE_BYTES,
        rules: list[str] | None = None,
        hardware: str | None = None,
        root: str | None = None,
        b: str | None = None,
        ranks: list[int] | None = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """A cause's, finding's or member's message, metrics and the source rows behind it, verbatim (CSV lines
        with header, trace events, JSON values). Returns profan.evidence/1."""
        from profan.render.byte_cap import ByteCap
        from profan.render.evidence_doc import evidence_doc

        def make(size: Callable[[dict[str, Any]], int]) -> dict[str, Any]:
            if limit is not None and limit < 0:
                raise ProfanInputError(None, f"limit must be 0 or more (got {limit})")
            report, data_root = self._source(source, rules, hardware, root, b, ranks)
            cap = ByteCap(max_bytes, size)
            return evidence_doc(report, data_root, finding_id, where=source, limit=limit, cap=cap)

        return self._answer(make, ctx)

    def compare(
        self,
        a: str,
        b: str | None = None,
        ranks: list[int] | None = None,
        rules: list[str] | None = None,
        max_bytes: int = BRIEF_BYTES,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """What grew from A to B (per step and rank): two runs, rank folders or files, or ranks [x, y] of job a.
        Returns profan.brief/2, citing rows on both sides."""
        from profan.render.brief import brief

        def make(size: Callable[[dict[str, Any]], int]) -> dict[str, Any]:
            report = self.reports.compared(
                str(self.allowed.check(a, "a")), self._one(b, "b"), ranks, self.allowed.all(rules, "rules file")
            )
            other = "b" if b is not None else "ranks"
            return brief(report, max_bytes=max_bytes, drill=_hint(f"source=a and the same {other}"), size=size)

        return self._answer(make, ctx)

    def rules(
        self,
        id: str | None = None,
        rules: list[str] | None = None,
        max_bytes: int = RULES_BYTES,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Explain a check or bucket rule (thresholds; a cause's action, verify, alternatives), or list them.
        Returns profan.rules/1."""
        from profan.render.rules_index import rules_doc

        def make(size: Callable[[dict[str, Any]], int]) -> dict[str, Any]:
            extra = [Path(r) for r in self.allowed.all(rules, "rules file")]
            return rules_doc(extra, id, max_bytes=max_bytes, size=size)

        return self._answer(make, ctx)

    def _answer(self, make: Callable[[Callable[[dict[str, Any]], int]], dict[str, Any]], ctx: Any) -> CallToolResult:
        """``make(size)`` builds the document within its cap, ``size`` measuring the response that would carry
        it; any error becomes the CLI's one line."""
        try:
            request_id = ctx.request_context.request_id if ctx is not None else ID_RESERVE
        except ValueError:  # outside a request
            request_id = ID_RESERVE
        try:
            return _result(make(lambda doc: wire_bytes(_result(doc), request_id, self.stamp)))
        except Exception as exc:
            return _error(exc)

    def _source(
        self,
        source: str,
        rules: list[str] | None,
        hardware: str | None,
        root: str | None,
        b: str | None,
        ranks: list[int] | None,
    ) -> tuple[Report, Path]:
        """The report `evidence` reads ids from, and the folder its rows are read from (both inside the roots)."""
        from profan.app.drill import load_report_or_analyze

        src = self.allowed.check(source, "source")
        given = self.allowed.check(root, "root") if root else None
        rules = self.allowed.all(rules, "rules file")
        if src.is_file() and src.suffix == ".json":
            report, data_root = load_report_or_analyze(src, given)
        else:
            report = (
                self.reports.compared(source, self._one(b, "b"), ranks, rules)
                if b is not None or ranks is not None
                else self.reports.get(source, rules, self._one(hardware, "hardware file"))
            )
            data_root = report_root(report, None, given)
        self.allowed.check(data_root, "the report's data")
        return report, data_root

    def _one(self, path: str | None, what: str) -> str | None:
        return None if path is None else str(self.allowed.check(path, what))


def _hint(where: str) -> str:
    """How to drill into an id, without repeating the path the agent just gave (the smallest brief pays for it)."""
    return f"call evidence with {where} and a finding_id (C1, F3 or F3.2); limit=0: message and metrics only"


def _tool(fn: Callable[..., CallToolResult], document: str) -> Tool:
    """A tool as advertised in the tool list, which every session reads first: the description in one paragraph,
    each input in a few words without pydantic's titles and null alternatives, and an output schema that only
    names the document (``profan schema`` prints its full JSON Schema) — the SDK does not validate a result
    against a schema published without a model."""
    tool = Tool.from_function(
        fn, description=" ".join((fn.__doc__ or "").split()), annotations=READ_ONLY, structured_output=False
    )
    props = {}
    for name, prop in tool.parameters["properties"].items():
        kinds = [p for p in prop.get("anyOf", [prop]) if p != {"type": "null"}]
        props[name] = {**{key: value for key, value in kinds[0].items() if key != "title"}, "description": PARAMS[name]}
        if prop.get("default") is not None:
            props[name]["default"] = prop["default"]
    required = tool.parameters.get("required")
    tool.parameters = {"type": "object", "properties": props, **({"required": required} if required else {})}
    tool.fn_metadata.output_schema = {"type": "object", "properties": {"schema": {"const": document}}}
    return tool


def build_server(roots: list[Path] | None = None) -> MCPServer:
    """The MCP server with profan's tools registered (no transport started); it reads only inside ``roots``
    (default: the current folder)."""
    from profan.model.version import __version__
    from profan.render.brief import BRIEF_SCHEMA
    from profan.render.evidence_doc import EVIDENCE_SCHEMA
    from profan.render.rules_index import RULES_SCHEMA

    info = Implementation(name="profan", version=__version__)
    tools = Tools(roots or [Path.cwd()], info.model_dump(by_alias=True, mode="json", exclude_none=True))
    registered = [
        _tool(tools.analyze, BRIEF_SCHEMA),
        _tool(tools.evidence, EVIDENCE_SCHEMA),
        _tool(tools.compare, BRIEF_SCHEMA),
        _tool(tools.rules, RULES_SCHEMA),
    ]
    return MCPServer(name="profan", version=__version__, instructions=INSTRUCTIONS, tools=registered)


def serve(roots: list[Path] | None = None) -> None:
    """Run on stdio until the client closes the pipe and every request read has been answered
    (`profan.app.mcp_stdio`: bounded request lines, threads of its own for the wire)."""
    from mcp.server.stdio import stdio_server

    from profan.app.mcp_stdio import serve_stdio

    server = build_server(roots)
    lowlevel = server._lowlevel_server  # what `MCPServer.run_stdio_async` runs, on the SDK's own streams

    async def run(lines: Any, writer: Any) -> None:
        async with stdio_server(stdin=lines, stdout=writer) as (read_stream, write_stream):
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

    serve_stdio(run)
