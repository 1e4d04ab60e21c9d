"""torch_npu's text export (``*_ascend_pt/ASCEND_PROFILER_OUTPUT``): kernel details, step trace, communication
and its matrix, memory, op statistics, device and metadata files, each read with only the columns it needs."""
