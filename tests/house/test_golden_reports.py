"""Golden JSON reports: a few real fixtures' whole reports, held byte for byte.

Why: the structure work (layer order, rooms, smaller builders) must not change what profan says. Each case runs
`profan analyze DIR -o report.json` and compares the normalised report with `tests/golden/<name>.json` whole, so
any moved word, number, row citation or ordering shows as a diff. Normalising drops only what varies between
machines and runs: the timings, the version and the absolute root. Regenerate after an intended change with
`PROFAN_UPDATE_GOLDEN=1 python -m pytest -q -n0 tests/house/test_golden_reports.py` and say why in the commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"

CASES = {
    "qwen3_4rank_ascend": "fixtures/ascend/msinsight-qwen3-4rank-2025q4",
    "alexnet_db_level1": "fixtures/ascend/msinsight-alexnet-2rank-2025-db/level1",
    "dlrm_8rank": "fixtures/torch/dlrm_v100_8rank",
    "gloo_moe_sleep": "fixtures/torch/gloo_moe_cpu_4rank/sleep",
    "nccl_single_trace": "fixtures/torch/nccl_a100_1rank/nccl_data.json.gz",
}

# keys whose values differ between runs or machines (the seal is keyed per user and root), not what profan says
_VARYING_KEYS = {"timings_s", "root_abs", "root_seal", "profan", "cache"}  # cache: hit or miss of the parse cache


def _normalise(value: object) -> object:
    """The report without run-dependent values; the repository's absolute path becomes `<repo>`."""
    if isinstance(value, dict):
        return {key: _normalise(item) for key, item in value.items() if key not in _VARYING_KEYS}
    if isinstance(value, list):
        return [_normalise(item) for item in value]
    if isinstance(value, str):
        return value.replace(str(REPO), "<repo>")
    return value


def _report(source: str, out_dir: Path) -> dict:
    out = out_dir / "report.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "profan", "analyze", source, "-o", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return _normalise(json.loads(out.read_text(encoding="utf-8")))


@pytest.mark.process
@pytest.mark.parametrize("name", sorted(CASES))
def test_report_matches_golden(name: str, tmp_path: Path) -> None:
    report = _report(CASES[name], tmp_path)
    text = json.dumps(report, indent=1, sort_keys=False, ensure_ascii=False) + "\n"
    golden = GOLDEN / f"{name}.json"
    if os.environ.get("PROFAN_UPDATE_GOLDEN") == "1":
        golden.write_text(text, encoding="utf-8")
    assert golden.exists(), f"{golden} missing: run with PROFAN_UPDATE_GOLDEN=1 to write it"
    expected = golden.read_text(encoding="utf-8")
    assert text == expected, f"{name}: report differs from {golden.name} (diff the two to see what changed)"
