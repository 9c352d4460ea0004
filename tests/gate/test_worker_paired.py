"""The gate worker's paired mode on the CPU: two revisions' suites imported in turn into one
process, each side's kernels built by its own code, launched in turn (a fake timer)."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

SUITE = """
import kernels


class Fam:
    params = ([1, 2],)
    param_names = ["x"]

    def case(self, x):
        return x, None

    def track_latency(self, *params):
        pass

    def track_vs_torch(self, *params):
        pass

    def prepare(self, x):
        if x == 2 and kernels.REVISION == "head":
            raise NotImplementedError("invalid on head")
        if x == 1 and kernels.BROKEN:
            raise RuntimeError("does not compile")

        class Data:
            shape = a = b = out = None

            def tilelang_fn(self, config):
                return lambda: kernels.REVISION

        return Data(), None
"""

DELAY = """

class Delayed:
    blocks = 264

    def __init__(self):
        self.delay_cycles = 0

    def __call__(self, a, b, out):
        return ("delayed", REVISION, self.delay_cycles)


def compile_gemm(shape, config, arch=None, *, delay=False):
    assert delay
    return Delayed()
"""


def _tree(root: Path, revision: str, broken: bool = False, delay: bool = False) -> Path:
    """A revision's checkout: its asv.conf.json, kernels (``delay``: with a test-only
    delayed build), suite and harness."""
    kernels = f"REVISION = {revision!r}\nBROKEN = {broken}\n" + (DELAY if delay else "")
    files = {
        "asv.conf.json": json.dumps({"benchmark_dir": "suite"}),
        "kernels/__init__.py": kernels,
        "suite/__init__.py": "",
        "suite/gemm.py": SUITE,
        "harness/__init__.py": "",
        "harness/measure/__init__.py": "",
        "harness/measure/gpu_state.py": "def open_nvml():\n    return None\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def worker(monkeypatch, worker_entry):
    """The paired worker's entry point loaded as its script runs, with this process's own
    ``kernels``, ``harness`` and ``sys.path`` put back afterwards."""
    for name in list(sys.modules):
        if name.split(".")[0] in ("kernels", "harness", "suite"):
            monkeypatch.delitem(sys.modules, name)
    module = worker_entry("paired")
    # A flush's and a kernel's GPU time size the paired trials (``interleave.launches_for``);
    # measured apart from the fake timers, whose launches the tests count.
    monkeypatch.setattr(module.injection, "flush_ms", lambda: 0.1)
    monkeypatch.setattr(module.common, "paired_median_ms", lambda fn, launches=5: 1.0)
    yield module
    for name in list(sys.modules):
        if name.split(".")[0] in ("kernels", "harness", "suite"):
            sys.modules.pop(name, None)


def fake_timer(launched):
    """Stands in for interleave.interleaved: launches every function once, recording
    what it returned; the second function is 10% slower than the first."""

    def interleaved(fns, trials=10, launches=10, **kw):
        launched.append([fn() for fn in fns])
        return [[[1.0 + 0.1 * i] * launches for _ in range(trials)] for i in range(len(fns))]

    return interleaved


def test_each_side_launches_its_own_revisions_kernel(worker, monkeypatch, tmp_path):
    base, head = _tree(tmp_path / "a", "base"), _tree(tmp_path / "b", "head")
    launched = []
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer(launched))
    results = worker.run_paired({"base": base, "head": head}, None, {})
    assert set(results) == {"gemm.Fam(1)", "gemm.Fam(2)"}
    one = results["gemm.Fam(1)"]
    assert launched[0] == ["base", "head"]  # base's kernel, then head's, in one process
    assert one.ratios["head"] == pytest.approx((1.1,) * 20)
    assert one.ratios["base"] == (1.0,) * 20
    assert one.shared_inputs is False  # these fake inputs hold no tensors
    assert one.sides["head"].latency[0] == pytest.approx(1.1e-3)
    # Invalid on head only: base still measured alone, head marked skipped.
    two = results["gemm.Fam(2)"]
    assert two.sides["head"].skipped == "invalid on head"
    assert two.sides["base"].latency and launched[1] == ["base"]


def test_a_side_that_fails_to_build_fails_alone(worker, monkeypatch, tmp_path):
    base, head = _tree(tmp_path / "a", "base"), _tree(tmp_path / "b", "head", broken=True)
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer([]))
    results = worker.run_paired({"base": base, "head": head}, r"Fam\(1\)", {})
    assert list(results) == ["gemm.Fam(1)"]
    assert "does not compile" in results["gemm.Fam(1)"].sides["head"].error
    assert results["gemm.Fam(1)"].sides["base"].latency


def test_the_same_tree_twice_is_imported_twice(worker, monkeypatch, tmp_path):
    tree = _tree(tmp_path / "a", "base")
    launched = []
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer(launched))
    results = worker.run_paired({"base": tree, "head": tree, "injected": tree}, r"Fam\(1\)", {})
    assert launched == [["base", "base", "base"]]
    assert set(results["gemm.Fam(1)"].ratios) == {"base", "head", "injected"}


class Tensor:
    def __init__(self, shape, dtype="float16"):
        self.shape, self.dtype = shape, dtype


class Inputs:
    def __init__(self, m=64, dtype="float16"):
        self.a, self.b, self.out = Tensor((m, 8), dtype), Tensor((8, 4), dtype), Tensor((m, 4))


def test_sides_share_inputs_of_the_same_shapes_only(worker):
    ref, same, other = Inputs(), Inputs(), Inputs(m=32)
    assert worker.share_inputs(same, ref) and same.a is ref.a and same.out is ref.out
    assert not worker.share_inputs(other, ref) and other.a is not ref.a
    assert not worker.share_inputs(Inputs(dtype="bfloat16"), ref)
    assert not worker.share_inputs(object(), ref)  # a revision whose inputs look different


def test_a_side_whose_suite_does_not_import_is_named_in_the_fatal_payload(
    worker, monkeypatch, tmp_path
):
    base, head = _tree(tmp_path / "a", "base"), _tree(tmp_path / "b", "head")
    (head / "kernels" / "__init__.py").write_text("REVISION = (\n")  # a syntax error
    out = tmp_path / "out.json"
    argv = ["worker.py", "--side", f"base={base}", "--side", f"head={head}", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer([]))
    assert worker.main() == 0
    payload = json.loads(out.read_text())  # the worker's records module, read by path
    assert payload["kind"] == "fatal" and payload["version"] == worker.records.VERSION
    assert payload["side"] == "head" and "SyntaxError: '(' was never closed" in payload["fatal"]


def delay_timer(launched, seen_of_cycles):
    """Stands in for interleave.interleaved: a plain launch takes 1 ms, a delayed one
    ``1 + seen_of_cycles(cycles)`` ms."""

    def interleaved(fns, trials=10, launches=10, **kw):
        got = [fn() for fn in fns]
        launched.append(got)
        ms = [1.0 + (seen_of_cycles(g[2]) if isinstance(g, tuple) else 0.0) for g in got]
        return [[[m] * launches for _ in range(trials)] for m in ms]

    return interleaved


def test_the_injected_side_launches_its_delayed_kernel_calibrated(worker, monkeypatch, tmp_path):
    """No second launch: the injected side's own kernel, built with the delay, its cycles
    corrected until the paired timer sees the request; base and head stay plain."""
    tree = _tree(tmp_path / "a", "base", delay=True)
    launched = []
    seen = lambda cycles: 0.005 + 1e-6 * cycles  # noqa: E731 - a fixed cost plus a slope
    monkeypatch.setattr(worker.interleave, "interleaved", delay_timer(launched, seen))
    monkeypatch.setattr(worker.injection, "sleep_cycles_per_ms", lambda median_ms: 1.98e6)
    monkeypatch.setattr(worker.injection, "sm_count", lambda: 132)
    monkeypatch.setattr(worker.injection, "flush_ms", lambda: 0.1)
    sides = {"base": tree, "head": tree, "injected": tree}
    results = worker.run_paired(sides, r"Fam\(1\)", {"injected": 0.02})
    entry = results["gemm.Fam(1)"]
    record = entry.injection["injected"]
    assert set(entry.injection) == {"injected"}
    # First guess: 2% of 1 ms at 1.98e6 cycles/ms over 2 waves (264 blocks, 132 SMs).
    assert record.steps[0][0] == 19800
    assert abs(record.seen - 0.02) <= 0.001 and abs(seen(record.cycles) - 0.02) <= 0.001
    final = launched[-1]
    assert final[:2] == ["base", "base"] and final[2] == ("delayed", "base", record.cycles)
    assert entry.ratios["injected"][0] == pytest.approx(1 + seen(record.cycles))
    assert entry.ratios["head"][0] == 1.0


def test_an_injection_into_a_tree_without_the_delay_fails_that_benchmark(
    worker, monkeypatch, tmp_path
):
    tree = _tree(tmp_path / "a", "base")
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer([]))
    monkeypatch.setattr(worker.injection, "sleep_cycles_per_ms", lambda median_ms: 1.98e6)
    monkeypatch.setattr(worker.injection, "sm_count", lambda: 132)
    monkeypatch.setattr(worker.injection, "flush_ms", lambda: 0.1)
    sides = {"base": tree, "injected": tree}
    results = worker.run_paired(sides, r"Fam\(1\)", {"injected": 0.02})
    error = results["gemm.Fam(1)"].sides["injected"].error
    assert error == "RuntimeError: this revision's kernels have no test-only delay to inject with"


def test_the_paired_loop_times_kernels_by_cupti_and_says_when_it_cannot(
    worker, monkeypatch, capsys
):
    asked = []

    def interleaved(fns, timer="event", **kw):
        asked.append(timer)
        if timer == "cupti":
            raise worker.interleave.kernel_timer.CuptiUnavailable("no CUPTI in this build")
        return [[[1.0]] for _ in fns]

    monkeypatch.setattr(worker.interleave, "interleaved", interleaved)
    assert worker.common.paired_times([lambda: None]) == [[[1.0]]]
    worker.common.paired_times([lambda: None])
    assert asked == ["cupti", "event", "event"]  # CUPTI tried once, then events
    assert worker.common.TIMER == {"name": "event", "why": "no CUPTI in this build"}
    assert "timing with CUDA events: no CUPTI in this build" in capsys.readouterr().err


def test_a_failed_sides_status_line_gives_its_error(worker, monkeypatch, tmp_path, capsys):
    """``injected error`` alone told nothing: the line names the error's first line."""
    tree = _tree(tmp_path / "a", "base")
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer([]))
    monkeypatch.setattr(worker.injection, "sleep_cycles_per_ms", lambda median_ms: 1.98e6)
    monkeypatch.setattr(worker.injection, "sm_count", lambda: 132)
    monkeypatch.setattr(worker.injection, "flush_ms", lambda: 0.1)
    worker.run_paired({"base": tree, "injected": tree}, r"Fam\(1\)", {"injected": 0.02})
    line = next(x for x in capsys.readouterr().err.splitlines() if "gemm.Fam(1)" in x)
    assert line == (
        "  gemm.Fam(1): injected error: RuntimeError: this revision's kernels have no "
        "test-only delay to inject with"
    )


