"""The per-rank map: read a batch of ranks into small tables (rankmap, kernel_pass, collectives), and the executor
that runs batches in processes. Only these small tables leave a rank."""
