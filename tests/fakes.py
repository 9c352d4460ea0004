"""Stand-ins for the GPU-facing pieces, shared by the CPU tests: a GEMM case, a timing
batch, an NVML reader and module, the gate's worker, and a throwaway repository (git
and commits, the asv configuration of its tiny suite)."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path

from harness.measure.correctness import TOLERANCE, Check
from harness.measure.gpu_state import GpuState
from harness.measure.timing import Timing
from harness.revisions import records


class FakeCase:
    """Stands in for harness.measure.cases.Case: fixed timings, no GPU. Records the configs
    it builds (``compiled``) and counts kernel launches (``launches``); a config for which
    ``broken(config)`` is true fails to build, as a kernel TileLang cannot compile."""

    def __init__(
        self,
        shape=None,
        kernel_ms: float = 0.5,
        torch_ms: float = 0.4,
        broken: Callable[[object], bool] = lambda config: False,
    ):
        self.shape = shape
        self.kernel_ms = kernel_ms
        self.torch_ms = torch_ms
        self.broken = broken
        self.compiled = []
        self.launches = 0

    def _build(self, config) -> None:
        if self.broken(config):
            raise RuntimeError(f"fake compile error: {config}\n(the rest of a long log)")
        self.compiled.append(config)

    def tilelang_fn(self, config):
        self._build(config)

        def launch():
            self.launches += 1

        return launch

    def time_tilelang(self, config, **timing):
        self.tilelang_fn(config)()
        return Timing((self.kernel_ms,) * timing.get("repeat", 1), "event", 0)

    def time_torch(self, **timing):
        return Timing((self.torch_ms,) * timing.get("repeat", 1), "event", 0)

    def check(self, config, seed: int = 1) -> Check:
        self._build(config)
        return Check(self.shape, 1e-4, 0, TOLERANCE[self.shape.dtype])


class FakeBatch:
    """Per-launch samples around 1 ms with a given relative noise; counts its calls."""

    def __init__(self, noise, seed=0):
        self.rng = random.Random(seed)
        self.noise = noise
        self.calls = 0

    def __call__(self, fn, warmup, repeat, backend):
        self.calls += 1
        return [self.rng.gauss(1.0, self.noise) for _ in range(repeat)]


class FakeNvml:
    """One GpuState per batch, in order (the last one repeats)."""

    def __init__(self, states: list[GpuState]):
        self.states = list(states)

    def during(self, fn):
        return fn(), self.states.pop(0) if len(self.states) > 1 else self.states[0]


def fake_pynvml(clock=lambda h, c: 1755, reasons=0x4 | 0x1):
    """A ``pynvml`` module: one GPU at ``clock`` MHz of 1980, 71 C, 690 W, ``reasons``."""
    return types.SimpleNamespace(
        NVML_CLOCK_SM=0,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: "h",
        nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetClockInfo=clock,
        nvmlDeviceGetTemperature=lambda h, s: 71,
        nvmlDeviceGetPowerUsage=lambda h: 690_000,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: reasons,
        nvmlSystemGetDriverVersion=lambda: b"580.159.04",
        nvmlClocksThrottleReasonSwPowerCap=0x4,
        nvmlClocksThrottleReasonHwSlowdown=0x8,
        nvmlClocksThrottleReasonSwThermalSlowdown=0x20,
        nvmlClocksThrottleReasonHwThermalSlowdown=0x40,
        nvmlClocksThrottleReasonHwPowerBrakeSlowdown=0x80,
    )


# The benchmarks a FakeWorker knows by default.
WORKER_NAMES = [f"gemm.S({i})" for i in range(6)]


def worker_payload(
    rng: random.Random, names, slowdown: float = 0.0, injection=None
) -> records.ProcessRun:
    """A worker's run: latency and ratio samples per benchmark, ``slowdown`` slower, with
    ``injection(name)`` (a ``records.Injection``) where given."""

    def entry(name):
        scale = 1.0 + slowdown
        return records.Measured(
            track_latency=tuple(rng.gauss(1e-3 * scale, 1e-6) for _ in range(30)),
            track_vs_torch=tuple(rng.gauss(1.1 * scale, 1e-3) for _ in range(10)),
            injection=injection(name) if injection else None,
        )

    return records.ProcessRun({n: entry(n) for n in names})


class FakeWorker:
    """Stands in for launch.run_worker: records every call; the injected side is slower.
    ``listing`` stands in for launch.listing."""

    def __init__(self, names=WORKER_NAMES):
        self.names = names
        self.calls = []
        self.rng = random.Random(3)

    def listing(self, tree, bench, out_file) -> records.Listing:
        return records.Listing(tuple(self.names))

    def __call__(
        self,
        tree,
        bench,
        out_file,
        inject=0.0,
        gpu=None,
        only=None,
        inject_cycles=None,
    ):
        shard = self.names if only is None else json.loads(only.read_text())
        self.calls.append(
            {
                "file": out_file.name,
                "inject": inject,
                "gpu": gpu,
                "shard": shard,
                "inject_cycles": inject_cycles,
            }
        )
        # the injected run calibrates its delay, or sets the cycles given
        injected = (lambda name: fake_injection(name, inject, inject_cycles)) if inject else None
        return worker_payload(self.rng, shard, slowdown=inject, injection=injected)


def fake_injection(name: str, fraction: float, cycles_file=None) -> records.Injection:
    """A worker's injection record: calibrated now (cycles from the name, one step), or
    the cycles ``cycles_file`` gives (no steps), as ``harness.gate.inject`` makes them."""
    if cycles_file is None:
        cycles = 1000 + len(name) + round(fraction * 1e4)
        return records.Injection(fraction, cycles, fraction, ((cycles, fraction),))
    files = [cycles_file] if isinstance(cycles_file, Path) else list(cycles_file)
    found = [json.loads(f.read_text()) for f in files]
    cycles = next(r["cycles"][name] for r in found if r["slowdown"] == fraction)
    return records.Injection(fraction, cycles, None, ())


def paired_payload(
    rng: random.Random, names, inject: dict | None = None, sides=None, injection=None
) -> records.PairedRun:
    """A paired worker's run: per combination every side's latencies and per-trial
    ratios to the first side, an injected side slower by its fraction, with
    ``injection(name, side, fraction)`` (a ``records.Injection``) where given."""
    inject = inject or {}
    sides = list(sides or ("base", "head"))
    results = {}
    for name in names:
        got, ratios_of = {}, {}
        for side in sides:
            factor = 1.0 + inject.get(side, 0.0)
            ratios = [factor * rng.gauss(1.0, 0.001) for _ in range(10)]
            if side == sides[0]:
                ratios = [1.0] * 10
            ratios_of[side] = tuple(ratios)
            got[side] = records.Side(latency=tuple(1e-3 * r for r in ratios for _ in range(3)))
        injected = {
            side: injection(name, side, fraction)
            for side, fraction in inject.items()
            if injection is not None
        }
        results[name] = records.Paired(sides=got, ratios=ratios_of, injection=injected)
    return records.PairedRun(tuple(sides), results)


class FakePairedWorker:
    """Stands in for launch.run_paired: records every call; injected sides are slower."""

    def __init__(self, names=WORKER_NAMES):
        self.names = names
        self.calls = []
        self.rng = random.Random(5)

    def __call__(
        self, trees, bench, out_file, inject=None, gpu=None, only=None, inject_cycles=None, **kw
    ):
        shard = self.names if only is None else json.loads(only.read_text())
        self.calls.append(
            {
                "file": out_file.name,
                "sides": list(trees),
                "inject": inject,
                "gpu": gpu,
                "shard": shard,
                "inject_cycles": inject_cycles,
            }
        )
        return paired_payload(
            self.rng,
            shard,
            inject,
            trees,
            lambda name, side, fraction: fake_injection(name, fraction, inject_cycles),
        )


def tiny_asv_conf(benchmark_dir: str = "suite") -> dict:
    """asv.conf.json of a throwaway repository: its suite in ``benchmark_dir``, everything
    asv writes under ``.asv``."""
    return {
        "version": 1,
        "project": "t",
        "repo": ".",
        "branches": ["main"],
        "benchmark_dir": benchmark_dir,
        "results_dir": ".asv/results",
        "html_dir": ".asv/html",
        "env_dir": ".asv/env",
        "environment_type": "virtualenv",
    }


def git(*args: str, cwd) -> str:
    """``git ARGS`` in ``cwd``; its stdout, stripped (raises on failure)."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def commit(repo, message: str, author: str = "t") -> str:
    """Commit everything in ``repo`` as ``author``; the new commit's hash."""
    git("add", "-A", cwd=repo)
    ident = ("-c", f"user.name={author}", "-c", "user.email=t@t")
    git(*ident, "commit", "-qm", message, cwd=repo)
    return git("rev-parse", "HEAD", cwd=repo)


