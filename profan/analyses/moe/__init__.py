"""MoE / expert parallelism: expert load from tokens (`tokens`, `balance`), the layer's parts (`parts`: dispatch,
combine, routing, expert GEMM) and what dispatch and combine cost, exposed or hidden behind compute (`ep_cost`)."""
