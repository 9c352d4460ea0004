"""The one walker over the asv suite: its families (benchmark classes) and their
parameter combinations, read from the benchmark directory that ``asv.conf.json`` names.

Stdlib only, and importable by file path: the gate's worker loads this module from the
gate's own checkout while the suite it walks comes from an older revision's worktree.

    from harness.suite import discovery
    for family in discovery.families(root):
        print(family.full, family.is_gpu, len(family.combinations()))

It also owns the one walk from a combination to a built kernel: ``combination`` asks the
family what one parameter combination is (an operator's name, a shape, a config) and
``build`` compiles it through the operator registry (``harness.ops.registry``) of the tree
on ``sys.path``, with one error policy: an invalid combination raises ``Skipped`` (a
``NotImplementedError``, asv's skip) with the rule it breaks, a failed compile raises
``BuildFailed`` naming the combination. Precompile, the cost model's weights, the gate's
worker and the asv families all walk through these two.
"""

from __future__ import annotations

import importlib
import inspect
import itertools
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Set by the runner for each ``asv run``: a JSON list of the combination names
# (``combination_name``) that run measures, so a family's process measures only its share.
COMBINATIONS_ENV = "SUITE_COMBINATIONS"
# Set by the runner when several CPU lanes run at once: the compile workers each may use.
CPU_WORKERS_ENV = "SUITE_CPU_WORKERS"
# Set by the runner for each ``asv run``: a file where each GPU family's process appends
# one JSON line of what its ``setup_cache`` spent (``record_seconds``), read back after
# the run (``read_seconds``) for the cost model.
SECONDS_ENV = "SUITE_SECONDS_FILE"
_COMMENT = re.compile(r'^((?:[^"/]|"(?:[^"\\]|\\.)*")*)//.*$')
BENCH_PREFIXES = ("track_", "time_", "mem_", "peakmem_", "timeraw_")


def conf_path(root: Path) -> Path:
    """``root/asv.conf.json``, or ``root`` itself when it names a configuration file."""
    root = Path(root)
    return root if root.suffix == ".json" else root / "asv.conf.json"


def read_asv_conf(root: Path) -> dict:
    """The asv configuration of ``root`` (a checkout, or a configuration file); asv
    allows ``//`` line comments in it."""
    path = conf_path(root)
    try:
        text = path.read_text()
    except OSError as err:
        raise FileNotFoundError(f"{path}: cannot read the asv configuration ({err})") from None
    # A // that starts a line's remainder outside a string: asv's own rule is the same
    # (comments are whole-line or trailing, never inside values in this file).
    lines = [
        re.sub(r'^((?:[^"/]|"(?:[^"\\]|\\.)*")*)//.*$', r"\1", line) for line in text.splitlines()
    ]
    try:
        return json.loads("\n".join(lines))
    except ValueError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None


def benchmark_dir(root: Path) -> Path:
    """The suite's folder, ``benchmark_dir`` of ``root/asv.conf.json``."""
    conf = read_asv_conf(root)
    return (conf_path(root).parent / conf.get("benchmark_dir", "benchmarks")).resolve()


def combination_name(family: str, params: tuple) -> str:
    """Same form as asv's parameterised names: ``gemm.Stage(4096x4096x4096, 128, 3, f16)``."""
    return f"{family}({', '.join(str(p) for p in params)})"


def record_seconds(unit: str, seconds: float, combinations: dict[str, float], environ=None):
    """Append one family process's seconds (its whole ``setup_cache``, and each
    combination's) to ``SECONDS_ENV``'s file, where the runner set it; else nothing. A
    file that cannot be written costs the record only (a warning on stderr), never the
    family's measurements, which the caller returns next."""
    import os

    path = (os.environ if environ is None else environ).get(SECONDS_ENV)
    if not path:
        return
    line = json.dumps({"unit": unit, "seconds": seconds, "combinations": combinations})
    try:
        with open(path, "a") as fh:  # one write per line: O_APPEND keeps lines whole
            fh.write(line + "\n")
    except OSError as err:
        print(
            f"note: {unit}: its seconds were not recorded ({SECONDS_ENV}: {err})", file=sys.stderr
        )