def _no_calibration(worker, monkeypatch):
    """Every measurement a calibration makes raises: a run given its cycles makes none."""

    def refuse(*args, **kwargs):
        raise AssertionError("calibrated although the cycles were given")

    for name in ("sleep_cycles_per_ms", "sm_count", "calibrate_delay"):
        monkeypatch.setattr(worker.injection, name, refuse)
    monkeypatch.setattr(worker, "paired_seen", refuse)


def test_given_cycles_are_set_and_nothing_is_calibrated(worker, monkeypatch, tmp_path):
    tree = _tree(tmp_path / "a", "base", delay=True)
    launched = []
    seen = lambda cycles: 1e-5 * cycles  # noqa: E731
    monkeypatch.setattr(worker.interleave, "interleaved", delay_timer(launched, seen))
    _no_calibration(worker, monkeypatch)
    sides = {"base": tree, "head": tree, "injected": tree}
    results = worker.run_paired(
        sides, r"Fam\(1\)", {"injected": 0.02}, cycles={0.02: {"gemm.Fam(1)": 2100}}
    )
    entry = results["gemm.Fam(1)"]
    assert entry.injection["injected"] == worker.records.Injection(0.02, 2100, None, ())
    assert launched == [["base", "base", ("delayed", "base", 2100)]]  # the trials alone
    assert entry.ratios["injected"][0] == pytest.approx(1.021)


