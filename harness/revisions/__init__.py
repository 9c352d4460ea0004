"""Revisions, measured: what the gate, calibration, the self-test, bisect and the suite's
backfill share, beside the policy and below both ``harness.suite`` and ``harness.gate``.

- ``git``: resolve revisions, give each a worktree, the environment a tree's code runs in;
- ``launch``: the gate's worker on a worktree (one process per revision) or on several
  at once (paired), every command line it is started with, and precompiling trees;
- ``placement`` and ``fanout``: combinations placed on GPUs, and the work of every GPU
  run at once, written once for the gate, calibration and the self-test;
- ``records``: the worker's typed records; ``calibration``: the calibration file.
"""