def tiny_gpu_family(cls: str, track: str, value: str) -> str:
    """A throwaway repository's suite module: one GPU family ``cls`` (its ``case`` hook
    puts its unit in the machine's own lane; nothing touches a GPU) of two combinations,
    ``n`` in 1 and 2, whose method ``track`` returns ``value``, an expression of ``n``
    and of ``gemm``, the repository's ``kernels/gemm.py``."""
    return f"""from kernels import gemm


class {cls}:
    params = ([1, 2],)
    param_names = ["n"]

    def case(self, n):
        return None, None

    def {track}(self, n):
        return {value}
"""


def process_run(results: dict, **fields) -> records.ProcessRun:
    """A process-mode worker record from its JSON form's ``results`` (``records.from_dict``)."""
    data = {"version": records.VERSION, "kind": "process", "results": results, **fields}
    return records.from_dict(data)


def paired_run(results: dict, sides=("base", "head"), **fields) -> records.PairedRun:
    """A paired worker record from its JSON form's ``results`` (``records.from_dict``)."""
    data = {"version": records.VERSION, "kind": "paired", "sides": list(sides)}
    return records.from_dict({**data, "results": results, **fields})


WORKER_DIR = Path(__file__).resolve().parent.parent / "harness" / "gate" / "worker"
WORKER_SIBLINGS = ("common", "injection")


def load_worker(mode: str):
    """The worker's ``mode`` entry point loaded as its script runs: its folder first on
    ``sys.path`` (the caller restores it and drops ``WORKER_SIBLINGS`` afterwards)."""
    sys.path.insert(0, str(WORKER_DIR))
    for name in WORKER_SIBLINGS:
        sys.modules.pop(name, None)
    path = WORKER_DIR / f"{mode}.py"
    spec = importlib.util.spec_from_file_location(f"_worker_{mode}_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
