"""torch_npu's SQLite export: a read-only connection (`sqlite`), the tables read by name (`reader`), and per
question the kernel, step, task, communication and memory tables, with cited rows read back by id (`rows`)."""
