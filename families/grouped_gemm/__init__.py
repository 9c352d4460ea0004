"""The grouped GEMM of a mixture-of-experts layer: ``kernel.py`` (the TileLang program),
``op.py`` (its operator), ``bench.py`` (its asv classes), ``cli.py`` (a command that
checks and times it against torch)."""
