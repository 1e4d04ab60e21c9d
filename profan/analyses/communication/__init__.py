"""Communication: what each collective costs (`op_time`), the bandwidth it reached against the link priors
(`bandwidth`), HCCL planes and NCCL specifics, and the section the report shows."""
