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


@dataclass(frozen=True)
class Launch:
    """One compute kernel as every rank launches it: op type, kernel name, core, and its input shapes, dtypes and
    output shapes as kernel_details writes them (a shape may be a list: one per rank)."""

    op: str
    name: str
    core: str
    shapes: str | list[str]
    dtypes: str
    out_shapes: str | list[str]


@dataclass(frozen=True)
class LayerPass:
    """One layer of one step as the simulation runs it: the step, the layer's index, its shape on each rank
    (tokens per TP rank, hidden width, expert FFN width, experts per rank) and the compute straggler's extra
    time per op type (`_Sim._straggle_extra`)."""

    step: int
    index: int
    tokens: int
    hidden: int
    ffn: int
    local_experts: int
    straggle: dict


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
    tp = [Group(name(), "tp", list(range(index * p.tp, (index + 1) * p.tp))) for index in range(p.ranks // p.tp)]
    dp = [Group(name(), "dp", list(range(i, p.ranks, p.tp))) for i in range(p.tp)]
    exp = [Group(name(), "exp", list(g.ranks)) for g in dp]
    return {"world": world, "tp": tp, "dp": dp, "exp": exp}


def group_of(groups: dict[str, list[Group]], kind: str, rank: int) -> Group:
    return next(group for group in groups[kind] if rank in group.ranks)


def expert_tokens(p: SynthParams, rng: random.Random) -> list[list[int]]:
    """Per layer, token copies routed to each expert (total preserved; hot expert weighted by hot_factor)."""
    total = p.ranks * p.tokens * p.topk // p.tp
    out = []
    for _ in range(p.layers):
        w = [(p.hot_factor if index == p.hot_expert else 1.0) * (1 + rng.gauss(0, 0.01)) for index in range(p.experts)]
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
        self, step: int, launch: Launch, base_us: float | list[float], extra: dict[int, float] | None = None
    ) -> None:
        """``launch`` on every rank: ``base_us`` (one for all, or one per rank) times a jitter, slowed on every rank
        when it is the run's slow kernel, plus ``extra`` µs on the ranks it names."""
        params = self.p
        for rank in range(params.ranks):
            base = base_us[rank] if isinstance(base_us, list) else base_us
            dur = base * self.jit()
            if params.slow_kernel and launch.op == params.slow_kernel:
                dur *= params.slow_kernel_factor
            if extra and rank in extra:
                dur += extra[rank]
            start = self.t[rank] + 1.0 + abs(self.rng.gauss(0, 0.3))
            self.rows[rank].append(
                Row(
                    step,
                    launch.name,
                    launch.op,
                    launch.core,
                    start,
                    dur,
                    launch.shapes,
                    launch.dtypes,
                    launch.out_shapes,
                )
            )
            self.t[rank] = start + dur

    def gap(self, rank: int, us: float) -> None:
        self.t[rank] += us

    def collective(self, step: int, op: str, kind: str, size_mb: list[float] | float, dtype: str = "BF16") -> None:
        p = self.p
        done: set[int] = set()
        for index in range(p.ranks):
            if index in done:
                continue
            g = group_of(self.groups, kind, index)
            done.update(g.ranks)
            idx = self.seq.get(g.hccl_name, 0) + 1
            self.seq[g.hccl_name] = idx
            name = f"hcom_{op}__{str(g.hash)[-3:]}_{idx}_1"
            arrive = {rank: self.t[rank] + 2.0 + abs(self.rng.gauss(0, 0.5)) for rank in g.ranks}
            links: dict[int, dict[int, float]] = {}
            transfer = 0.0
            for rank in g.ranks:
                sz = size_mb[rank] if isinstance(size_mb, list) else size_mb
                peers = [peer for peer in g.ranks if peer != rank]
                per_link = sz / max(1, len(peers))
                links[rank] = {}
                for peer in peers:
                    bw = HCCS_GBPS if rank // RANKS_PER_NODE == peer // RANKS_PER_NODE else RDMA_GBPS
                    if p.slow_link and {rank, peer} == set(p.slow_link):
                        bw /= p.slow_link_factor
                    links[rank][peer] = per_link / bw  # MB / (GB/s) = ms
                    transfer = max(transfer, links[rank][peer])
            transfer_us = 15.0 + transfer * 1000.0
            end = max(arrive.values()) + transfer_us
            last = max(arrive.values())
            for rank in g.ranks:
                sz = size_mb[rank] if isinstance(size_mb, list) else size_mb
                self.rows[rank].append(
                    Row(
                        step,
                        name,
                        f"hcom_{op}_",
                        "COMMUNICATION",
                        arrive[rank],
                        end - arrive[rank],
                        group=g,
                        size_mb=sz,
                        transit_ms=transfer_us / 1000.0,
                        wait_ms=(last - arrive[rank]) / 1000.0,
                        count=int(sz * 1e6 / 2),
                        links=links[rank],
                    )
                )
                self.t[rank] = end

    # -- the model ---------------------------------------------------------------------------------------------

    def run(self) -> None:
        params = self.p
        hidden, ffn, local_experts = params.hidden, params.ffn, params.experts_per_rank
        for step in range(params.first_step, params.first_step + params.steps):
            start = max(self.t) + 300.0
            self.t = [start + 50.0] * params.ranks
            self.step_bounds[step] = (start, 0.0)
            straggle = self._straggle_extra(step)
            shape = (params.tokens // params.tp, hidden, ffn, local_experts)
            for index in range(params.layers):
                self._forward_layer(LayerPass(step, index, *shape, straggle))
            for index in reversed(range(params.layers)):
                self._backward_layer(LayerPass(step, index, *shape, straggle))
            grads_mb = params.layers * (4 * hidden * hidden + local_experts * 3 * hidden * ffn) * 2 / 1e6 / params.tp
            self.collective(step, "reduceScatter", "dp", grads_mb)
            elements = f'"{int(grads_mb * 5e5)}"'
            adam = Launch(
                "ApplyAdamWV2",
                "aclnnApplyAdamWV2_ApplyAdamWV2_ApplyAdamWV2",
                "AI_VECTOR_CORE",
                elements,
                "FLOAT",
                elements,
            )
            self.kernel(step, adam, grads_mb * 1e6 * 8 / max(1, params.ep) / VEC_BYTES_PER_US)
            self.collective(step, "allGather", "dp", grads_mb)
            self.collective(step, "allReduce", "world", 0.000004, "FP32")
            self.step_bounds[step] = (start, max(self.t) + 100.0)

    def _straggle_extra(self, step: int) -> dict:
        """Compute straggler: the extra time per step, spread evenly over the instances of the slowed op."""
        p = self.p
        if p.straggler_rank is None or p.straggler_kind != "compute":
            return {}
        if p.straggler_op not in INSTANCES_PER_LAYER:
            raise ValueError(f"straggler_op must be one of {', '.join(INSTANCES_PER_LAYER)}")
        n = p.layers * INSTANCES_PER_LAYER[p.straggler_op]
        return {p.straggler_op: {p.straggler_rank: p.straggler_extra_us / n}}

    def _forward_layer(self, layer: LayerPass) -> None:
        """Attention, then (after a host gap on a host-gap straggler's chosen layer) the MoE block."""
        params = self.p
        self._attention_forward(layer)
        gap_layer = params.straggler_layer if params.straggler_layer is not None else params.layers // 2
        if params.straggler_rank is not None and params.straggler_kind == "host_gap" and layer.index == gap_layer:
            self.gap(params.straggler_rank, params.straggler_extra_us)
        self._moe_forward(layer)

    def _attention_forward(self, layer: LayerPass) -> None:
        """Norm, QKV projection, flash attention, output projection, and the TP all-reduce when TP > 1."""
        tokens, hidden = layer.tokens, layer.hidden
        self._rms_norm(layer)
        qkv_us = 2 * tokens * hidden * 3 * hidden / CUBE_FLOP_PER_US
        self._matmul(layer, qkv_us, f'"{tokens},{hidden};{3 * hidden},{hidden}"', f'"{tokens},{3 * hidden}"')
        flash = Launch(
            "FlashAttentionScore",
            "aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore",
            "MIX_AIC",
            f'"1,{tokens},{hidden};1,{tokens},{hidden};1,{tokens},{hidden}"',
            "DT_BF16;DT_BF16;DT_BF16",
            f'"1,{tokens},{hidden}"',
        )
        flash_us = 4 * tokens * tokens * hidden / 2 / CUBE_FLOP_PER_US
        self.kernel(layer.step, flash, flash_us, layer.straggle.get("FlashAttentionScore"))
        out_us = 2 * tokens * hidden * hidden / CUBE_FLOP_PER_US
        self._matmul(layer, out_us, f'"{tokens},{hidden};{hidden},{hidden}"', f'"{tokens},{hidden}"')
        if self.p.tp > 1:
            self.collective(layer.step, "allReduce", "tp", tokens * hidden * 2 / 1e6)

    def _moe_forward(self, layer: LayerPass) -> None:
        """Norm, router and gating, routing, dispatch, the experts, combine and finalize routing."""
        params = self.p
        tokens, hidden, experts, topk = layer.tokens, layer.hidden, params.experts, params.topk
        self._rms_norm(layer)
        router_us = max(8.0, 2 * tokens * hidden * experts / CUBE_FLOP_PER_US)
        self._matmul(layer, router_us, f'"{tokens},{hidden};{experts},{hidden}"', f'"{tokens},{experts}"', False)
        gating = Launch(
            "MoeGatingTopKSoftmax",
            "aclnnMoeGatingTopKSoftmax_MoeGatingTopKSoftmax_MoeGatingTopKSoftmax",
            "AI_VECTOR_CORE",
            f'"{tokens},{experts};;"',
            "DT_BF16;BOOL;",
            f'"{tokens},{topk};{tokens},{topk}"',
        )
        self.kernel(layer.step, gating, 18.0)
        routing = Launch(
            "MoeInitRoutingV2",
            "aclnnMoeInitRoutingV2_MoeInitRoutingV2_MoeInitRoutingV2",
            "AI_VECTOR_CORE",
            f'"{tokens},{hidden};{tokens},{topk}"',
            "DT_BF16;INT32",
            f'"{tokens * topk},{hidden};{tokens * topk};{experts}"',
        )
        routing_us = tokens * topk * hidden * 2 * 2 / VEC_BYTES_PER_US
        self.kernel(layer.step, routing, routing_us)
        recv = self._recv_tokens(layer.index)
        self._dispatch(layer, recv, counts=True)
        self._experts(layer, recv)
        self._combine(layer, recv)
        finalize = Launch(
            "MoeFinalizeRoutingV2",
            "aclnnMoeFinalizeRoutingV2_MoeFinalizeRoutingV2_MoeFinalizeRoutingV2",
            "AI_VECTOR_CORE",
            f'"{tokens * topk},{hidden};{tokens},{hidden};{tokens},{topk};{tokens},{topk}"',
            "DT_BF16;DT_BF16;DT_BF16;INT32",
            f'"{tokens},{hidden}"',
        )
        self.kernel(layer.step, finalize, routing_us)

    def _rms_norm(self, layer: LayerPass) -> None:
        tokens, hidden = layer.tokens, layer.hidden
        norm = Launch(
            "RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            f'"{tokens},{hidden};{hidden}"',
            "DT_BF16;DT_BF16",
            f'"{tokens},{hidden};{tokens},1"',
        )
        self.kernel(layer.step, norm, tokens * hidden * 4 / VEC_BYTES_PER_US, layer.straggle.get("RmsNorm"))

    def _rms_norm_grad(self, layer: LayerPass) -> None:
        tokens, hidden = layer.tokens, layer.hidden
        grad = Launch(
            "RmsNormGrad",
            "RmsNormGrad",
            "AI_VECTOR_CORE",
            f'"{tokens},{hidden};{tokens},{hidden};{tokens},1;{hidden}"',
            "DT_BF16;DT_BF16;FLOAT;DT_BF16",
            f'"{tokens},{hidden};{hidden}"',
        )
        self.kernel(layer.step, grad, tokens * hidden * 6 / VEC_BYTES_PER_US, layer.straggle.get("RmsNormGrad"))

    def _matmul(self, layer: LayerPass, us: float, shapes: str, out_shapes: str, slowed: bool = True) -> None:
        """A dense MatMulV3 of ``us`` µs; not ``slowed``: never slowed by a compute straggler (the router)."""
        matmul = Launch(
            "MatMulV3", "aclnnMatmul_MatMulV3Common_MatMulV3", "AI_CORE", shapes, "DT_BF16;DT_BF16", out_shapes
        )
        self.kernel(layer.step, matmul, us, layer.straggle.get("MatMulV3") if slowed else None)

    def _dispatch(self, layer: LayerPass, recv: list[int], counts: bool) -> None:
        """Tokens to their experts' ranks: MoeDistributeDispatch (mc2), or an all-to-all — after an all-gather of
        the per-expert counts when ``counts`` (the forward pass; the backward reuses them)."""
        params = self.p
        tokens, hidden = layer.tokens, layer.hidden
        if params.dispatcher == "mc2":
            dispatch = Launch(
                "MoeDistributeDispatch",
                "aclnnMoeDistributeDispatch_MoeDistributeDispatch_MoeDistributeDispatch",
                "AI_VECTOR_CORE",
                f'"{tokens},{hidden};{tokens},{params.topk}"',
                "DT_BF16;INT32",
                f'"{max(recv)},{hidden}"',
            )
            self.kernel(layer.step, dispatch, self._mc2_us(recv, hidden))
            return
        if counts:
            self.collective(layer.step, "allGather", "exp", params.experts * 8 / 1e6, "INT64")
        self.collective(layer.step, "alltoallv", "exp", [n * hidden * 2 / 1e6 for n in recv])

    def _combine(self, layer: LayerPass, recv: list[int]) -> None:
        """Expert outputs back to their tokens' ranks: MoeDistributeCombine (mc2), or an all-to-all."""
        tokens, hidden = layer.tokens, layer.hidden
        if self.p.dispatcher == "mc2":
            combine = Launch(
                "MoeDistributeCombine",
                "aclnnMoeDistributeCombine_MoeDistributeCombine_MoeDistributeCombine",
                "AI_VECTOR_CORE",
                f'"{max(recv)},{hidden};{tokens},{self.p.topk}"',
                "DT_BF16;INT32",
                f'"{tokens},{hidden}"',
            )
            self.kernel(layer.step, combine, self._mc2_us(recv, hidden))
            return
        self.collective(layer.step, "alltoallv", "exp", [n * hidden * 2 / 1e6 for n in recv])

    @staticmethod
    def _mc2_us(recv: list[int], hidden: int) -> list[float]:
        """An mc2 kernel's time per rank: a fixed start plus its tokens' bytes over HCCS."""
        return [40.0 + n * hidden * 2 / 1e6 / HCCS_GBPS * 1000 for n in recv]

    def _recv_tokens(self, layer: int) -> list[int]:
        """Tokens each rank's local experts receive in this layer (the x rows of its GroupedMatmul)."""
        p = self.p
        per_e = self.tokens[layer]
        out = []
        for index in range(p.ranks):
            local = group_of(self.groups, "exp", index).ranks.index(index)
            out.append(sum(per_e[local * p.experts_per_rank : (local + 1) * p.experts_per_rank]))
        return out

    def _experts(self, layer: LayerPass, recv: list[int], grad: bool = False) -> None:
        """The local experts' GroupedMatmuls around SwiGlu; with ``grad``, their gradients: the input gradients
        around SwiGluGrad, then the two weight gradients."""
        hidden, ffn, local_experts = layer.hidden, layer.ffn, layer.local_experts
        fc1 = [2 * n * hidden * 2 * ffn / CUBE_FLOP_PER_US + 12.0 for n in recv]
        fc2 = [2 * n * ffn * hidden / CUBE_FLOP_PER_US + 12.0 for n in recv]
        extra = layer.straggle.get("GroupedMatmul")

        def grouped(us: list[float], shapes: list[str] | str, out_shapes: list[str] | str) -> None:
            self.kernel(layer.step, _grouped_matmul(shapes, out_shapes), us, extra)

        if not grad:
            grouped(fc1, _gmm_shapes(recv, hidden, 2 * ffn, local_experts), _out(recv, 2 * ffn))
            swiglu = Launch(
                "SwiGlu",
                "SwiGlu",
                "AI_VECTOR_CORE",
                _per_rank(recv, lambda n: f'"{n},{2 * ffn}"'),
                "DT_BF16",
                _out(recv, ffn),
            )
            swiglu_us = [n * 2 * ffn * 2 * 2 / VEC_BYTES_PER_US for n in recv]
            self.kernel(layer.step, swiglu, swiglu_us, layer.straggle.get("SwiGlu"))
            grouped(fc2, _gmm_shapes(recv, ffn, hidden, local_experts), _out(recv, hidden))
            return
        grouped(fc2, _gmm_shapes(recv, hidden, ffn, local_experts), _out(recv, ffn))
        swiglu_grad = Launch(
            "SwiGluGrad",
            "SwiGluGrad",
            "AI_VECTOR_CORE",
            _per_rank(recv, lambda n: f'"{n},{ffn};{n},{2 * ffn}"'),
            "DT_BF16;DT_BF16",
            _out(recv, 2 * ffn),
        )
        swiglu_grad_us = [n * 2 * ffn * 2 * 3 / VEC_BYTES_PER_US for n in recv]
        self.kernel(layer.step, swiglu_grad, swiglu_grad_us, layer.straggle.get("SwiGluGrad"))
        grouped(fc1, _gmm_shapes(recv, 2 * ffn, hidden, local_experts), _out(recv, hidden))
        # weight gradients: x^T of shape [H, tokens] — the first dim is not tokens (ascend-moe-ops §1)
        fc1_weights = _per_rank(recv, lambda n: f'"{hidden},{n};{n},{2 * ffn};;;;;;{local_experts}"')
        grouped(fc1, fc1_weights, f'"{local_experts},{hidden},{2 * ffn}"')
        fc2_weights = _per_rank(recv, lambda n: f'"{ffn},{n};{n},{hidden};;;;;;{local_experts}"')
        grouped(fc2, fc2_weights, f'"{local_experts},{ffn},{hidden}"')

    def _backward_layer(self, layer: LayerPass) -> None:
        """The forward layer in reverse: the MoE block's gradients, then attention's."""
        tokens, hidden, topk = layer.tokens, layer.hidden, self.p.topk
        recv = self._recv_tokens(layer.index)
        finalize_grad = Launch(
            "MoeFinalizeRoutingV2Grad",
            "aclnnMoeFinalizeRoutingV2Grad_MoeFinalizeRoutingV2Grad_MoeFinalizeRoutingV2Grad",
            "AI_VECTOR_CORE",
            f'"{tokens},{hidden};{tokens * topk},{hidden}"',
            "DT_BF16;DT_BF16",
            f'"{tokens * topk},{hidden}"',
        )
        self.kernel(layer.step, finalize_grad, tokens * topk * hidden * 2 * 2 / VEC_BYTES_PER_US)
        self._dispatch(layer, recv, counts=False)
        self._experts(layer, recv, grad=True)
        self._combine(layer, recv)
        self._rms_norm_grad(layer)
        self._attention_backward(layer)
        self._rms_norm_grad(layer)

    def _attention_backward(self, layer: LayerPass) -> None:
        """TP all-reduce when TP > 1, output projection's two gradient matmuls, flash attention's gradient, and
        the QKV projection's two."""
        tokens, hidden = layer.tokens, layer.hidden
        if self.p.tp > 1:
            self.collective(layer.step, "allReduce", "tp", tokens * hidden * 2 / 1e6)
        for _ in range(2):
            out_us = 2 * tokens * hidden * hidden / CUBE_FLOP_PER_US
            self._matmul(layer, out_us, f'"{tokens},{hidden};{hidden},{hidden}"', f'"{tokens},{hidden}"')
        flash_grad = Launch(
            "FlashAttentionScoreGrad",
            "aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
            "MIX_AIC",
            f'"1,{tokens},{hidden};1,{tokens},{hidden};1,{tokens},{hidden};1,{tokens},{hidden}"',
            "DT_BF16;DT_BF16;DT_BF16;DT_BF16",
            f'"1,{tokens},{hidden}"',
        )
        flash_grad_us = 2.5 * 4 * tokens * tokens * hidden / 2 / CUBE_FLOP_PER_US
        self.kernel(layer.step, flash_grad, flash_grad_us, layer.straggle.get("FlashAttentionScoreGrad"))
        for _ in range(2):
            qkv_us = 2 * tokens * hidden * 3 * hidden / CUBE_FLOP_PER_US
            self._matmul(layer, qkv_us, f'"{tokens},{3 * hidden};{3 * hidden},{hidden}"', f'"{tokens},{hidden}"')


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


def _grouped_matmul(shapes: list[str] | str, out_shapes: list[str] | str) -> Launch:
    """The experts' GroupedMatmul with the shapes of one of its uses (forward, input or weight gradient)."""
    dtypes = "DT_BF16;DT_BF16;FLOAT;UINT64;FLOAT;FLOAT16;FLOAT16;INT64"
    return Launch(
        "GroupedMatmul", "aclnnGroupedMatmulV4_GroupedMatmul_GroupedMatmul", "MIX_AIC", shapes, dtypes, out_shapes
    )


def _per_rank(recv: list[int], fmt) -> list[str]:
    return [fmt(n) for n in recv]


def _gmm_shapes(recv: list[int], k_in: int, n_out: int, experts: int) -> list[str]:
    """x, weight, bias, scale, offset, antiquant_scale, antiquant_offset, group_list (observed layout)."""
    return [f'"{n},{k_in};{experts},{k_in},{n_out};;;;;;{experts}"' for n in recv]


def _out(recv: list[int], width: int) -> list[str]:
    return [f'"{n},{width}"' for n in recv]
