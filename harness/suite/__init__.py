"""Running the asv suite: discovery, sharding over GPUs, precompile, results storage,
history (backfill, regressions) and the spread of stored samples."""
