"""Which NPU a rank ran on, from msprof's ``device_*/info.json.*`` (``platform_version``: 1 = Ascend910A,
5 = Ascend910B in msprof's own table). torch_npu's text exports (``ASCEND_PROFILER_OUTPUT``) do not record the chip,
so this is read only when the raw ``PROF_*`` folder was kept; otherwise the device stays unknown and no absolute
bandwidth prior is applied unless the user names the device (``--hardware``).
"""

from __future__ import annotations

import json
from pathlib import Path

from profan.model.files import open_regular


def platform_version(rank_dir: Path) -> int | None:
    if not rank_dir.is_dir():
        return None
    for pattern in ("device_*/info.json*", "PROF_*/device_*/info.json*"):
        for path in sorted(rank_dir.glob(pattern)):
            try:
                with open_regular(path) as handle:
                    doc = json.loads(handle.read())
                return int(doc["platform_version"])
            except (OSError, ValueError, KeyError, TypeError, OverflowError):  # OverflowError: Infinity
                continue
    return None
