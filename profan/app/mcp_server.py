"""`profan mcp`: the same answers as the CLI, as MCP tools on stdio, for agents that speak MCP.

Built on the official ``mcp`` SDK (2.x, ``mcp.server.mcpserver``), an optional dependency
(``pip install 'profan[mcp]'``) because it brings an HTTP stack the CLI does not need. The tools return the very
documents the CLI prints (``profan.brief``, ``profan.evidence``, ``profan.rules`` — built by
``profan.app.brief``), as
structured results with an output schema. A bad input comes back as a tool error whose text is the CLI's one-line
message (``profan: error: PATH: problem``), so an agent reads the same words whichever door it used.

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
from pathlib import Path
from typing import Annotated, Any, Literal

from profan.model.errors import ProfanError, ProfanInputError
from profan.model.report import Report
from profan.trust import inside, report_root

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.types import CallToolResult, TextContent, ToolAnnotations
    from typing_extensions import NotRequired, TypedDict
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ProfanInputError(
        None, f"'profan mcp' needs the MCP SDK ({exc.name} is missing): pip install 'profan[mcp]'"
    ) from None

INSTRUCTIONS = """profan analyses profiler output (Ascend PyTorch profiler / msprof directories, PyTorch chrome traces)
into causes and findings, each backed by the exact source rows. Start with `analyze` on the profiler directory: read
its `causes` first — what holds the step back, the estimated gain per step, the action, how to verify it and the
competing explanations, with the ids of the findings each explains — then the findings no cause explains. Evidence
locators are CSV line numbers with header = line 1, trace event indexes, or JSON pointers. To check a claim, call
`evidence` with the same path and a cause id (C1), finding id (F3) or group member id (F3.2): it returns the raw
source lines verbatim. `compare` tells what got slower between two ranks of one job or two runs (pass the same
`source`/`b`/`ranks` to `evidence` for its findings). `rules` lists or explains the checks and bucket rules."""

Severity = Literal["critical", "warning", "info"]

# --------------------------------------------------------------------------------------- output schemas
# TypedDicts (not the JSON Schema files) because the SDK derives the advertised schema and validates results from a
# Python type; tests hold both against the same real outputs.


class BriefSource(TypedDict):
    root: str | None
    root_abs: str | None
    format: str | None
    ranks: list[int | None]


class BucketShare(TypedDict):
    bucket: str
    share: float | None
    time_ms: float


class Summary(TypedDict):
    causes: int
    findings: int
    explained: int
    critical: int
    warning: int
    info: int
    worst: Severity | None
    step_us: float | None
    time_by_bucket: list[BucketShare]


class EvidenceStub(TypedDict):
    file: str
    row_count: int
    lines: NotRequired[list[int]]
    events: NotRequired[list[int]]
    pointers: NotRequired[list[str]]


class FindingStub(TypedDict):
    id: str
    severity: Severity
    check: str
    rank: int | None
    step: int | None
    title: str
    ranks: list[int]
    steps: list[int]
    ranks_total: NotRequired[int]
    steps_total: NotRequired[int]
    members: NotRequired[int]
    evidence: list[EvidenceStub]
    evidence_items: NotRequired[int]


class CauseStub(TypedDict):
    id: str
    check: str
    title: str
    impact_us: float | None
    impact_share: float | None
    step_us: float | None
    assumption: NotRequired[str]
    action: str
    verify: str
    alternatives: list[str]
    explains: list[str]
    ranks: list[int]
    steps: list[int]
    ranks_total: NotRequired[int]
    steps_total: NotRequired[int]
    evidence: list[EvidenceStub]
    evidence_items: NotRequired[int]


class Clipped(TypedDict):
    count: int
    first: list[str]


class BriefDoc(TypedDict):
    schema: str
    report_schema: str
    headline: list[str]
    causes: list[CauseStub]
    summary: Summary
    findings: list[FindingStub]
    omitted: dict[str, list[str]]
    source: BriefSource
    report_file: str | None
    warnings: Clipped
    notes: Clipped
    drill: str


class Row(TypedDict):
    locator: str
    text: str


class EvidenceItem(TypedDict):
    file: str
    row_count: int
    cited: int
    select: dict[str, Any]
    rows: list[Row]
    lines: NotRequired[list[int]]
    events: NotRequired[list[int]]
    pointers: NotRequired[list[str]]
    header: NotRequired[str]


class EvidenceDoc(TypedDict):
    schema: str
    id: str
    kind: Literal["cause", "finding", "member"]
    check: str
    severity: Severity
    rank: int | None
    step: int | None
    ranks: list[int]
    steps: list[int]
    title: str
    message: str
    metrics: dict[str, Any]
    impact_us: NotRequired[float | None]
    impact_share: NotRequired[float | None]
    assumption: NotRequired[str]
    action: NotRequired[str]
    verify: NotRequired[str]
    alternatives: NotRequired[list[str]]
    explains: NotRequired[list[str]]
    explained_by: NotRequired[str | None]
    members: NotRequired[list[str]]
    root: str
    evidence: list[EvidenceItem]


class RuleItem(TypedDict):
    kind: Literal["bucket-rule", "check"]
    id: str
    name: str
    source: str
    why: str
    bucket: NotRequired[str]
    match: NotRequired[dict[str, str]]
    example: NotRequired[str]
    applies_to: NotRequired[str]
    detects: NotRequired[str]
    params: NotRequired[dict[str, Any]]
    action: NotRequired[str]
    verify: NotRequired[str]
    alternatives: NotRequired[list[str]]


class RulesDoc(TypedDict):
    schema: str
    files: NotRequired[list[str]]
    rules: NotRequired[list[RuleItem]]
    checks: NotRequired[list[RuleItem]]
    item: NotRequired[RuleItem]


# --------------------------------------------------------------------------------------- tools


def _result(doc: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(doc, ensure_ascii=False))], structured_content=doc
    )


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
        self.roots = [r.expanduser().resolve() for r in roots]

    def check(self, path: str | Path, what: str = "path") -> Path:
        p = Path(path).expanduser()
        if not any(inside(p, r) for r in self.roots):
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
        from profan.compare import compare

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


def build_server(roots: list[Path] | None = None) -> MCPServer:
    """The MCP server with profan's tools registered (no transport started); it reads only inside ``roots``
    (default: the current folder)."""
    from profan import __version__
    from profan.app.brief import MAX_BYTES, brief, evidence_doc, rules_doc
    from profan.app.drill import load_report_or_analyze

    server = MCPServer(name="profan", version=__version__, instructions=INSTRUCTIONS)
    reports = Reports()
    allowed = Roots(roots or [Path.cwd()])
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=read_only)
    def analyze(
        path: str, rules: list[str] | None = None, hardware: str | None = None, max_bytes: int = MAX_BYTES
    ) -> Annotated[CallToolResult, BriefDoc]:
        """Analyse a profiler output directory (a job folder with one folder per rank, one rank folder,
        ASCEND_PROFILER_OUTPUT, an msprof PROF_* folder, or one kernel_details.csv). Returns a compact report that
        leads with the causes (largest estimated gain per step first: action, how to verify, competing
        explanations, the findings each explains, evidence locators), then the findings no cause explains, summary
        counts and kernel time by bucket. `rules`: extra rule TOML files tried before the built-in ones;
        `hardware`: a TOML of link-bandwidth priors; `max_bytes`: size cap of the result (default 8000)."""
        try:
            allowed.check(path)
            report = reports.get(path, allowed.all(rules, "rules file"), _one(allowed, hardware, "hardware file"))
            hint = f"call the evidence tool with source={json.dumps(path)} and a finding_id (C1, F3 or F3.2)"
            return _result(brief(report, max_bytes=max_bytes, drill=hint))
        except Exception as exc:
            return _error(exc)

    @server.tool(annotations=read_only)
    def evidence(
        source: str,
        finding_id: str,
        limit: int | None = None,
        rules: list[str] | None = None,
        hardware: str | None = None,
        root: str | None = None,
        b: str | None = None,
        ranks: list[int] | None = None,
    ) -> Annotated[CallToolResult, EvidenceDoc]:
        """The raw source rows behind one cause (`finding_id` C1), finding (F3) or member of a group finding
        (F3.2), read back verbatim from the original files: CSV lines (with the file's header line), trace events
        or JSON values. `source` is the profiler directory given to
        `analyze` (same `rules`/`hardware`, so ids match) or a report.json written by `profan analyze -f json -o`;
        for a finding of `compare`, pass its `a` as `source` and the same `b` or `ranks`.
        `limit` caps rows per evidence item; `root` is the data directory if a report.json's data has moved."""
        try:
            if limit is not None and limit < 1:
                raise ProfanInputError(None, f"limit must be 1 or more (got {limit})")
            src = allowed.check(source, "source")
            given = allowed.check(root, "root") if root else None
            rules = allowed.all(rules, "rules file")
            if src.is_file() and src.suffix == ".json":
                report, data_root = load_report_or_analyze(src, given)
            else:
                report = (
                    reports.compared(source, _one(allowed, b, "b"), ranks, rules)
                    if b is not None or ranks is not None
                    else reports.get(source, rules, _one(allowed, hardware, "hardware file"))
                )
                data_root = report_root(report, None, given)
            allowed.check(data_root, "the report's data")
            return _result(evidence_doc(report, data_root, finding_id, where=source, limit=limit))
        except Exception as exc:
            return _error(exc)

    @server.tool(annotations=read_only)
    def compare(
        a: str,
        b: str | None = None,
        ranks: list[int] | None = None,
        rules: list[str] | None = None,
        max_bytes: int = MAX_BYTES,
    ) -> Annotated[CallToolResult, BriefDoc]:
        """What changed from side A to side B (B minus A, per step and rank): two runs of a job, two rank folders
        or files, or one job directory `a` with `ranks` [x, y]. Returns the compact report of the comparison:
        buckets and kernels that grew, kernels present on one side only, each citing rows on both sides."""
        try:
            report = reports.compared(
                str(allowed.check(a, "a")), _one(allowed, b, "b"), ranks, allowed.all(rules, "rules file")
            )
            other = f"b={json.dumps(b)}" if b is not None else f"ranks={json.dumps(ranks)}"
            hint = f"call the evidence tool with source={json.dumps(a)}, {other} and a finding_id (C1, F3 or F3.2)"
            return _result(brief(report, max_bytes=max_bytes, drill=hint))
        except Exception as exc:
            return _error(exc)

    @server.tool(name="rules", annotations=read_only)
    def rules_tool(id: str | None = None, rules: list[str] | None = None) -> Annotated[CallToolResult, RulesDoc]:
        """List the rule pack (bucket rules that classify kernels, and the checks that produce findings with their
        thresholds), or explain one rule or check by id (e.g. a finding's `check`)."""
        try:
            return _result(rules_doc([Path(r) for r in allowed.all(rules, "rules file")], id))
        except Exception as exc:
            return _error(exc)

    return server


def _one(allowed: Roots, path: str | None, what: str) -> str | None:
    return None if path is None else str(allowed.check(path, what))


def serve(roots: list[Path] | None = None) -> None:
    """Run on stdio until the client closes the pipe."""
    build_server(roots).run("stdio")
