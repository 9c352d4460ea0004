"""The gate's worker: one entry point per mode, each run as a script from the gate's
checkout on a revision's worktree, each writing one ``harness.revisions.records`` record:
``process.py`` (one revision per process), ``paired.py`` (several revisions' kernels
launched in turn in one process), ``listing.py`` (the benchmark names) and
``resources.py`` (compiled resources). ``harness.revisions.launch`` builds their command
lines."""