def test_a_benchmark_the_cycles_file_lacks_fails_naming_the_option(worker, monkeypatch, tmp_path):
    tree = _tree(tmp_path / "a", "base", delay=True)
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer([]))
    _no_calibration(worker, monkeypatch)
    results = worker.run_paired(
        {"base": tree, "injected": tree}, r"Fam\(1\)", {"injected": 0.02}, cycles={0.02: {"x": 5}}
    )
    error = results["gemm.Fam(1)"].sides["injected"].error
    assert "--inject-cycles has no cycles for gemm.Fam(1)" in error


def test_each_calibration_step_prints_a_progress_line(worker, monkeypatch, tmp_path, capsys):
    tree = _tree(tmp_path / "a", "base", delay=True)
    seen = lambda cycles: 0.005 + 1e-6 * cycles  # noqa: E731
    monkeypatch.setattr(worker.interleave, "interleaved", delay_timer([], seen))
    monkeypatch.setattr(worker.injection, "sleep_cycles_per_ms", lambda median_ms: 1.98e6)
    monkeypatch.setattr(worker.injection, "sm_count", lambda: 132)
    monkeypatch.setattr(worker.injection, "flush_ms", lambda: 0.1)
    sides = {"base": tree, "injected": tree}
    record = worker.run_paired(sides, r"Fam\(1\)", {"injected": 0.02})["gemm.Fam(1)"]
    steps = record.injection["injected"].steps
    lines = [x for x in capsys.readouterr().err.splitlines() if "injection step" in x]
    assert len(lines) == len(steps) >= 2
    # The fake kernel takes 1 ms: 50 ms of kernel time is 50 launches a side, within the
    # GPU budget, in whole trials of the gate's 6 launches: 9 trials, 54 launches.
    assert lines[0].startswith(
        f"  gemm.Fam(1): injection step 1/{worker.inject.MAX_STEPS}: 19800 cycles, "
        "54 launches a side, "
        f"seen {seen(19800):+.3%} for +2.00% ("
    )


