"""The RL step ledger in every output on the real normal run (fixtures/torch/rl_grpo_cpu/normal): the Markdown
section, the HTML page's ledger (phases in columns, per role and rank busy and idle), the workbook's sheet of the
same, the JSON report's field, the brief's summary and the MCP analyze tool's answer — each value read back from
the output and held against the ledger's own tables."""

from __future__ import annotations

import json
import re
from pathlib import Path

import openpyxl
import polars as pl
import pytest

from profan.app.mcp_server import Tools
from profan.model.textfmt import fmt_ms
from profan.pipeline import analyze
from profan.render.brief import brief
from profan.render.html import build_html
from profan.render.markdown import render_markdown
from profan.render.xlsx import RL_SHEET, render_xlsx

RUN = Path(__file__).resolve().parents[2] / "fixtures" / "torch" / "rl_grpo_cpu" / "normal"


@pytest.fixture(scope="module")
def report():
    return analyze(RUN)


def _phase_us(report, step: int, phase: str, column: str = "phase_us") -> float:
    rows = report.tables["rl_phases"].filter((pl.col("step") == step) & (pl.col("phase") == phase))
    return float(rows[column][0])


def _rank_us(report, step: int, rank: int, phase: str, column: str) -> float:
    led = report.tables["rl_ledger"]
    row = led.filter((pl.col("step") == step) & (pl.col("rank") == rank) & (pl.col("phase") == phase))
    return float(row[column][0])


def test_markdown_has_the_ledger_rows(report):
    md = render_markdown(report)
    gen = _phase_us(report, 2, "actor update")
    timer = _phase_us(report, 2, "actor update", "timer_us")
    diff = (gen - timer) / timer * 100
    assert f"| 2 | actor update | {fmt_ms(gen)} | {fmt_ms(timer)} | {diff:+.1f}% | trace |" in md


def test_html_ledger_has_phases_as_columns_and_busy_idle_per_rank(report):
    page = build_html(report)
    start = page.index('id="sec-rl_step_ledger"')
    section = page[start : page.index("</table>", start)]
    heads = [re.sub(r"<[^>]+>", "", h).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", section, re.S)]
    assert heads[:5] == ["step", "role", "role rank", "rank", "time"]
    assert heads[5:8] == ["generation (ms)", "reward (ms)", "old log-prob (ms)"] and heads[-1] == "sum (ms)"
    rows = [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
        for tr in re.findall(r"<tr>(.*?)</tr>", section, re.S)
    ]
    rows = [r for r in rows if r]
    actor_idle = next(r for r in rows if r[:5] == ["1", "actor", "0", "2", "idle"])
    assert actor_idle[5] == fmt_ms(_rank_us(report, 1, 2, "generation", "idle_us"))  # the trainer waits for rollout
    first = next(r for r in rows if r[:5] == ["1", "all roles", "—", "—", "phase in the traces"])
    steps = report.tables["rl_steps"].filter(pl.col("step") == 1)
    assert first[-1] == fmt_ms(float(steps["step_us"][0]))  # the phases' sum is the step


def test_workbook_has_an_rl_ledger_sheet(report, tmp_path):
    render_xlsx(report, tmp_path / "r.xlsx")
    sheet = openpyxl.load_workbook(tmp_path / "r.xlsx")[RL_SHEET]
    rows = list(sheet.iter_rows(values_only=True))
    head = rows[0]
    col = head.index("weight sync (µs)")
    busy = next(r for r in rows[1:] if r[:5] == (2, "rollout", 1, 1, "busy"))
    assert busy[col] == pytest.approx(_rank_us(report, 2, 1, "weight sync", "busy_us"))
    timer = next(r for r in rows[1:] if r[0] == 2 and r[4] == "framework's timer")
    assert timer[head.index("advantage (µs)")] == pytest.approx(_phase_us(report, 2, "advantage", "timer_us"))


def test_json_brief_and_mcp_carry_the_ledger(report, tmp_path):
    doc = json.loads(json.dumps(report.to_dict()))
    steps = doc["rl_ledger"]["steps"]
    assert [p["phase"] for p in steps[0]["phases"]] == report.tables["rl_phases"].filter(pl.col("step") == 1)[
        "phase"
    ].to_list()
    small = brief(report, max_bytes=4000)["summary"]["rl_ledger"]
    update = report.tables["rl_phases"].filter(pl.col("phase") == "actor update")["phase_us"].mean()
    assert next(p for p in small["phases"] if p["phase"] == "actor update")["ms"] == round(update / 1000, 1)
    answer = Tools([RUN.parent], {}).analyze(str(RUN))
    ledger = answer.structured_content["summary"]["rl_ledger"]
    assert ledger["step_ms"] == round(float(report.tables["rl_steps"]["step_us"].mean()) / 1000, 1)
    led = report.tables["rl_ledger"].filter(pl.col("rank") == 2)
    assert ledger["busy_share"]["actor 0"] == round(float(led["busy_us"].sum() / led["window_us"].sum()), 3)


def test_each_pool_idles_while_the_other_works(report):
    """Separate pools: the rollout ranks idle through the trainer's phases, the trainer through generation."""
    led = report.tables["rl_ledger"]
    pools = {pool["role"]: pool for pool in report.to_dict()["rl_ledger"]["pools"]}
    trainer_phases = ["reward", "old log-prob", "reference", "actor update"]
    rollout = led.filter((pl.col("role") == "rollout") & pl.col("phase").is_in([*trainer_phases, "weight sync"]))
    per_rank_step = rollout["idle_us"].sum() / (2 * report.tables["rl_steps"].height)
    assert pools["rollout"]["ranks"] == 2 and pools["rollout"]["idle_us"] == pytest.approx(per_rank_step)
    actor = led.filter((pl.col("role") == "actor") & pl.col("phase").is_in(["generation", "weight sync"]))
    assert pools["actor"]["idle_us"] == pytest.approx(actor["idle_us"].sum() / report.tables["rl_steps"].height)
    md = render_markdown(report)
    assert f"rollout (2 ranks) {fmt_ms(pools['rollout']['idle_us'])} ms" in md
