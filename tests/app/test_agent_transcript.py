"""A scripted agent answers a user's question about the Qwen3 sample through `profan mcp`, the way SKILL.md teaches
(the causes first, then the cause's message and metrics without rows, every tool at its default cap), and the
answer it can give is held against the question: which stage rank 2 is on, what makes that stage slower (the LM
head over the 151,936-word vocabulary), what fixing it saves per step and what to change. Its budget is what an
agent's context pays for: at most 3 tool calls and under 8 KB on the wire, all results summed."""

from __future__ import annotations

import json

from conftest import QWEN3
from test_mcp import Wire, call_session

QUESTION = "Why is rank 2 slower than rank 0 in the Qwen3 sample, and what should I change?"
MAX_CALLS = 3
MAX_WIRE_BYTES = 8000


def answer(cause: dict, detail: dict) -> str:
    """What the agent tells the user, made only of what the tools returned."""
    gain = f"{cause['impact_us'] / 1000:.1f} ms per step ({cause['impact_share']:.1%} of the step)"
    return (
        f"{cause['title']}. {detail['message']} Fixing it saves about {gain}. "
        f"What to change: {detail['action']} Could also be: {detail['alternatives'][0]} "
        f"Check: {detail['verify']}"
    )


def test_why_is_rank_2_slower_than_rank_0(qwen3_report, tmp_path):
    transcript: list[tuple[str, dict, dict]] = []

    async def agent(client):
        async def call(name: str, args: dict) -> dict:
            result = await client.call_tool(name, args)
            assert not result.is_error, result.content
            transcript.append((name, args, result.structured_content))
            return result.structured_content

        brief = await call("analyze", {"path": str(QWEN3)})
        # causes first: the one on rank 2's side of the comparison and not on rank 0's; a cause the brief's cap
        # left out is named under `omitted`, and its claim without rows says which ranks it is on
        picked = [c for c in brief["causes"] if 2 in c["ranks"] and 0 not in c["ranks"]]
        left = [i for ids in brief["omitted"].values() for i in ids if i.startswith("C")]
        for cid in [c["id"] for c in picked] or left:
            detail = await call("evidence", {"source": str(QWEN3), "finding_id": cid, "limit": 0})
            if 2 in detail["ranks"] and 0 not in detail["ranks"]:
                return next((c for c in picked if c["id"] == cid), detail), detail
        raise AssertionError("no cause on rank 2 and not on rank 0")

    wire = Wire(tmp_path / "wire.log")
    cause, detail = call_session(agent, wire=wire)
    said = answer(cause, detail)
    sent = wire.calls()
    log = "\n".join(f"{e['params']['name']} {json.dumps(e['params']['arguments'])}: {e['bytes']} B" for e in sent)

    # the budget: calls and bytes as they crossed the pipe
    assert len(sent) == len(transcript) <= MAX_CALLS, log
    assert sum(e["bytes"] for e in sent) < MAX_WIRE_BYTES, log

    # the answer: rank 2 is on the slow pipeline stage (C1; C2, the exposed transfer, is on every rank), with
    # its measured gain
    c1 = qwen3_report.causes[0]
    assert cause["id"] == "C1" and cause["check"] == "pipeline-stage-imbalance"
    assert "Pipeline stage 1 (ranks 2, 3) computes 1.73× stage 0" in said
    assert cause["impact_us"] == round(c1.impact_us, 3) and "84.8 ms per step (10.5% of the step)" in said
    # the decisive detail: the vocabulary dimension of the largest extra kernel names the LM head
    assert "Kernel time on rank 2 against rank 0" in detail["message"]
    assert "MatMulV3 (4096,151936;151936,1024)" in detail["action"] and "151936" in detail["metrics"]["extra_kernels"]
    assert "LM head and loss over the vocabulary" in said
    # what to change and how to tell it worked, as the rule pack words them for this cause
    assert detail["action"] == c1.action and "Move about 84.8 ms of compute per step off stage 1" in said
    assert detail["verify"] == c1.verify
    # every word of the answer came over the wire
    on_wire = "".join(json.dumps(e["result"]["structuredContent"], ensure_ascii=False) for e in sent)
    for piece in (cause["title"], detail["message"], detail["action"], detail["alternatives"][0]):
        assert json.dumps(piece, ensure_ascii=False)[1:-1] in on_wire