def neighbour_timer(launch_order, seen_of_cycles, after_delayed=0.01):
    """Stands in for interleave.interleaved on a short kernel whose time depends on the
    launch before it: the launches in the real rotation (``launch_order``), one sequence
    across trials; a plain launch takes 1 ms, a delayed one ``1 + seen_of_cycles(cycles)``
    ms, and any launch right after a delayed one ``after_delayed`` ms more."""

    def interleaved(fns, trials=20, launches=6, **kw):
        out = [[[] for _ in range(trials)] for _ in fns]
        before_delayed = False
        for t in range(trials):
            for j in range(launches):
                for f in launch_order(len(fns), t, j, launches):
                    got = fns[f]()
                    delayed = isinstance(got, tuple)
                    ms = 1.0 + (seen_of_cycles(got[2]) if delayed else 0.0)
                    out[f][t].append(ms + (after_delayed if before_delayed else 0.0))
                    before_delayed = delayed
        return out

    return interleaved


def test_the_injection_is_calibrated_on_the_gates_own_trials(worker, monkeypatch, tmp_path):
    """Every launch right after the delayed kernel takes 1% longer. Two kernels in turn
    (plain, delayed) each follow it equally often, and a pair's ratio cancels it; in the
    gate's trials of three sides base follows it in half its launches and the injected
    side never, so the gate sees half a point less than a two-kernel calibration. The
    calibration measures the gate's own trials: the gate sees the request."""
    tree = _tree(tmp_path / "a", "base", delay=True)
    seen = lambda cycles: 0.005 + 1e-6 * cycles  # noqa: E731
    timer = neighbour_timer(worker.interleave.launch_order, seen)
    monkeypatch.setattr(worker.interleave, "interleaved", timer)
    monkeypatch.setattr(worker.injection, "sleep_cycles_per_ms", lambda median_ms: 1.98e6)
    monkeypatch.setattr(worker.injection, "sm_count", lambda: 132)
    monkeypatch.setattr(worker.injection, "flush_ms", lambda: 0.1)
    sides = {"base": tree, "head": tree, "injected": tree}
    entry = worker.run_paired(sides, r"Fam\(1\)", {"injected": 0.02})["gemm.Fam(1)"]
    gate_seen = statistics.median(entry.ratios["injected"]) - 1.0
    assert abs(gate_seen - 0.02) <= worker.inject.CALIBRATION_TOLERANCE
    record = entry.injection["injected"]
    # The calibration saw what the gate did (its steps run fewer trials than the gate,
    # whose rounds of permutations are shuffled apart, so to within a tenth of a point).
    assert record.seen == pytest.approx(gate_seen, abs=1e-3)
    # The model tells the rotations apart: the same cycles, two kernels in turn, pair by
    # pair (how the injection was calibrated before), miss what the gate sees.
    plain, slowed = lambda: "base", lambda: ("delayed", "base", record.cycles)
    ms = timer([plain, slowed], trials=1, launches=600)
    pairs = statistics.median(s / p for p, s in zip(ms[0][0], ms[1][0], strict=True)) - 1.0
    assert pairs - gate_seen > worker.inject.TOLERANCE


