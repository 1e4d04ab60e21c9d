"""An evidence document under a byte cap never returns an item empty without saying so: at limit=1 and the MCP
tool's default cap, the items whose rows the cap took are named, and the cap that returns them all works."""

from __future__ import annotations

from conftest import TORCH, analysed

from profan.app.mcp_server import EVIDENCE_BYTES
from profan.render.brief import ByteCap, evidence_doc, json_bytes

SLEEP = TORCH / "gloo_moe_cpu_4rank" / "sleep"


def test_rows_left_out_by_the_cap_are_named_and_the_named_cap_returns_them():
    report = analysed(SLEEP)
    capped = evidence_doc(report, SLEEP, "C1", limit=1, cap=ByteCap(EVIDENCE_BYTES, json_bytes))
    empty = [n for n, item in enumerate(capped["evidence"]) if not item["rows"]]
    gone = capped["evidence_items"] - len(capped["evidence"])
    assert (empty, gone) == ([0], 3)  # 4 items cited, each with 2 events; none fits with its row at 3,000 bytes
    assert capped["left_out"]["rows_of_items"] == [0, 1, 2, 3] and capped["left_out"]["items_after_first"] == 3
    wanted = int(capped["left_out"]["how"].split("max_bytes=")[1])
    whole = evidence_doc(report, SLEEP, "C1", limit=1, cap=ByteCap(wanted, json_bytes))
    assert "left_out" not in whole and [len(item["rows"]) for item in whole["evidence"]] == [1, 1, 1, 1]
