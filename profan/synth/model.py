"""The synthetic cluster's model: its parameters, communication groups, expert routing, and a lock-step simulation
of one training step per rank (`_Sim`), as rows of kernels and ops with times. `profan.synth.write` turns the result
into the files torch_npu writes."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from profan.sources.ascend_text.meta import double_hash

RANKS_PER_NODE = 8
CUBE_FLOP_PER_US = 150e6  # ~150 TFLOP/s effective
VEC_BYTES_PER_US = 0.8e6  # ~0.8 TB/s effective
HCCS_GBPS = 20.0
RDMA_GBPS = 12.0


@dataclass
class SynthParams:
    ranks: int = 8
    steps: int = 2
    first_step: int = 1
    layers: int = 4
    tp: int = 1
    experts_per_rank: int = 2
    tokens: int = 4096  # tokens per rank per micro-batch
    hidden: int = 2048
    ffn: int = 1408  # expert FFN width
    topk: int = 2
    seed: int = 0
    jitter: float = 0.01  # relative sd of kernel durations
    dispatcher: str = "alltoallv"  # "alltoallv" (hcom_alltoallv_) or "mc2" (MoeDistributeDispatch/Combine)
    straggler_rank: int | None = None
    straggler_kind: str = "compute"  # "compute" | "host_gap"
    straggler_op: str = "FlashAttentionScore"  # op type made slower (compute straggler)
    straggler_extra_us: float = 5000.0  # extra time per step on the straggler
    straggler_layer: int | None = None  # host gap: before the MoE block of this layer (default: middle layer)
    hot_expert: int | None = None
    hot_factor: float = 1.0  # relative routing weight of the hot expert (others 1)
    slow_link: tuple[int, int] | None = None
    slow_link_factor: float = 4.0
    slow_kernel: str | None = None  # op type slowed on every rank (a "regressed run" for compare)
    slow_kernel_factor: float = 1.0
    clock_skew_us: float = 0.0  # max |clock offset| per node (ranks of one node share a clock)
    trace: bool = True  # write trace_view.json

    @property
    def experts(self) -> int:
        return self.ep * self.experts_per_rank

    @property
    def ep(self) -> int:
        return self.ranks // self.tp


@dataclass
class Group:
    hccl_name: str
    group_name: str  # default_group / dp / tp / exp
    ranks: list[int]

    @property
    def hash(self) -> int:
        return double_hash(self.hccl_name)


@dataclass
class Row:
    """One device task of one rank (compute kernel or HCCL op), in true (unskewed) time."""

    step: int
    name: str
    type: str
    core: str
    start: float
    dur: float
    shapes: str = ""
    dtypes: str = ""
    out_shapes: str = ""
    group: Group | None = None
    size_mb: float = 0.0
    transit_ms: float = 0.0
    wait_ms: float = 0.0
    count: int = 0
    links: dict[int, float] = field(default_factory=dict)  # peer -> transfer ms (collectives)


def build_groups(p: SynthParams) -> dict[str, list[Group]]:
    """world, tp blocks (consecutive ranks), dp blocks (same tp index); the EP group is the dp block."""
    if p.ranks % p.tp:
        raise ValueError("ranks must be a multiple of tp")
    n = 0

    def name() -> str:
        nonlocal n
        n += 1
        return f"group_name_{n - 1}"

    world = [Group(name(), "default_group", list(range(p.ranks)))]
    tp = [Group(name(), "tp", list(range(b * p.tp, (b + 1) * p.tp))) for b in range(p.ranks // p.tp)]
    dp = [Group(name(), "dp", list(range(i, p.ranks, p.tp))) for i in range(p.tp)]
    exp = [Group(name(), "exp", list(g.ranks)) for g in dp]
    return {"world": world, "tp": tp, "dp": dp, "exp": exp}


def group_of(groups: dict[str, list[Group]], kind: str, rank: int) -> Group:
    return next(g for g in groups[kind] if rank in g.ranks)


def expert_tokens(p: SynthParams, rng: random.Random) -> list[list[int]]:
    """Per layer, token copies routed to each expert (total preserved; hot expert weighted by hot_factor)."""
    total = p.ranks * p.tokens * p.topk // p.tp
    out = []
    for _ in range(p.layers):
        w = [(p.hot_factor if e == p.hot_expert else 1.0) * (1 + rng.gauss(0, 0.01)) for e in range(p.experts)]
        s = sum(w)
        out.append([round(total * x / s) for x in w])
    return out


class _Sim:
    """Lock-step simulation: every rank runs the same op list; a collective ends when its last member arrives
    plus the transfer time, so waiting shows up on the early ranks exactly as HCCL records it."""

    def __init__(self, p: SynthParams):
        self.p = p
        self.rng = random.Random(p.seed)
        self.groups = build_groups(p)
        self.t = [0.0] * p.ranks
        self.rows: list[list[Row]] = [[] for _ in range(p.ranks)]
        self.seq: dict[str, int] = {}
        self.tokens = expert_tokens(p, self.rng)
        self.step_bounds: dict[int, tuple[float, float]] = {}

    def jit(self) -> float:
        return max(0.5, 1 + self.rng.gauss(0, self.p.jitter))

    def kernel(
        self,
        step: int,
        op: str,
        name: str,
        core: str,
        base_us: float | list[float],
        shapes: str,
        dtypes: str,
        out_shapes: str,
        extra: dict[int, float] | None = None,
    ) -> None:
        p = self.p
        for r in range(p.ranks):
            base = base_us[r] if isinstance(base_us, list) else base_us
            d = base * self.jit()
            if p.slow_kernel and op == p.slow_kernel:
                d *= p.slow_kernel_factor
            if extra and r in extra:
                d += extra[r]
            start = self.t[r] + 1.0 + abs(self.rng.gauss(0, 0.3))
            self.rows[r].append(Row(step, name, op, core, start, d, shapes, dtypes, out_shapes))
            self.t[r] = start + d

    def gap(self, rank: int, us: float) -> None:
        self.t[rank] += us

    def collective(self, step: int, op: str, kind: str, size_mb: list[float] | float, dtype: str = "BF16") -> None:
        p = self.p
        done: set[int] = set()
        for r in range(p.ranks):
            if r in done:
                continue
            g = group_of(self.groups, kind, r)
            done.update(g.ranks)
            idx = self.seq.get(g.hccl_name, 0) + 1
            self.seq[g.hccl_name] = idx
            name = f"hcom_{op}__{str(g.hash)[-3:]}_{idx}_1"
            arrive = {m: self.t[m] + 2.0 + abs(self.rng.gauss(0, 0.5)) for m in g.ranks}
            links: dict[int, dict[int, float]] = {}
            transfer = 0.0
            for m in g.ranks:
                sz = size_mb[m] if isinstance(size_mb, list) else size_mb
                peers = [q for q in g.ranks if q != m]
                per_link = sz / max(1, len(peers))
                links[m] = {}
                for q in peers:
                    bw = HCCS_GBPS if m // RANKS_PER_NODE == q // RANKS_PER_NODE else RDMA_GBPS
                    if p.slow_link and {m, q} == set(p.slow_link):
                        bw /= p.slow_link_factor
                    links[m][q] = per_link / bw  # MB / (GB/s) = ms
                    transfer = max(transfer, links[m][q])
            transfer_us = 15.0 + transfer * 1000.0
            end = max(arrive.values()) + transfer_us
            last = max(arrive.values())
            for m in g.ranks:
                sz = size_mb[m] if isinstance(size_mb, list) else size_mb
                self.rows[m].append(
                    Row(
                        step,
                        name,
                        f"hcom_{op}_",
                        "COMMUNICATION",
                        arrive[m],
                        end - arrive[m],
                        group=g,
                        size_mb=sz,
                        transit_ms=transfer_us / 1000.0,
                        wait_ms=(last - arrive[m]) / 1000.0,
                        count=int(sz * 1e6 / 2),
                        links=links[m],
                    )
                )
                self.t[m] = end

    # -- the model ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        p = self.p
        T, H, F, E = p.tokens // p.tp, p.hidden, p.ffn, p.experts_per_rank
        for s in range(p.first_step, p.first_step + p.steps):
            start = max(self.t) + 300.0
            self.t = [start + 50.0] * p.ranks
            self.step_bounds[s] = (start, 0.0)
            straggle = self._straggle_extra(s)
            for layer in range(p.layers):
                self._forward_layer(s, layer, T, H, F, E, straggle)
            for layer in reversed(range(p.layers)):
                self._backward_layer(s, layer, T, H, F, E, straggle)
            grads_mb = p.layers * (4 * H * H + E * 3 * H * F) * 2 / 1e6 / p.tp
            self.collective(s, "reduceScatter", "dp", grads_mb)
            self.kernel(
                s,
                "ApplyAdamWV2",
                "aclnnApplyAdamWV2_ApplyAdamWV2_ApplyAdamWV2",
                "AI_VECTOR_CORE",
                grads_mb * 1e6 * 8 / max(1, p.ep) / VEC_BYTES_PER_US,
                f'"{int(grads_mb * 5e5)}"',
                "FLOAT",
                f'"{int(grads_mb * 5e5)}"',
            )
            self.collective(s, "allGather", "dp", grads_mb)
            self.collective(s, "allReduce", "world", 0.000004, "FP32")
            self.step_bounds[s] = (start, max(self.t) + 100.0)

    def _straggle_extra(self, step: int) -> dict:
        """Compute straggler: the extra time per step, spread evenly over the instances of the slowed op."""
        p = self.p
        if p.straggler_rank is None or p.straggler_kind != "compute":
            return {}
        if p.straggler_op not in INSTANCES_PER_LAYER:
            raise ValueError(f"straggler_op must be one of {', '.join(INSTANCES_PER_LAYER)}")
        n = p.layers * INSTANCES_PER_LAYER[p.straggler_op]
        return {p.straggler_op: {p.straggler_rank: p.straggler_extra_us / n}}

    def _forward_layer(self, s, layer, T, H, F, E, straggle) -> None:
        """Attention, then (after a host gap on a host-gap straggler's chosen layer) the MoE block."""
        p = self.p
        self._attention_forward(s, T, H, straggle)
        if (
            p.straggler_rank is not None
            and p.straggler_kind == "host_gap"
            and layer == (p.straggler_layer if p.straggler_layer is not None else p.layers // 2)
        ):
            self.gap(p.straggler_rank, p.straggler_extra_us)
        self._moe_forward(s, layer, T, H, F, E, straggle)

    def _attention_forward(self, s, T, H, straggle) -> None:
        """Norm, QKV projection, flash attention, output projection, and the TP all-reduce when TP > 1."""
        self._rms_norm(s, T, H, straggle)
        self._matmul(s, 2 * T * H * 3 * H / CUBE_FLOP_PER_US, f'"{T},{H};{3 * H},{H}"', f'"{T},{3 * H}"', straggle)
        self.kernel(
            s,
            "FlashAttentionScore",
            "aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore",
            "MIX_AIC",
            4 * T * T * H / 2 / CUBE_FLOP_PER_US,
            f'"1,{T},{H};1,{T},{H};1,{T},{H}"',
            "DT_BF16;DT_BF16;DT_BF16",
            f'"1,{T},{H}"',
            straggle.get("FlashAttentionScore"),
        )
        self._matmul(s, 2 * T * H * H / CUBE_FLOP_PER_US, f'"{T},{H};{H},{H}"', f'"{T},{H}"', straggle)
        if self.p.tp > 1:
            self.collective(s, "allReduce", "tp", T * H * 2 / 1e6)

    def _moe_forward(self, s, layer, T, H, F, E, straggle) -> None:
        """Norm, router and gating, routing, dispatch, the experts, combine and finalize routing."""
        p = self.p
        k = self.kernel
        self._rms_norm(s, T, H, straggle)
        router_us = max(8.0, 2 * T * H * p.experts / CUBE_FLOP_PER_US)
        self._matmul(s, router_us, f'"{T},{H};{p.experts},{H}"', f'"{T},{p.experts}"', None)
        k(
            s,
            "MoeGatingTopKSoftmax",
            "aclnnMoeGatingTopKSoftmax_MoeGatingTopKSoftmax_MoeGatingTopKSoftmax",
            "AI_VECTOR_CORE",
            18.0,
            f'"{T},{p.experts};;"',
            "DT_BF16;BOOL;",
            f'"{T},{p.topk};{T},{p.topk}"',
        )
        k(
            s,
            "MoeInitRoutingV2",
            "aclnnMoeInitRoutingV2_MoeInitRoutingV2_MoeInitRoutingV2",
            "AI_VECTOR_CORE",
            T * p.topk * H * 2 * 2 / VEC_BYTES_PER_US,
            f'"{T},{H};{T},{p.topk}"',
            "DT_BF16;INT32",
            f'"{T * p.topk},{H};{T * p.topk};{p.experts}"',
        )
        recv = self._recv_tokens(layer)
        self._dispatch(s, recv, T, H, counts=True)
        self._experts(s, recv, H, F, E, straggle)
        self._combine(s, recv, T, H)
        k(
            s,
            "MoeFinalizeRoutingV2",
            "aclnnMoeFinalizeRoutingV2_MoeFinalizeRoutingV2_MoeFinalizeRoutingV2",
            "AI_VECTOR_CORE",
            T * p.topk * H * 2 * 2 / VEC_BYTES_PER_US,
            f'"{T * p.topk},{H};{T},{H};{T},{p.topk};{T},{p.topk}"',
            "DT_BF16;DT_BF16;DT_BF16;INT32",
            f'"{T},{H}"',
        )

    def _rms_norm(self, s, T, H, straggle) -> None:
        self.kernel(
            s,
            "RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            T * H * 4 / VEC_BYTES_PER_US,
            f'"{T},{H};{H}"',
            "DT_BF16;DT_BF16",
            f'"{T},{H};{T},1"',
            straggle.get("RmsNorm"),
        )

    def _rms_norm_grad(self, s, T, H, straggle) -> None:
        self.kernel(
            s,
            "RmsNormGrad",
            "RmsNormGrad",
            "AI_VECTOR_CORE",
            T * H * 6 / VEC_BYTES_PER_US,
            f'"{T},{H};{T},{H};{T},1;{H}"',
            "DT_BF16;DT_BF16;FLOAT;DT_BF16",
            f'"{T},{H};{H}"',
            straggle.get("RmsNormGrad"),
        )

    def _matmul(self, s, us: float, shapes: str, out_shapes: str, straggle: dict | None) -> None:
        """A dense MatMulV3 of ``us`` µs; ``straggle`` None: never slowed by a compute straggler (the router)."""
        self.kernel(
            s,
            "MatMulV3",
            "aclnnMatmul_MatMulV3Common_MatMulV3",
            "AI_CORE",
            us,
            shapes,
            "DT_BF16;DT_BF16",
            out_shapes,
            straggle.get("MatMulV3") if straggle is not None else None,
        )

    def _dispatch(self, s, recv, T, H, counts: bool) -> None:
        """Tokens to their experts' ranks: MoeDistributeDispatch (mc2), or an all-to-all — after an all-gather of
        the per-expert counts when ``counts`` (the forward pass; the backward reuses them)."""
        p = self.p
        if p.dispatcher == "mc2":
            self.kernel(
                s,
                "MoeDistributeDispatch",
                "aclnnMoeDistributeDispatch_MoeDistributeDispatch_MoeDistributeDispatch",
                "AI_VECTOR_CORE",
                self._mc2_us(recv, H),
                f'"{T},{H};{T},{p.topk}"',
                "DT_BF16;INT32",
                f'"{max(recv)},{H}"',
            )
            return
        if counts:
            self.collective(s, "allGather", "exp", p.experts * 8 / 1e6, "INT64")
        self.collective(s, "alltoallv", "exp", [n * H * 2 / 1e6 for n in recv])

    def _combine(self, s, recv, T, H) -> None:
        """Expert outputs back to their tokens' ranks: MoeDistributeCombine (mc2), or an all-to-all."""
        if self.p.dispatcher == "mc2":
            self.kernel(
                s,
                "MoeDistributeCombine",
                "aclnnMoeDistributeCombine_MoeDistributeCombine_MoeDistributeCombine",
                "AI_VECTOR_CORE",
                self._mc2_us(recv, H),
                f'"{max(recv)},{H};{T},{self.p.topk}"',
                "DT_BF16;INT32",
                f'"{T},{H}"',
            )
            return
        self.collective(s, "alltoallv", "exp", [n * H * 2 / 1e6 for n in recv])

    @staticmethod
    def _mc2_us(recv: list[int], H: int) -> list[float]:
        """An mc2 kernel's time per rank: a fixed start plus its tokens' bytes over HCCS."""
        return [40.0 + n * H * 2 / 1e6 / HCCS_GBPS * 1000 for n in recv]

    def _recv_tokens(self, layer: int) -> list[int]:
        """Tokens each rank's local experts receive in this layer (the x rows of its GroupedMatmul)."""
        p = self.p
        per_e = self.tokens[layer]
        out = []
        for r in range(p.ranks):
            local = group_of(self.groups, "exp", r).ranks.index(r)
            out.append(sum(per_e[local * p.experts_per_rank : (local + 1) * p.experts_per_rank]))
        return out

    def _experts(self, s, recv, H, F, E, straggle, grad: bool = False) -> None:
        k = self.kernel
        gmm = "aclnnGroupedMatmulV4_GroupedMatmul_GroupedMatmul"
        fc1 = [2 * n * H * 2 * F / CUBE_FLOP_PER_US + 12.0 for n in recv]
        fc2 = [2 * n * F * H / CUBE_FLOP_PER_US + 12.0 for n in recv]
        dt = "DT_BF16;DT_BF16;FLOAT;UINT64;FLOAT;FLOAT16;FLOAT16;INT64"
        extra = straggle.get("GroupedMatmul")
        if not grad:
            k(s, "GroupedMatmul", gmm, "MIX_AIC", fc1, _gmm_shapes(recv, H, 2 * F, E), dt, _out(recv, 2 * F), extra)
            k(
                s,
                "SwiGlu",
                "SwiGlu",
                "AI_VECTOR_CORE",
                [n * 2 * F * 2 * 2 / VEC_BYTES_PER_US for n in recv],
                _per_rank(recv, lambda n: f'"{n},{2 * F}"'),
                "DT_BF16",
                _out(recv, F),
                straggle.get("SwiGlu"),
            )
            k(s, "GroupedMatmul", gmm, "MIX_AIC", fc2, _gmm_shapes(recv, F, H, E), dt, _out(recv, H), extra)
            return
        k(s, "GroupedMatmul", gmm, "MIX_AIC", fc2, _gmm_shapes(recv, H, F, E), dt, _out(recv, F), extra)
        k(
            s,
            "SwiGluGrad",
            "SwiGluGrad",
            "AI_VECTOR_CORE",
            [n * 2 * F * 2 * 3 / VEC_BYTES_PER_US for n in recv],
            _per_rank(recv, lambda n: f'"{n},{F};{n},{2 * F}"'),
            "DT_BF16;DT_BF16",
            _out(recv, 2 * F),
            straggle.get("SwiGluGrad"),
        )
        k(s, "GroupedMatmul", gmm, "MIX_AIC", fc1, _gmm_shapes(recv, 2 * F, H, E), dt, _out(recv, H), extra)
        # weight gradients: x^T of shape [H, tokens] — the first dim is not tokens (ascend-moe-ops §1)
        k(
            s,
            "GroupedMatmul",
            gmm,
            "MIX_AIC",
            fc1,
            _per_rank(recv, lambda n: f'"{H},{n};{n},{2 * F};;;;;;{E}"'),
            dt,
            f'"{E},{H},{2 * F}"',
            extra,
        )
        k(
            s,
            "GroupedMatmul",
            gmm,
            "MIX_AIC",
            fc2,
            _per_rank(recv, lambda n: f'"{F},{n};{n},{H};;;;;;{E}"'),
            dt,
            f'"{E},{F},{H}"',
            extra,
        )

    def _backward_layer(self, s, layer, T, H, F, E, straggle) -> None:
        """The forward layer in reverse: the MoE block's gradients, then attention's."""
        p = self.p
        recv = self._recv_tokens(layer)
        self.kernel(
            s,
            "MoeFinalizeRoutingV2Grad",
            "aclnnMoeFinalizeRoutingV2Grad_MoeFinalizeRoutingV2Grad_MoeFinalizeRoutingV2Grad",
            "AI_VECTOR_CORE",
            T * p.topk * H * 2 * 2 / VEC_BYTES_PER_US,
            f'"{T},{H};{T * p.topk},{H}"',
            "DT_BF16;DT_BF16",
            f'"{T * p.topk},{H}"',
        )
        self._dispatch(s, recv, T, H, counts=False)
        self._experts(s, recv, H, F, E, straggle, grad=True)
        self._combine(s, recv, T, H)
        self._rms_norm_grad(s, T, H, straggle)
        self._attention_backward(s, T, H, straggle)
        self._rms_norm_grad(s, T, H, straggle)

    def _attention_backward(self, s, T, H, straggle) -> None:
        """TP all-reduce when TP > 1, output projection's two gradient matmuls, flash attention's gradient, and
        the QKV projection's two."""
        if self.p.tp > 1:
            self.collective(s, "allReduce", "tp", T * H * 2 / 1e6)
        for _ in range(2):
            self._matmul(s, 2 * T * H * H / CUBE_FLOP_PER_US, f'"{T},{H};{H},{H}"', f'"{T},{H}"', straggle)
        self.kernel(
            s,
            "FlashAttentionScoreGrad",
            "aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
            "MIX_AIC",
            2.5 * 4 * T * T * H / 2 / CUBE_FLOP_PER_US,
            f'"1,{T},{H};1,{T},{H};1,{T},{H};1,{T},{H}"',
            "DT_BF16;DT_BF16;DT_BF16;DT_BF16",
            f'"1,{T},{H}"',
            straggle.get("FlashAttentionScoreGrad"),
        )
        for _ in range(2):
            self._matmul(s, 2 * T * H * 3 * H / CUBE_FLOP_PER_US, f'"{T},{3 * H};{3 * H},{H}"', f'"{T},{H}"', straggle)


# instances per layer of the ops a compute straggler can slow (router MatMulV3 excluded)
INSTANCES_PER_LAYER = {
    "FlashAttentionScore": 1,
    "FlashAttentionScoreGrad": 1,
    "RmsNorm": 2,
    "RmsNormGrad": 2,
    "SwiGlu": 1,
    "SwiGluGrad": 1,
    "MatMulV3": 6,
    "GroupedMatmul": 6,
}


def _per_rank(recv: list[int], fmt) -> list[str]:
    return [fmt(n) for n in recv]


def _gmm_shapes(recv: list[int], k_in: int, n_out: int, e: int) -> list[str]:
    """x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, group_list (observed layout)."""
    return [f'"{n},{k_in};{e},{k_in},{n_out};;;;;;{e}"' for n in recv]


def _out(recv: list[int], width: int) -> list[str]:
    return [f'"{n},{width}"' for n in recv]