def test_two_delayed_sides_are_rechecked_once_every_delay_is_set(worker, monkeypatch, tmp_path):
    """A delayed kernel here runs faster the more the other delayed side spins (as the
    H200 showed: a 2% side calibrated at +2.08% was seen at +1.74% once a 1% side ran
    its delay). Calibrated one after the other, the first side would be seen at +1.52%;
    rechecked with both delays set, the gate sees what was asked of each."""
    tree = _tree(tmp_path / "a", "base", delay=True)
    launched = []

    def interleaved(fns, trials=10, launches=10, **kw):
        got = [fn() for fn in fns]
        launched.append(got)
        spins = [g[2] if isinstance(g, tuple) else 0 for g in got]
        ms = [
            1.0 + (1e-6 * c - 0.3e-6 * (sum(spins) - c) if isinstance(g, tuple) else 0.0)
            for g, c in zip(got, spins, strict=True)
        ]
        return [[[m] * launches for _ in range(trials)] for m in ms]

    monkeypatch.setattr(worker.interleave, "interleaved", interleaved)
    monkeypatch.setattr(worker.injection, "sleep_cycles_per_ms", lambda median_ms: 1.98e6)
    monkeypatch.setattr(worker.injection, "sm_count", lambda: 132)
    monkeypatch.setattr(worker.injection, "flush_ms", lambda: 0.1)
    sides = {"base": tree, "head": tree, "two": tree, "one": tree}
    entry = worker.run_paired(sides, r"Fam\(1\)", {"two": 0.02, "one": 0.01})["gemm.Fam(1)"]
    seen = {side: statistics.median(entry.ratios[side]) - 1.0 for side in ("two", "one")}
    assert abs(seen["two"] - 0.02) <= worker.inject.CALIBRATION_TOLERANCE
    assert abs(seen["one"] - 0.01) <= worker.inject.TOLERANCE
    record = entry.injection["two"]
    assert record.seen == pytest.approx(seen["two"], abs=1e-9)
    # Its first calibration's steps are kept, then the recheck that found it moved.
    rechecked = [s for s in record.steps if abs(s[1] - 0.0152) < 0.002]
    assert rechecked and record.cycles > rechecked[0][0]


