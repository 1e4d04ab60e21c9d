"""The verdict first, everywhere: the Markdown of every bundled sample opens with it, and the Markdown, HTML, Excel,
--brief and MCP outputs lead with the same causes in the same order, with the report's own numbers. Trace text that
reaches a cause (a kernel name in its action) is escaped in each format."""

from __future__ import annotations

import html
import json
import re
import shutil
from dataclasses import replace

import anyio
import markupsafe
import openpyxl
import pytest
from conftest import FIXTURES, QWEN3, ROOT, analysed, run_cli
from test_hostile_outputs import _assert_inert, _outside_code, _unescape

import profan
from profan.render import render
from profan.render.html import build_html
from profan.render.markdown import render_markdown

DLRM = FIXTURES / "torch" / "dlrm_v100_8rank"
NOT_A_PROFILE = {"ascend/msinsight-metadata-2025"}  # a profiler_metadata.json alone: input to other tests
_SEVERAL = re.compile(r"holds \d+ separate profiler collections whose ranks overlap or carry no rank id \((.*)\);")


def samples() -> list[str]:
    """Every profile under fixtures/: each folder of fixtures/ascend and fixtures/torch, or, where one holds several
    collections (alexnet's level0–2, the gloo runs), each of them — as profan's discovery names them."""
    from profan.model.errors import ProfanInputError
    from profan.sources.discovery.discover import discover

    out = []
    for top in sorted(p for kind in ("ascend", "torch") for p in (FIXTURES / kind).iterdir() if p.is_dir()):
        rel = top.relative_to(FIXTURES).as_posix()
        if rel in NOT_A_PROFILE:
            continue
        try:
            discover(top)
            out.append(rel)
        except ProfanInputError as exc:
            several = _SEVERAL.search(str(exc))
            assert several, str(exc)
            parts = several[1].split(", ")
            if "…" in several[1]:  # the message names the first few: the collections are the folder's own
                parts = sorted(p.name for p in top.iterdir() if p.is_dir())
            out += [f"{rel}/{part}" for part in parts]
    return out


SAMPLES = samples()


def test_the_samples_are_every_fixture():
    """The bundled samples as the README lists them, each profile of the nested ones apart."""
    assert {"ascend/msinsight-qwen3-4rank-2025q4", "torch/dlrm_v100_8rank", "torch/moe_b200_rank0"} <= set(SAMPLES)
    assert {f"ascend/msinsight-alexnet-2rank-2025/level{i}" for i in range(3)} <= set(SAMPLES)
    assert len([s for s in SAMPLES if s.startswith("ascend/mstt-advisor-ut/")]) == 3
    assert len(SAMPLES) >= 13


def _gain(cause: dict, per: str = "the step") -> str:
    """The gain as the verdict words it, from the JSON report's numbers; ``per``: what the share is of."""
    us = cause["impact_us"]  # as the causes' texts write ms: one decimal from 1 ms, three below, µs under 0.1 ms
    text = f"{us / 1000:,.1f} ms" if us >= 1000 else f"{us / 1000:.3f} ms" if us >= 100 else f"{us:.2f} µs"
    # the share from the unrounded numbers, as the verdict computes it (the JSON's impact_share is rounded)
    exact = us / cause["step_us"] if cause.get("step_us") else cause["impact_share"]
    share = f" ({100 * exact:.1f}% of {per})" if cause["impact_share"] is not None else ""
    return f"{text} per step{share}"


def _verdict(md: str) -> str:
    return md[: md.index("\n## What was read")]


