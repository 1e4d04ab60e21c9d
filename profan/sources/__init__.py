"""Readers: each turns one format family's files into polars frames whose rows keep a pointer to the line or
event they came from. The rooms, by format family:

- `discovery`: walk the folder the user named, sniff each file's format, tell ranks apart, refuse what is not a
  profile (one line each);
- `ascend_text`: torch_npu's text export under ``ASCEND_PROFILER_OUTPUT`` (``kernel_details.csv``,
  ``step_trace_time.csv``, ``communication.json``, the matrix, memory and op-statistic files);
- `ascend_db`: torch_npu's SQLite export (``ascend_pytorch_profiler_*.db``, ``analysis.db``);
- `trace`: chrome-trace JSON, Kineto's and Ascend's ``trace_view.json``, streamed in chunks;
- `common`: what every reader shares (the CSV text pass, row frames, intervals, the cache, reading cited rows back).
"""
