"""An evidence document under a byte cap never returns an item empty without saying so: at limit=1 and the MCP
tool's default cap, the items whose rows the cap took are named, and the cap that returns them all works."""

from __future__ import annotations

import pytest
from conftest import QWEN3, TORCH, analysed

from profan.app.mcp_server import EVIDENCE_BYTES
from profan.render.byte_cap import ByteCap, json_bytes
from profan.render.evidence_doc import evidence_doc

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


def _mcp_size(doc: dict) -> int:
    """What the MCP tool counts against max_bytes: the whole JSON-RPC response line carrying the document."""
    from profan.app.mcp_server import _result, wire_bytes

    return wire_bytes(_result(doc), 1, {"name": "profan", "version": "0"})


@pytest.mark.parametrize(
    ("root", "claim"),
    [
        (SLEEP, "C1"),
        (TORCH / "nccl_a100_1rank" / "nccl_data.json.gz", "F1"),
        (TORCH / "serving_llama_cpu_mixed" / "trace.json.gz", "C1"),
        (QWEN3, "F1"),
    ],
    ids=["gloo-sleep", "nccl-trace", "serving-trace", "qwen3-ascend"],
)
def test_no_item_comes_back_empty_unsaid_at_any_cap(root, claim):
    """From a cap far below the smallest form to the default and above, with limit=1 (one row per item) and the
    MCP tool's own measure: every item returned either carries a row, cites nothing, or is named in left_out, and
    every item cut is counted there; a document over its cap says so (note)."""
    report = analysed(root)
    for max_bytes in (150, 400, 700, 1000, 1500, 2000, EVIDENCE_BYTES, 6000, 12000):
        doc = evidence_doc(report, root, claim, limit=1, cap=ByteCap(max_bytes, _mcp_size))
        said = doc.get("left_out", {})
        items = doc["evidence"]
        cited = [n for n, item in enumerate(items) if item["row_count"] and not item["rows"]]
        assert set(cited) <= set(said.get("rows_of_items", [])), (max_bytes, cited, said)
        cut = doc.get("evidence_items", len(items)) - len(items)
        assert cut == said.get("items_after_first", 0) if cut else True, (max_bytes, cut, said)
        assert _mcp_size(doc) <= max_bytes or "note" in doc, max_bytes
    full = evidence_doc(report, root, claim, limit=1, cap=ByteCap(10**7, _mcp_size))
    assert "left_out" not in full and all(item["rows"] for item in full["evidence"] if item["row_count"])