@pytest.mark.parametrize("sample", SAMPLES)
def test_markdown_of_every_sample_starts_with_the_verdict(sample):
    """After the title: the verdict, then one section per cause in the report's order (gain, action, how to verify,
    the findings it explains, its evidence), then the headline findings no cause explains — and only then what was
    read."""
    report = analysed(FIXTURES / sample)
    doc = json.loads(json.dumps(report.to_dict(), default=str))
    md = render_markdown(report)
    # a serving capture opens with its model iterations (tests/render/test_serving_opening.py), others with the step
    serving = "serving_iterations" in report.tables and not report.tables["serving_iterations"].is_empty()
    assert md.startswith(f"# profan report\n\n## Verdict\n\n**{'The iterations' if serving else 'The step'}:** ")
    verdict = _verdict(md)
    heads = re.findall(r'^### <a id="(C\d+)"></a>', verdict, flags=re.M)
    assert heads == [c["id"] for c in doc["causes"]]
    # one denominator for every share, the step period where the step line gives one, and gains within it
    per = "the step period" if "from one step's start to the next's" in verdict.split("\n")[4] else "the step"
    measured = [c for c in doc["causes"] if c["impact_us"] is not None and c["step_us"]]
    assert len({c["step_us"] for c in measured}) <= 1
    assert sum(c["impact_us"] for c in measured) <= (measured[0]["step_us"] if measured else 0) + 1e-3
    for c in doc["causes"]:
        part = verdict[verdict.index(f'<a id="{c["id"]}"></a>') :].split("\n### ")[0]
        gain = _gain(c, per) if c["impact_us"] is not None else "no estimate"
        assert f"- **Severity:** {c['severity']} · **Estimated gain:** {gain}" in part
        assert "- **Action:** " in part and "- **Verify:** " in part
        assert re.findall(r"\[(F\d+)\]\(#\1\)", part) == c["explains"]
        assert re.search(rf"`profan evidence \S+ {c['id']}`", part)
        assert c["evidence"][0]["file"] in _unescape(part)
    also = verdict[verdict.index("### Also worth a look") :]
    headline_findings = [i for i in doc["headline"] if i.startswith("F")]
    assert re.findall(r"^- \[(F\d+)\]\(#\1\)", also, flags=re.M) == headline_findings
    _assert_inert(md)


def test_qwen3_verdict_names_the_slow_stage_and_its_gain():
    """The first cause is the slow pipeline stage (ranks 2, 3) with the gain the JSON report gives; the findings it
    explains are listed under it, each group with its member table."""
    report = analysed(QWEN3)
    doc = json.loads(json.dumps(report.to_dict(), default=str))
    c1 = doc["causes"][0]  # the stage's 84.85 ms; the exposed transfer overlap can hide, 60 ms, second
    assert c1["check"] == "pipeline-stage-imbalance" and "stage 1 (ranks 2, 3)" in c1["title"]
    md = render_markdown(report)
    lines = md.splitlines()
    assert lines[4].startswith("**The step:** 810.15 ms")
    head = next(i for i, ln in enumerate(lines) if ln.startswith("### "))
    assert lines[head] == f'### <a id="C1"></a>C1 · {c1["title"]}'
    assert lines[head + 2] == (
        f"- **Severity:** {c1['severity']} · **Estimated gain:** {_gain(c1)}. *Assumption:* {c1['assumption']}"
    )
    assert c1["impact_us"] == pytest.approx(report.causes[0].impact_us, abs=1e-3) and c1["impact_us"] > 0
    # the findings section: C1's findings under it, before C2's heading; a group with its members
    findings = md[md.index('## <a id="findings"></a>Findings') :]
    under = findings[findings.index("### C1 · ") : findings.index("### C2 · ")]
    assert re.findall(r'^#### <a id="(F\d+)"></a>', under, flags=re.M) == c1["explains"]
    group = next(f for f in doc["findings"] if f["id"] in c1["explains"] and f["members"])
    block = under[under.index(f'<a id="{group["id"]}"></a>') :].split("\n#### ")[0]
    rows = re.findall(r"^\| (F\d+\.\d+) \| (\d*) \| (\d*) \| (\w+) \|", block, flags=re.M)
    want = [(m["id"], str(m["rank"]), str(m["step"] or ""), m["severity"]) for m in group["members"]]
    assert rows == want and len(rows) == len(group["members"]) > 1


def test_dlrm_verdict_names_rank_7():
    report = analysed(DLRM)
    c2 = report.causes[1]  # after the data loader at the step's start (tests/diagnosis/test_causes.py)
    assert c2.check == "straggler" and "Rank 7" in c2.title
    verdict = _verdict(render_markdown(report))
    second = verdict[verdict.index("\n### ") :].split("\n### ")[2]
    assert second.startswith(f'<a id="C2"></a>C2 · {c2.title}')
    assert "rank 7" in second.lower()


# ------------------------------------------------------------------------------------------ every output


def _html_causes(doc: str) -> list[tuple[str, str]]:
    verdict = doc[doc.index('<div class="verdict" id="verdict">') : doc.index('<section id="findings"')]
    found = re.findall(
        r'<details class="cause" id="(C\d+)"[^>]*>\s*<summary>\s*<span class="fid">\1</span>\s*'
        r'<span class="ftitle">(.*?)</span>',
        verdict,
        flags=re.S,
    )
    return [(cid, html.unescape(title)) for cid, title in found]