def read_seconds(path: Path) -> dict[str, dict]:
    """``{unit: {"seconds": s, "combinations": {name: s}}}`` of a ``SECONDS_ENV`` file
    (empty where none was written: a run of CPU units, or one that failed before); a line
    that is not such a record (a process killed mid-write) is left out."""
    out: dict[str, dict] = {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
            out[str(rec["unit"])] = spent(rec)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return out


def spent(rec: dict) -> dict:
    """``{"seconds": s, "combinations": {name: s}}`` of a family process's record (the
    seconds file's line, the runner's ``family`` log line), its order kept; KeyError,
    TypeError, ValueError or AttributeError where it is not one."""
    combos = {str(name): float(s) for name, s in rec["combinations"].items()}
    return {"seconds": float(rec["seconds"]), "combinations": combos}


def selected_combinations(environ=None) -> frozenset[str] | None:
    """The combination names of ``COMBINATIONS_ENV``, or None when it is not set (a plain
    ``asv run``: every combination)."""
    import os

    text = (os.environ if environ is None else environ).get(COMBINATIONS_ENV)
    if text is None:
        return None
    try:
        names = json.loads(text)
    except ValueError:
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{COMBINATIONS_ENV}={text[:80]!r}: must be a JSON list of names")
    return frozenset(names)


def cpu_workers(default: int, environ=None) -> int:
    """The compile workers of ``CPU_WORKERS_ENV``, or ``default`` when it is not set."""
    import os

    text = (os.environ if environ is None else environ).get(CPU_WORKERS_ENV)
    if text is None:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{CPU_WORKERS_ENV}={text!r}: must be a whole number >= 1")
    return int(text)


@dataclass(frozen=True)
class Family:
    """One benchmark class of the suite: ``gemm.Stage``."""

    module: str  # the module's short name, as asv names it: "gemm"
    name: str  # the class name: "Stage"
    cls: type

    @property
    def full(self) -> str:
        return f"{self.module}.{self.name}"

    @property
    def is_gpu(self) -> bool:
        """A GPU family maps its params to an operator's (shape, config) through
        ``combination`` (``case`` in a suite from before the operator contract)."""
        return callable(getattr(self.cls, "combination", None)) or callable(
            getattr(self.cls, "case", None)
        )

    def has_tracks(self, tracks: tuple[str, ...]) -> bool:
        return all(callable(getattr(self.cls, t, None)) for t in tracks)

    def combinations(self) -> list[tuple]:
        params = getattr(self.cls, "params", None) or []
        return list(itertools.product(*params)) if params else [()]

    def combination_name(self, params: tuple) -> str:
        return combination_name(self.full, params)

    def methods(self) -> list[str]:
        """The benchmark methods asv runs (a family may set an inherited one to None)."""
        return sorted(
            n for n in dir(self.cls) if n.startswith(BENCH_PREFIXES) and getattr(self.cls, n)
        )

    def asv_name(self, method: str, params: tuple) -> str:
        """asv's name of one benchmark, as ``-b`` matches it:
        ``gemm.Stage.track_latency('4096x4096x4096', 128, 1, 'f16')``."""
        own = f"{self.full}.{method}"
        return f"{own}({', '.join(repr(p) for p in params)})" if params else own

    def benchmark_names(self) -> list[str]:
        """asv's names of the family's benchmarks, one per method and combination."""
        return [self.asv_name(m, c) for m in self.methods() for c in self.combinations()]


class Skipped(NotImplementedError):
    """A combination that cannot exist (its config breaks a rule of its shape or of the
    device): asv skips it (n/a); the message is the rule."""


class BuildFailed(RuntimeError):
    """A valid combination whose kernel failed to compile; the message names it."""


@dataclass(frozen=True)
class Combination:
    """What one parameter combination of a family builds: the registry name of its
    operator (``"gemm"``), its shape and its config (None: no kernel of this project, e.g.
    torch.matmul's own launch), and its name (``gemm.Stage(4096x4096x4096, 128, 3, f16)``)."""

    name: str
    operator: str
    shape: Any
    config: Any

    @property
    def label(self) -> str:
        config = "no kernel" if self.config is None else self.config.id
        return f"{self.name} [{self.operator} {self.shape.id} {config}]"


def combination(family: Family, params: tuple, device: Any = None) -> Combination:
    """The family's ``combination(*params, device=device)``: operator, shape and config.
    ``device`` (an ``harness.ops.contract.DeviceSpec``, None: the visible GPU where there is
    one) decides the combinations that depend on it (a tuned config). A combination the
    family's rules reject raises ``Skipped`` with the rule."""
    bench = family.cls()
    try:
        operator, shape, config = bench.combination(*params, device=device)
    except (ValueError, NotImplementedError) as err:
        raise Skipped(str(err)) from None
    return Combination(family.combination_name(params), operator, shape, config)


def build(combo: Combination, device: Any = None):
    """Compile ``combo`` through ``harness.ops.registry.build_combination`` for ``device``
    (None: the visible GPU; a ``CompileTarget``: cross-compile): the operator's bind
    function, inputs -> launch. ``Skipped`` where the operator's validator rejects the
    pair; ``BuildFailed`` naming the combination where the compile fails."""
    from harness.ops.registry import build_combination, operator

    if combo.config is None:
        raise Skipped(f"{combo.name}: no kernel of this project to build")
    op = operator(combo.operator)
    try:
        op.validate(combo.shape, combo.config)
    except ValueError as err:
        raise Skipped(str(err)) from None
    try:
        return build_combination(op, combo.shape, combo.config, device)
    except Exception as err:  # any compile error fails this combination alone, named
        first = str(err).strip().splitlines()[0] if str(err).strip() else "no message"
        raise BuildFailed(f"{combo.label}: {type(err).__name__}: {first}") from err


def operator_of(combo: Combination):
    """The operator ``combo`` names, from the registry of the tree on ``sys.path``: its
    ``inputs``, ``baseline``, ``flops`` and ``bytes``."""
    from harness.ops.registry import operator

    return operator(combo.operator)


def families(root: Path, modules: tuple[str, ...] | None = None) -> list[Family]:
    """Every public class with ``params`` in the suite of ``root`` (or in the named
    modules of it, by short name), in file and definition (or binding) order: what asv
    finds, a class bound into a module's namespace (``families``) as well as one defined
    there. The suite is imported as a package named after its folder, from ``root``."""
    folder = benchmark_dir(root)
    parent = str(folder.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    out = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_") or (modules is not None and path.stem not in modules):
            continue
        module = importlib.import_module(f"{folder.name}.{path.stem}")
        for cls_name, cls in vars(module).items():
            if cls_name.startswith("_") or not inspect.isclass(cls):
                continue
            if not hasattr(cls, "params"):
                continue
            out.append(Family(path.stem, cls_name, cls))
    return out


def suite_attribute(root: Path, name: str, default=None):
    """A constant the suite package declares in its ``__init__`` (the gate's default
    subset, say), so callers read it from the suite instead of naming its classes."""
    folder = benchmark_dir(root)
    parent = str(folder.parent)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    return getattr(importlib.import_module(folder.name), name, default)


def gate_subset(root: Path) -> str:
    """The gate's default subset, as the suite declares it (``GATE_SUBSET`` in the suite
    package), so no caller names the suite's classes; RuntimeError where it declares none."""
    subset = suite_attribute(root, "GATE_SUBSET")
    if not subset:
        raise RuntimeError(f"{benchmark_dir(root)}/__init__.py: no GATE_SUBSET regex")
    return subset


def unit_of(family: Family) -> str:
    """The unit a family runs in: a GPU family alone (``gemm.Stage``); a module's CPU
    families together (``static``): they compile with every core, and two at once would
    slow each other's timed compiles."""
    return family.full if family.is_gpu else family.module


def aliases(family: Family, params: tuple) -> list[str]:
    """Every name a ``-b`` regex may match for one combination: asv's names of its
    benchmarks (one per method) and the gate's name of the combination."""
    gate = family.combination_name(params) if params else family.full
    return [*(family.asv_name(m, params) for m in family.methods()), gate]


def selected(names: list[str] | tuple[str, ...], regexes: list[str] | tuple[str, ...]) -> bool:
    """The one rule of every ``-b``/``--bench`` (the runner, backfill, the gate, bisect,
    precompile): no regex selects everything; otherwise a benchmark is selected when any
    regex is found (``re.search``) in any of its ``names``, asv's or the gate's."""
    return not regexes or any(re.search(r, name) for r in regexes for name in names)


def listing(root: Path) -> dict[str, dict]:
    """``{unit: {"solo": bool, "gpu": bool, "names": {asv name: [asv name, gate name]}}}``
    of the suite in ``root``: what a runner needs to select, skip, order and place its
    units, as plain data (``python discovery.py --list ROOT`` prints it for another
    revision's tree)."""
    out: dict[str, dict] = {}
    for family in families(root):
        entry = out.setdefault(unit_of(family), {"solo": False, "gpu": family.is_gpu, "names": {}})
        entry["solo"] = entry["solo"] or bool(getattr(family.cls, "solo", False))
        for combo in family.combinations():
            gate_name = family.combination_name(combo) if combo else family.full
            for m in family.methods():
                name = family.asv_name(m, combo)
                entry["names"][name] = [name, gate_name]
    return out


if __name__ == "__main__":
    # Run as a script by path, with another revision's tree first on sys.path.
    import argparse

    parser = argparse.ArgumentParser(description="Print the suite's units as JSON.")
    parser.add_argument("--list", type=Path, required=True, metavar="ROOT")
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != here]
    try:
        print(json.dumps(listing(args.list.resolve())))
    except Exception as err:  # the revision's suite does not import: say why, last
        import traceback

        traceback.print_exc()
        print(f"{type(err).__name__}: {err}", file=sys.stderr)
        sys.exit(1)
