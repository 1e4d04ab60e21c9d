"""``python -m profan.synth OUT --ranks 8 …``: write a synthetic cluster (see `profan.synth`).

Every option says what it changes and shows its default, so a test scenario can be built from ``--help`` alone
instead of from the source of `SynthParams`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, fields
from pathlib import Path

from profan.synth import SynthParams, generate
from profan.synth.model import RANKS_PER_NODE

# one entry per SynthParams field (a test holds the two in step)
HELP = {
    "ranks": "number of rank directories to write (a multiple of --tp)",
    "steps": "profiled training steps per rank",
    "first_step": "number of the first profiled step (ProfilerStep#N)",
    "layers": "transformer layers per step (attention, dense matmuls, an MoE block each)",
    "tp": "tensor-parallel size: blocks of this many consecutive ranks; the EP/DP groups take one rank of each",
    "experts_per_rank": "MoE experts held by each expert-parallel rank",
    "tokens": "tokens per rank per micro-batch",
    "hidden": "model hidden size (sets the matmul shapes)",
    "ffn": "expert FFN width",
    "topk": "experts each token is routed to",
    "seed": "random seed: the same seed and options write the same files",
    "jitter": "relative standard deviation of kernel durations",
    "dispatcher": "MoE token dispatch: alltoallv (hcom_alltoallv_ ops) or mc2 (MoeDistributeDispatch/Combine)",
    "straggler_rank": "inject a straggler on this rank",
    "straggler_kind": "straggler kind: compute (one op type runs longer) or host_gap (idle device, no work)",
    "straggler_op": "op type made slower on a compute straggler",
    "straggler_extra_us": "extra time per step on the straggler, µs",
    "straggler_layer": "host gap: the layer whose MoE block it precedes",
    "hot_expert": "global expert id that receives more tokens (expert imbalance)",
    "hot_factor": "routing weight of the hot expert relative to the others (1 = balanced)",
    "slow_link": "two ranks whose link is slow, e.g. 0,5",
    "slow_link_factor": "how many times slower the slow link transfers",
    "slow_kernel": "op type slowed on every rank: a regressed run for `profan compare`",
    "slow_kernel_factor": "how many times longer the slowed op type runs",
    "clock_skew_us": f"largest clock offset of a node ({RANKS_PER_NODE} ranks share a clock), µs",
    "trace": "write trace_view.json too (true/false)",
}


CHOICES = {"dispatcher": ("alltoallv", "mc2"), "straggler_kind": ("compute", "host_gap")}
NONE_MEANS = {"straggler_layer": "the middle layer"}  # what an option left unset does, where not "none"
METAVARS = {"slow_link": "A,B", "slow_kernel": "OP", "straggler_op": "OP", "trace": "BOOL"}


def _boolean(text: str) -> bool:
    """A misspelt true/false is refused rather than read as false (a silent change of scenario)."""
    words = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}
    if text.lower() not in words:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return words[text.lower()]


def _rank_pair(text: str) -> tuple[int, int]:
    try:
        a, b = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected two ranks like 0,5, got {text!r}") from None
    return a, b


def _flag_type(name: str, default):
    """The parser of one option's value: fields typed `X | None` take X."""
    if isinstance(default, bool):
        return _boolean
    if name == "slow_link":
        return _rank_pair
    if default is None:
        return str if name == "slow_kernel" else int
    return type(default)


def _metavar(name: str, default) -> str | None:
    if name in CHOICES:
        return None  # argparse lists the choices
    if name in METAVARS:
        return METAVARS[name]
    if name.endswith("_us"):
        return "US"
    return "X" if isinstance(default, float) else "N"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m profan.synth",
        description="Write a synthetic Ascend cluster (one *_ascend_pt folder per rank) with the faults asked "
        "for, and ground_truth.json beside it; print the injected faults as JSON.",
    )
    ap.add_argument("out", type=Path, help="folder to write the rank folders into (created)")
    for name, default in asdict(SynthParams()).items():
        shown = NONE_MEANS.get(name, "none") if default is None else str(default)
        shown = shown.lower() if isinstance(default, bool) else shown
        ap.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=_flag_type(name, default),
            default=default,
            choices=CHOICES.get(name),
            metavar=_metavar(name, default),
            help=f"{HELP[name]} (default: {shown})",
        )
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    truth = generate(args.out, **{f.name: getattr(args, f.name) for f in fields(SynthParams)})
    print(json.dumps({k: truth[k] for k in ("straggler", "expert_imbalance", "slow_link", "slow_kernel")}))


if __name__ == "__main__":
    main()
