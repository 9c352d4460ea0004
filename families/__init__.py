"""Kernel families beyond the dense GEMM, one package each: its TileLang kernel
(``kernel.py``), its operator (``op.py``, the contract of ``harness.ops.contract``)
and its asv classes (``bench.py``), registered by one line, the ``families`` list of
pyproject.toml's ``[tool.tilelang-gemm-perf]`` table. ``docs/add_a_family.md`` walks
through adding one."""
