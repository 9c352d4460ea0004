"""The heavy imports of the GPU families, done once per ``asv run`` in asv's forkserver.

With ``launch_method: forkserver`` (``asv.conf.json``) asv starts one server process per
``asv run``, which imports the suite and then forks every benchmark process from itself:
each family's ``setup_cache`` and each track. This module keeps nothing heavy at the top
(``gemm.py`` says why: discovery, a process of its own, only lists the suite), so each
family's process imported torch and TileLang itself: on the H200 runner that was 3 to 4 s
before its first combination and 6 to 8 s in it (``reports/measurement_h200.md``, the
per-combination seconds). Imported in the server instead, they are there in every fork.

Nothing here starts CUDA: a process forked after CUDA is initialised cannot use it, so
``preimport`` checks that the server has not (``CudaStarted`` otherwise, naming the module).
"""

from __future__ import annotations

import importlib
import sys

SERVER = "run_server"  # asv's forkserver: ``benchmark.py run_server DIR SOCKET``
# What the families' processes import before and while they measure: torch and its
# profiler (the CUPTI timer), TileLang with its profiler (``do_bench``), the kernels and
# the measurement layer.
HEAVY = (
    "torch",
    "torch.profiler",
    "tilelang",
    "tilelang.profiler",
    "kernels.gemm",
    "kernels.gemm_async",
    "harness.ops.registry",
    "harness.measure.timing",
    "harness.measure.versus",
    "harness.measure.gpu_state",
)


class CudaStarted(RuntimeError):
    """An import initialised CUDA in the forkserver: its forks could not use the GPU."""


def in_forkserver(argv: list[str] | None = None) -> bool:
    argv = sys.argv if argv is None else argv
    return len(argv) > 1 and argv[1] == SERVER


def preimport(argv: list[str] | None = None, modules: tuple[str, ...] = HEAVY) -> list[str]:
    """Import ``modules`` where this process is asv's forkserver; the names imported (a
    module this host lacks is left to the process that needs it, which says why)."""
    if not in_forkserver(argv):
        return []
    done = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        done.append(name)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            raise CudaStarted(f"importing {name} initialised CUDA in asv's forkserver")
    return done