def test_injecting_the_first_side_is_a_usage_error(worker, monkeypatch, tmp_path, capsys):
    """Every ratio is taken against the first side: injecting it calibrates nothing."""
    tree = _tree(tmp_path / "a", "base", delay=True)
    argv = ["worker.py", "--side", f"base={tree}", "--side", f"head={tree}"]
    argv += ["--out", str(tmp_path / "out.json"), "--inject", "base=0.02"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_:
        worker.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--inject base=...: base is the first --side" in err
    assert "Traceback" not in err and not (tmp_path / "out.json").exists()
    with pytest.raises(RuntimeError, match="the injected side is this benchmark's first side"):
        worker.paired_seen([lambda: None], 0, 1, 6)


def _cycles_file(path, slowdown=0.02, cycles=None):
    record = {"version": 1, "slowdown": slowdown, "cycles": cycles or {"gemm.Fam(1)": 10}}
    path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda p: p / "none.json", ["--inject", "injected=0.02"], "cannot read it"),
        (lambda p: _write(p / "bad.json", "{"), ["--inject", "injected=0.02"], "not valid JSON"),
        (lambda p: _cycles_file(p / "c.json", 0.01), ["--inject", "injected=0.02"], "for 1.00%"),
        (
            lambda p: _cycles_file(p / "c.json", cycles={"gemm.Fam(1)": -3}),
            ["--inject", "injected=0.02"],
            "cycles['gemm.Fam(1)']=-3: must be an integer >= 1",
        ),
        (lambda p: _cycles_file(p / "c.json"), [], "needs --inject SIDE=FRACTION"),
    ],
)
def test_a_bad_inject_cycles_file_is_a_usage_error_naming_the_option(
    worker, monkeypatch, tmp_path, capsys, make, extra, message
):
    tree = _tree(tmp_path / "a", "base", delay=True)
    path = make(tmp_path)
    argv = ["worker.py", "--side", f"base={tree}", "--side", f"injected={tree}"]
    argv += ["--out", str(tmp_path / "out.json"), "--inject-cycles", str(path), *extra]
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer([]))
    with pytest.raises(SystemExit) as exit_:
        worker.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--inject-cycles" in err and message in err
    assert "Traceback" not in err and not (tmp_path / "out.json").exists()


def _write(path, text):
    path.write_text(text)
    return path


CONTRACT_SUITE = """
import kernels


class Fam:
    params = ([1, 2],)
    param_names = ["x"]

    def combination(self, x, device=None):
        if x == 2 and kernels.REVISION == "head":
            raise ValueError("GemmConfig.x=2: invalid on head")
        return "fake", Shape(), Config()

    def track_latency(self, *params):
        pass

    def track_vs_torch(self, *params):
        pass


class Shape:
    id = "s1"


class Config:
    id = "c1"
"""

CONTRACT_REGISTRY = """
import kernels


class Tensor:
    shape, dtype = (4, 4), "float16"


class Inputs:
    def __init__(self):
        self.a, self.b, self.out = Tensor(), Tensor(), Tensor()
        self.made_by = kernels.REVISION


class Op:
    def validate(self, shape, config):
        pass

    def inputs(self, shape, seed, device="cuda"):
        return Inputs()


def operator(name):
    assert name == "fake"
    return Op()


def build_combination(op, shape, config, device=None):
    if kernels.BROKEN:
        raise RuntimeError("does not compile")
    revision = kernels.REVISION
    return lambda inputs: lambda: (revision, inputs.made_by)
"""