def _xlsx_causes(path) -> list[tuple[str, str, object]]:
    ws = openpyxl.load_workbook(path)["Summary"]
    rows = list(ws.iter_rows(values_only=True))
    head = next(i for i, r in enumerate(rows) if r[0] == "Cause")
    out = []
    for r in rows[head + 1 :]:
        if not r[0] or not str(r[0]).startswith("C"):
            break
        out.append((r[0], r[1], r[2]))
    return out


def _mcp_analyze(path) -> dict:
    from mcp import Client

    from profan.app.mcp_server import build_server

    async def main():
        async with Client(build_server([ROOT])) as client:
            # a cap as large as the CLI's brief, so both carry the same detail
            return (await client.call_tool("analyze", {"path": str(path), "max_bytes": 100_000})).structured_content

    return anyio.run(main)


@pytest.mark.parametrize("sample", [QWEN3, DLRM])
def test_every_output_leads_with_the_same_causes(sample, tmp_path):
    report = analysed(sample)
    want = [(c.id, c.title) for c in report.causes]
    assert want
    md = _verdict(render_markdown(report))
    assert re.findall(r'^### <a id="(C\d+)"></a>C\d+ · (.*)$', md, flags=re.M) == want
    doc = build_html(report)
    assert _html_causes(doc) == want
    assert doc.index('id="verdict"') < doc.index('id="findings"') < doc.index('id="sec-')
    render(report, "xlsx", tmp_path / "r.xlsx")
    rows = _xlsx_causes(tmp_path / "r.xlsx")
    assert [(cid, title) for cid, title, _ in rows] == want
    for (_, _, gain), c in zip(rows, report.causes, strict=True):
        if c.impact_us is None:
            assert str(gain).startswith(("no estimate: ", "no estimate (a bound: "))
        else:
            assert gain == pytest.approx(c.impact_us / 1000)
    res = run_cli("analyze", str(sample), "--brief")
    brief = json.loads(res.stdout)
    assert [(c["id"], c["title"]) for c in brief["causes"]] == want
    assert brief["headline"][: len(want)] == [cid for cid, _ in want]
    mcp = _mcp_analyze(sample)
    assert [(c["id"], c["title"]) for c in mcp["causes"]] == want
    # the CLI's brief is held to 8,000 bytes, the MCP result here to 100,000: texts may be cut, ids and titles not
    assert mcp["headline"] == brief["headline"]


def test_html_folds_explained_findings_under_their_cause(qwen3_report):
    """Each finding a cause explains is shown under that cause's heading, marked as its symptom; a group finding
    shows its members, each row an anchor with the member's id."""
    doc = build_html(qwen3_report)
    section = doc[doc.index('<section id="findings"') :]
    section = section[: section.index("</section>")]
    for c in qwen3_report.causes:
        start = section.index(f'<h3 id="by-{c.id}" class="cause-head">')
        nxt = [section.find('<h3 id="by-', start + 1), section.find('<h3 class="cause-head">', start + 1)]
        part = section[start : min([i for i in nxt if i > 0], default=len(section))]
        ids = re.findall(r'<details class="finding sev-\w+" id="(F\d+)">', part)
        assert ids == list(c.explains)
        assert part.count(f'A symptom of <a href="#{c.id}">{c.id}</a>') == len(ids)
    group = next(f for f in qwen3_report.findings if len(f.members) > 1)
    for m in group.members:
        assert f'<tr id="{m.id}"><td class="code">{m.id}</td><td class="num">{m.rank}</td>' in doc


# ------------------------------------------------------------------------------------------ hostile text

HOSTILE = "=cmd|' /C calc'!A0<script>alert(1)</script>![x](http://evil/p.png)`tick`[a](javascript:x)"


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    """The Qwen3 job with the op type of the LM head's matmul on rank 2 renamed to ``HOSTILE``: it is the largest
    extra kernel of the slow stage, so the name reaches that cause's message and action."""
    data = tmp_path_factory.mktemp("hostile") / "job"
    shutil.copytree(QWEN3, data)
    c1 = next(c for c in analysed(QWEN3).causes if c.check == "pipeline-stage-imbalance")
    ev = next(e for e in c1.evidence if e.select.get("op") == "MatMulV3")
    path = data / ev.file
    lines = path.read_text(encoding="utf-8").split("\n")
    for n in ev.lines:
        assert lines[n - 1].count(",MatMulV3,dynamic,") == 1
        lines[n - 1] = lines[n - 1].replace(",MatMulV3,dynamic,", f",{HOSTILE},dynamic,")
    path.write_text("\n".join(lines), encoding="utf-8")
    report = profan.analyze(data)
    stage = _stage(report)
    assert HOSTILE in stage.action and HOSTILE in stage.message
    return report


