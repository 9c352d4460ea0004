"""Running the asv suite: discovery, sharding over GPUs, precompile, results storage,
history (backfill, publish), the history detector (regressions) and its issue announcer,
and the spread of stored samples."""
