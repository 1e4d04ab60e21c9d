"""Synthetic Ascend clusters: N ``*_ascend_pt`` rank directories of an MoE transformer in the current real format.

Why: real multi-rank captures with a known fault are rare, and a straggler finder is only trustworthy if it is
tested on data where the answer is known. This module simulates one training step per rank — attention, dense
matmuls, MoE routing and grouped matmuls, EP all-to-all, DP gradient sync — with collectives that end together on
every member rank (each member waits for the last arrival), then writes what torch_npu writes:

* ``kernel_details.csv`` with the 47-column PipeUtilization header of CANN 8.3 (TAB after timestamps, shapes
  quoted as ``\"\"\"4096,2048\"\"\"``, one ``COMMUNICATION`` row per HCCL op);
* ``step_trace_time.csv`` (with ``Device_id``), ``communication.json``, the aggregated
  ``communication_matrix.json``, ``trace_view.json`` (Ascend Hardware, HCCL Group/Plane and Overlap Analysis lanes);
* ``profiler_info_{rank}.json`` and ``profiler_metadata.json`` whose ``parallel_group_info`` keys hash (double_hash)
  to the ``@<hash>`` suffixes of the op names;
* ``ground_truth.json`` beside the rank directories: what was injected and the numbers a correct analysis finds.

Faults to inject: a straggler rank (extra compute in one kernel class, or a host gap with no device work), expert
imbalance (one hot expert receives more tokens: larger GroupedMatmul inputs on its rank), a slow link, and a
cluster-wide slowdown of one kernel class (for ``profan compare``). Deterministic for a given seed.

``python -m profan.synth OUT --ranks 8 --straggler-rank 5 --straggler-kind compute``
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from profan.synth.model import SynthParams, _Sim
from profan.synth.write import _Writer

__all__ = ["SynthParams", "generate"]


def generate(out: str | Path, params: SynthParams | None = None, **kw) -> dict:
    """Write a synthetic cluster under `out` (created) and return its ground truth."""
    p = params or SynthParams(**kw)
    if params is not None and kw:
        p = SynthParams(**{**asdict(params), **kw})
    if p.slow_link is not None:
        p.slow_link = tuple(p.slow_link)  # type: ignore[assignment]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sim = _Sim(p)
    sim.run()
    return _Writer(sim, out).write()
