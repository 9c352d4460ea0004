"""Run the GPU tracks of one revision's asv suite in this process and write their samples.

The gate starts this file as a script from its own checkout, with ``--tree`` pointing at
a worktree of the revision under test. That tree goes first on ``sys.path``, so the suite,
the kernels and the timing path all come from the revision being measured; only this
loop (what asv's runner would do: ``setup``, then each ``track_*``) is the gate's.

    python harness/gate_worker.py --tree WORKTREE --out samples.json [--bench REGEX]
"""

import argparse
import importlib
import inspect
import itertools
import json
import re
import sys
import time
import traceback
from pathlib import Path

TRACKS = ("track_latency", "track_vs_torch")


def combination_name(module: str, cls: str, params: tuple) -> str:
    """Same form as asv's parameterised names: ``gemm.Stage(4096x4096x4096, 128, 3, f16)``."""
    return f"{module}.{cls}({', '.join(str(p) for p in params)})"


def discover(tree: Path, pattern: str | None):
    """(name, class, params) of every GPU combination in ``tree/asv_bench`` whose name
    matches ``pattern``."""
    found = []
    for path in sorted((tree / "asv_bench").glob("*.py")):
        if path.name.startswith("_"):
            continue
        module = importlib.import_module(f"asv_bench.{path.stem}")
        for cls_name, cls in vars(module).items():
            if cls_name.startswith("_") or not inspect.isclass(cls):
                continue
            if not all(hasattr(cls, t) for t in TRACKS):
                continue
            for params in itertools.product(*cls.params):
                name = combination_name(path.stem, cls_name, params)
                if pattern is None or re.search(pattern, name):
                    found.append((name, cls, params))
    return found


def run(tree: Path, pattern: str | None) -> dict:
    results = {}
    for name, cls, params in discover(tree, pattern):
        entry: dict = {}
        try:
            bench = cls()
            bench.setup(*params)
            for track in TRACKS:
                entry[track] = list(getattr(bench, track)(*params)["samples"])
        except NotImplementedError as skip:
            entry = {"skipped": str(skip)}
        except Exception as err:  # recorded per benchmark; the gate reports it (exit 2)
            last = traceback.format_exception_only(type(err), err)[-1].strip()
            entry = {"error": last[:500]}
        results[name] = entry
        print(f"  {name}: {next(iter(entry), 'empty')}", file=sys.stderr, flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", type=Path, required=True, help="worktree of the revision")
    parser.add_argument("--out", type=Path, required=True, help="where to write the samples")
    parser.add_argument("--bench", default=None, help="regex on combination names")
    args = parser.parse_args()
    tree = args.tree.resolve()
    # The revision's own code, never this checkout's.
    sys.path[:] = [str(tree)] + [
        p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent
    ]
    start = time.perf_counter()
    try:
        import kernels

        if not Path(kernels.__file__).resolve().is_relative_to(tree):
            raise RuntimeError(f"kernels imported from {kernels.__file__}, not from {tree}")
        results = run(tree, args.bench)
        payload = {"results": results}
    except Exception as err:  # the whole side failed to import or discover
        payload = {"fatal": "".join(traceback.format_exception_only(type(err), err)).strip()}
    payload["seconds"] = time.perf_counter() - start
    args.out.write_text(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