def _stage(report):
    return next(c for c in report.causes if c.check == "pipeline-stage-imbalance")


def test_a_kernel_name_in_a_cause_forms_nothing_in_markdown(hostile_report):
    md = render_markdown(hostile_report)
    _assert_inert(md)
    assert "<script" not in _outside_code(md)
    actions = [ln for ln in _verdict(md).splitlines() if ln.startswith("- **Action:**")]
    assert any(HOSTILE in _unescape(a) for a in actions)


def test_a_kernel_name_in_a_cause_is_text_in_html(hostile_report):
    doc = build_html(hostile_report)
    assert "<script>alert(1)</script>" not in doc
    actions = re.findall(r"<dt>Action</dt><dd>(.*?)</dd>", doc, flags=re.S)
    action = next(a for a in actions if HOSTILE in html.unescape(a))
    assert str(markupsafe.escape(HOSTILE)) in action


def test_a_kernel_name_in_a_cause_is_never_a_formula_in_excel(hostile_report, tmp_path):
    """The action (the name inside it) and a title that itself starts like a formula are stored as text."""
    report = replace(hostile_report, causes=[replace(_stage(hostile_report), title=HOSTILE)])
    render(report, "xlsx", tmp_path / "r.xlsx")
    wb = openpyxl.load_workbook(tmp_path / "r.xlsx")
    assert not [c.coordinate for ws in wb for row in ws.iter_rows() for c in row if c.data_type == "f"]
    ws = wb["Summary"]
    title = next(c for row in ws.iter_rows() for c in row if c.value == HOSTILE)
    assert title.data_type == "s" and title.quotePrefix
    action = next(c for row in ws.iter_rows() for c in row if c.value == report.causes[0].action)
    assert HOSTILE in action.value
    assert action.data_type == "s"
    causes = wb["Causes"]
    assert causes["C2"].value == HOSTILE and causes["C2"].quotePrefix


@pytest.mark.parametrize("sample", ["torch/vllm_gptoss_decode_mi300x_graph", "torch/dlrm_v100_8rank"])
def test_footer_offers_only_ids_the_report_holds(sample, tmp_path):
    """The Markdown and HTML footers offer `profan evidence` ids to try: those of this report (the serving capture has
    no cause, so no C1), and each one the command then answers."""
    report = analysed(FIXTURES / sample)
    members = [m.id for f in report.findings for m in f.members]
    expected = [ids[0] for ids in ([c.id for c in report.causes], [f.id for f in report.findings], members) if ids]
    assert ("C1" in expected) == bool(report.causes)
    here = f"(here {', '.join(expected)})"
    assert here in render_markdown(report).rsplit("---", 1)[1]
    assert here in build_html(report).rsplit('<footer class="muted">', 1)[1]
    saved = tmp_path / "report.json"
    render(report, "json", saved)
    for claim in expected:
        done = run_cli("evidence", str(saved), claim, "--limit", "1")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(claim)


def test_the_gain_reads_as_the_causes_texts_write_it(qwen3_report, tmp_path):
    """Qwen3's stage cause: the gain line, the HTML callout and the workbook's Verdict cell print 84.8 ms, as its
    action does ("Move about 84.8 ms of compute"), not 84.85 ms beside it; no gain line in the Markdown has two
    decimals of ms."""
    c1 = qwen3_report.causes[0]
    gain = f"{c1.impact_us / 1000:,.1f} ms per step ({100 * c1.impact_share:.1f}% of the step)"
    assert gain == "84.8 ms per step (10.5% of the step)" and "Move about 84.8 ms of compute" in c1.action
    md = render_markdown(qwen3_report)
    assert f"**Estimated gain:** {gain}. *Assumption:*" in md and f"*Estimated gain:* {gain}. " in md
    assert not re.findall(r"Estimated gain:\**\s[\d,]+\.\d\d ms", md)
    page = build_html(qwen3_report)
    assert f"<dd>{gain}." in page and f">{c1.impact_us / 1000:,.1f} ms per step · 10.5%<" in page
    render(qwen3_report, "xlsx", tmp_path / "r.xlsx")
    verdict = openpyxl.load_workbook(tmp_path / "r.xlsx")["Summary"]
    cells = [cell for row in verdict.iter_rows() for cell in row if cell.value == c1.impact_us / 1000]
    assert cells and cells[0].number_format == '#,##0.0" ms"'