def _contract_tree(root: Path, revision: str, broken: bool = False) -> Path:
    """A revision on the operator contract: its families name (operator, shape, config)
    and its registry builds them; no ``prepare`` anywhere."""
    _tree(root, revision, broken)
    (root / "suite" / "gemm.py").write_text(CONTRACT_SUITE)
    (root / "harness" / "ops").mkdir()
    (root / "harness" / "ops" / "__init__.py").write_text("")
    (root / "harness" / "ops" / "registry.py").write_text(CONTRACT_REGISTRY)
    return root


def test_a_side_on_the_contract_is_built_by_the_walk_through_its_own_registry(
    worker, monkeypatch, tmp_path
):
    """Base before the contract (its suite's prepare), head on it (discovery's walk through
    head's registry): each launches its own kernel, head's on base's inputs."""
    base = _tree(tmp_path / "a", "base")
    head = _contract_tree(tmp_path / "b", "head")
    launched = []
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer(launched))
    results = worker.run_paired({"head": head, "base": base}, None, {})
    assert launched[0] == [("head", "head"), "base"]
    assert results["gemm.Fam(2)"].sides["head"].skipped == "GemmConfig.x=2: invalid on head"


def test_contract_sides_launch_on_the_first_sides_inputs(worker, monkeypatch, tmp_path):
    head = _contract_tree(tmp_path / "b", "head")
    two = _contract_tree(tmp_path / "c", "two")
    launched = []
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer(launched))
    results = worker.run_paired({"head": head, "two": two}, r"Fam\(1\)", {})
    assert launched == [[("head", "head"), ("two", "head")]]  # one set of inputs
    assert results["gemm.Fam(1)"].shared_inputs is True


def test_a_contract_sides_failed_compile_names_the_combination(worker, monkeypatch, tmp_path):
    base = _contract_tree(tmp_path / "a", "base")
    head = _contract_tree(tmp_path / "b", "head", broken=True)
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer([]))
    results = worker.run_paired({"base": base, "head": head}, r"Fam\(1\)", {})
    error = results["gemm.Fam(1)"].sides["head"].error
    assert (
        "BuildFailed: gemm.Fam(1) [fake s1 c1]: RuntimeError" in error
        and "does not compile" in error
    )
    assert results["gemm.Fam(1)"].sides["base"].latency


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read it"),
        ("[1]", "must be an object"),
        ('{"a": 0}', "must be an object"),
        ('{"a": 1.5}', "must be an object"),
    ],
)
def test_a_bad_launch_scale_file_is_a_usage_error_naming_the_option(
    worker, tmp_path, capsys, text, message
):
    import argparse

    path = tmp_path / "scales.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        worker.launch_scales(argparse.ArgumentParser(), path)
    assert exit_.value.code == 2
    assert f"--launch-scale={path}: {message}" in capsys.readouterr().err


def test_a_launch_scale_file_gives_each_benchmark_its_scale(worker, tmp_path):
    path = tmp_path / "scales.json"
    path.write_text('{"a": 3}')
    assert worker.launch_scales(None, path) == {"a": 3}
    assert worker.launch_scales(None, None) == {}


def test_a_scaled_benchmark_gets_its_scale_times_the_launches(worker, monkeypatch, tmp_path):
    base, head = _tree(tmp_path / "a", "base"), _tree(tmp_path / "b", "head")
    monkeypatch.setattr(worker.interleave, "interleaved", fake_timer([]))
    scales = {"gemm.Fam(1)": 3}
    results = worker.run_paired({"base": base, "head": head}, None, {}, scales=scales)
    own = worker.interleave.launches_for(1.0, 0.1)
    assert results["gemm.Fam(1)"].launches == worker.interleave.launches_for(1.0, 0.1, scale=3)
    assert results["gemm.Fam(1)"].launches > own
    assert results["gemm.Fam(2)"].launches == own
