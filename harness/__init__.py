"""Measurement harness for the GEMM kernels: device facts, the one timing path, metrics,
correctness checks, reports and the performance gate. Imports ``kernels``; nothing here
is imported by ``kernels``.

Its sub-packages form layers; a module imports its own sub-package and the layers below
it, never one above nor a neighbour in its own layer (``tests/test_layers.py`` walks
every import, those inside functions included):

1. ``policy``, ``cli``: the statistical rule and the command-line conventions;
2. ``measure``: timing, GPU state, correctness, metrics;
3. ``revisions``: git and worktrees, the worker's launch and records, GPU placement and
   fan-out, the calibration file (what the suite and the gate share);
4. ``suite``: discovery, sharding, running and storing the asv suite, its history;
5. ``gate`` and ``report``: the PR gate (which reads the suite's public seams) and the
   stage reports.
"""

LAYERS = (
    ("policy", "cli"),
    ("measure",),
    ("revisions",),
    ("suite",),
    ("gate", "report"),
)
