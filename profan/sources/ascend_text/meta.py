"""Readers for the small JSON side files: ``profiler_info_{rank}.json`` and ``profiler_metadata.json``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from profan.model.errors import TOO_DEEP, ProfanInputError
from profan.model.files import open_regular
from profan.model.rank import Metadata, ParallelGroup
from profan.rulepack import limits


def load_json(path: Path) -> Any:
    try:
        with open_regular(path) as handle:
            limits.check_size(path, os.fstat(handle.fileno()).st_size, "max_side_file_bytes", "a JSON side file")
            raw = handle.read()
    except OSError as exc:
        raise ProfanInputError(path, f"cannot read: {exc.strerror or exc}") from None
    if not raw.strip():
        raise ProfanInputError(path, "empty file")
    try:
        return msgspec.json.decode(raw)  # about twice the stdlib's speed; a cluster has thousands of these files
    except msgspec.DecodeError:
        pass  # the stdlib takes what msgspec refuses (NaN literals, integers past 64 bits) and words the error
    except RecursionError:
        raise ProfanInputError(path, TOO_DEEP) from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise ProfanInputError(path, TOO_DEEP) from None
    except UnicodeDecodeError as exc:  # a ValueError too, but without a position the message below could use
        raise ProfanInputError(
            path,
            f"not valid JSON (not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
            f"{exc.start}; profiler JSON files are UTF-8)",
        ) from None
    except ValueError as exc:
        raise ProfanInputError(
            path, f"not valid JSON ({exc.args[0].split(':')[0]} at byte {getattr(exc, 'pos', '?')}; truncated?)"
        ) from None


@dataclass
class ProfilerInfo:
    level: str | None = None
    aic_metrics: str | None = None
    torch_npu_version: str | None = None
    cann_version: str | None = None
    rank_id: int | None = None
    collection_end_ns: int | None = None  # end_info.collectionTimeEnd: ranks of one job end close together


def read_info(path: Path) -> ProfilerInfo:
    data = load_json(path)
    if not isinstance(data, dict):
        raise ProfanInputError(path, "expected a JSON object")
    config = data.get("config")
    exp = config.get("experimental_config") if isinstance(config, dict) else None
    exp = exp if isinstance(exp, dict) else {}  # a config of another shape tells us nothing: not an error
    rank = whole(data.get("rank_id"))
    end = data.get("end_info")
    end_ns = whole(end.get("collectionTimeEnd")) if isinstance(end, dict) else None
    return ProfilerInfo(
        level=_text(exp.get("_profiler_level")),
        aic_metrics=_text(exp.get("_aic_metrics")),
        torch_npu_version=_text(data.get("torch_npu_version")),
        cann_version=_text(data.get("cann_version")),
        rank_id=rank,
        collection_end_ns=end_ns if end_ns is not None and end_ns > 0 else None,
    )


def whole(v: Any) -> int | None:
    """A rank id as ``int()`` reads it, if it fits an int64 (every table keeps ranks as Int64); None for
    anything else — ``inf`` and ``NaN`` (which the stdlib's JSON reader accepts) and numbers past int64 used to
    end in an internal error."""
    try:
        n = int(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if -(2**63) <= n < 2**63 else None


def _text(v: Any) -> str | None:
    """A scalar setting as text; an object or list where a setting belongs says nothing (None)."""
    return None if v is None or isinstance(v, (dict, list)) else str(v)


def read_metadata(path: Path) -> Metadata:
    data = load_json(path)
    if not isinstance(data, dict):
        raise ProfanInputError(path, "expected a JSON object")
    info = data.get("parallel_group_info")
    if info is not None and not isinstance(info, dict):
        raise ProfanInputError(path, f"parallel_group_info is a JSON {type(info).__name__}, not an object of groups")
    groups = []
    for key, value in (info or {}).items():
        ranks = value.get("global_ranks") if isinstance(value, dict) else None
        ranks = [whole(rank) for rank in ranks] if isinstance(ranks, list) else None
        if ranks is not None and None in ranks:  # a rank that is no int64: the group cannot map ranks
            ranks = None
        if ranks is not None:
            groups.append(ParallelGroup(hccl_name=key, group_name=str(value.get("group_name", "")), global_ranks=ranks))
    args = data.get("distributed_args")
    return Metadata(distributed_args=args if isinstance(args, dict) else {}, groups=groups)


def double_hash(text: str) -> int:
    """HCCL's group id: the ``@<uint64>`` suffix of communication op keys (format reference §1.2).

    Two 32-bit polynomial string hashes (primes 29 and 131), packed ``h29 << 32 | h131``.
    """
    h29 = 0
    h131 = 0
    for ch in text:
        h29 = (h29 * 29 + ord(ch)) & 0xFFFFFFFF
        h131 = (h131 * 131 + ord(ch)) & 0xFFFFFFFF
    return (h29 << 32) | h131
