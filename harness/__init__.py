"""Measurement harness for the GEMM kernels: device facts, the one timing path, metrics,
correctness checks, reports and the performance gate. Imports ``kernels``; nothing here
is imported by ``kernels``.

Its sub-packages form layers; a module imports its own sub-package and the layers below
it, never one above nor a neighbour in its own layer (``tests/test_layers.py`` walks
every import, those inside functions included):

1. ``policy``, ``cli``: the statistical rule and its verdicts' names, the command-line
   conventions;
2. ``ops``: the operator contract and its families (shapes, configs, inputs, reference,
   build);
3. ``measure``: timing, GPU state, correctness, metrics;
4. ``revisions`` and ``report``: git and worktrees, the worker's launch and records, GPU
   placement and fan-out, the calibration file (what the suite and the gate share); the
   markdown and plots, from templates and the records they are handed;
5. ``suite``: discovery, sharding, running and storing the asv suite, its history;
6. ``gate``: the PR gate (which reads the suite's public seams).

A kernel family's package (``families/<name>/``) stands beside ``kernels`` and ``ops``: its
kernel, operator and asv classes import ``kernels`` and ``harness.ops.contract`` only
(``tests/test_layers.py`` checks them too); ``ops.registry`` loads the packages
pyproject.toml registers.
"""

LAYERS = (
    ("policy", "cli"),
    ("ops",),
    ("measure",),
    ("revisions", "report"),
    ("suite",),
    ("gate",),
)
