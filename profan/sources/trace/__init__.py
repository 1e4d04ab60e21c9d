"""Chrome-trace JSON: Kineto traces (PyTorch profiler, one file per rank) and Ascend's ``trace_view.json``,
streamed in bounded chunks (`chunks`), their events classified into kernels, context, memory, graph replays,
HCCL tasks and MoE token counts."""
