"""The gate runner's bookkeeping on the CPU: pooling rounds, discovery, no-GPU exit."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from asv_bench import gemm
from harness.gate import run as gate
from harness.gate import samples as gs
from harness.report.gate import render_markdown
from harness.revisions import calibration, fanout, git, launch, records
from harness.suite import discovery
from tests.conftest import NO_GPU
from tests.fakes import FakeCase, paired_run, process_run

ROOT = Path(__file__).resolve().parent.parent.parent


def _round(rng, base_ms, head_ms, error=None):
    def payload(ms):
        return process_run(
            {
                "gemm.X(a)": {
                    "track_latency": [rng.gauss(ms, ms * 0.01) for _ in range(20)],
                    "track_vs_torch": [rng.gauss(1.1, 0.01) for _ in range(5)],
                },
                "gemm.X(bad)": {"skipped": "invalid combination"},
            }
        )

    head = records.Fatal(error) if error else payload(head_ms)
    return {"base": payload(base_ms), "head": head}


def test_pool_concatenates_rounds_and_drops_skipped():
    rng = random.Random(5)
    samples = gs.pool([_round(rng, 1e-3, 1e-3) for _ in range(3)])
    assert [s.name for s in samples] == ["gemm.X(a)"]
    s = samples[0]
    assert len(s.base) == len(s.head) == 60 and len(s.base_rel) == 15 and s.error is None


def test_pool_marks_a_fatal_side_as_failed():
    rng = random.Random(6)
    samples = gs.pool([_round(rng, 1e-3, 1e-3), _round(rng, 1e-3, 1e-3, error="ImportError")])
    assert samples[0].error == "head: ImportError"


def test_a_benchmark_added_or_removed_by_the_change_is_reported_not_failed():
    from harness.gate import decide as gd

    rng = random.Random(6)
    rounds = [_round(rng, 1e-3, 1e-3) for _ in range(2)]
    for r in rounds:  # head adds gemm.X(new), base alone has gemm.X(old)
        r["head"].results["gemm.X(new)"] = r["head"].results["gemm.X(a)"]
        r["base"].results["gemm.X(old)"] = r["base"].results["gemm.X(a)"]
    by_name = {s.name: s for s in gs.pool(rounds)}
    assert by_name["gemm.X(new)"].missing == "base" and by_name["gemm.X(new)"].error is None
    assert by_name["gemm.X(old)"].missing == "head"
    verdicts = {v.name: v for v in gd.decide_all(by_name.values())}
    assert verdicts["gemm.X(new)"].status == gd.NEW
    assert verdicts["gemm.X(old)"].status == gd.REMOVED
    assert gd.exit_code(verdicts.values()) == 0
    passed = not gd.exit_code(verdicts.values())
    text = render_markdown(verdicts.values(), passed=passed, base_label="main", head_label="pr")
    assert "PASS" in text and "1 new, 1 removed" in text


def test_a_benchmark_missing_from_some_rounds_of_a_side_fails():
    rng = random.Random(7)
    rounds = [_round(rng, 1e-3, 1e-3) for _ in range(2)]
    del rounds[1]["head"].results["gemm.X(a)"]
    (s,) = gs.pool(rounds)
    assert s.missing is None and "missing from 1 of 2 rounds" in s.error


def test_discover_finds_the_gpu_suite(worker_entry):
    discover = worker_entry("listing").common.discover
    names = [name for name, _, _ in discover(ROOT, discovery.gate_subset(ROOT))]
    assert len(names) >= 12
    assert "gemm.Stage(4096x4096x4096, 128, 3, f16)" in names
    assert "gemm.Stage128(128x128x128, 256, 4, f16)" in names
    assert not any(n.startswith("gemm.Launch") for n in names)  # not a gate track
    assert any("qk_t" in n for n in names) and any("8192" in n for n in names)


@pytest.mark.skipif(NO_GPU is None, reason="checks the no-GPU exit; a GPU is present")
def test_gate_without_gpu_exits_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "harness.gate", "HEAD", "HEAD", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert "needs a CUDA GPU" in out.stderr
    # The status is the process's own: no file is left for anyone to read back.
    assert out.returncode == 2 and not (tmp_path / "exit_code").exists()


def test_multi_gpu_gate_keeps_base_and_head_of_a_benchmark_on_one_gpu(monkeypatch, tmp_path):
    names = [f"gemm.S({i})" for i in range(14)]
    calls = []

    def fake_side(tree, bench, out_file, inject=0.0, gpu=None, only=None):
        shard = json.loads(only.read_text())
        calls.append((tree, gpu, tuple(shard)))
        rng = random.Random(hash((tree, gpu)))
        return process_run(
            {
                n: {
                    "track_latency": [rng.gauss(1e-3, 1e-5) for _ in range(5)],
                    "track_vs_torch": [1.0],
                    "gpu": {"sm_mhz": gpu},  # the GPU that ran it
                }
                for n in shard
            }
        )

    monkeypatch.setattr(launch, "run_worker", fake_side)
    monkeypatch.setattr(launch, "listing", lambda tree, bench, out: records.Listing(names))
    trees = {"base": "B", "head": "H"}
    rounds = fanout.interleave_gpus(trees, ".", 2, tmp_path, [0, 1], log=lambda line: None)
    assert len(rounds) == 2
    for r in rounds:
        assert sorted(r["base"].results) == sorted(r["head"].results) == sorted(names)
        for n in names:
            assert r["base"].results[n].gpu == r["head"].results[n].gpu
    shards = {gpu: set(shard) for _, gpu, shard in calls}
    assert shards[0].isdisjoint(shards[1]) and len(shards[0]) == len(shards[1]) == 7
    assert len(calls) == 2 * 2 * 2  # sides x rounds x GPUs
    samples = gs.pool(rounds)
    assert len(samples) == 14 and all(len(s.base) == 10 for s in samples)


def test_merge_keeps_a_fatal_shard_visible():
    merged = fanout.merge([process_run({"a": {}}), records.Fatal("ImportError")])
    assert merged == records.Fatal("ImportError")
    # Paired shards that each name the side that did not import keep naming it.
    head = records.Fatal("SyntaxError", side="head")
    assert fanout.merge([head, head]) == head
    assert fanout.merge([head, records.Fatal("OOM", side="base")]).side is None


def test_missing_calibration_file_is_refused_before_measuring(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.gate",
            "HEAD",
            "HEAD",
            "--out",
            str(tmp_path),
            "--calibration",
            str(tmp_path / "nope.json"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 2 and "--calibration=" in out.stderr and "no such file" in out.stderr


def test_bad_rounds_and_threshold_name_the_rule():
    for args, message in (
        (["--rounds", "0"], "0 must be >= 1"),
        (["--threshold", "5"], "must be a fraction between 0 and 1"),
    ):
        out = subprocess.run(
            [sys.executable, "-m", "harness.gate", "HEAD", "HEAD", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert out.returncode == 2 and message in out.stderr


def test_run_side_passes_the_worker_its_options(monkeypatch, tmp_path):
    calls = []

    def fake_run(cmd, env, cwd, check):
        calls.append((cmd, env))
        Path(cmd[cmd.index("--out") + 1]).write_text(records.to_json(records.ProcessRun({})))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(launch.subprocess, "run", fake_run)
    only = tmp_path / "shard.json"
    launch.run_worker(tmp_path, "Stage", tmp_path / "a.json", inject=0.03, gpu=1, only=only)
    launch.listing(tmp_path, "Stage", tmp_path / "b.json")
    launch.run_worker(tmp_path, "Stage", tmp_path / "c.json")
    (slowed, env), (listing, _), (plain, _) = calls
    assert slowed[1].endswith("process.py") and listing[1].endswith("listing.py")
    assert slowed[slowed.index("--inject-slowdown") + 1] == "0.03"
    assert slowed[slowed.index("--only") + 1] == str(only) and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert "--inject-slowdown" not in listing
    assert not {"--only", "--inject-slowdown"} & set(plain)


def test_worker_measures_each_combination_with_the_suite(monkeypatch, worker_entry):
    def fake_measure(self, *params):
        if params[2] == 4:
            raise NotImplementedError("num_stages=4: too much shared memory")
        if params[1] == 256 and params[2] == 1:
            raise RuntimeError("boom")
        return {"track_latency": (1e-3, 1.1e-3), "track_vs_torch": (1.0,)}

    monkeypatch.setattr(gemm._GpuFamily, "measure", fake_measure)
    results = worker_entry("process").run(ROOT, r"gemm\.Stage128\(")
    assert len(results) == 16
    ok = results["gemm.Stage128(128x128x128, 128, 3, f16)"]
    assert ok.track_latency == (1e-3, 1.1e-3) and ok.track_vs_torch == (1.0,)
    assert results["gemm.Stage128(128x128x128, 128, 4, bf16)"].skipped.startswith("num_stages")
    assert results["gemm.Stage128(128x128x128, 256, 1, f16)"].error == "RuntimeError: boom"


def test_worker_runs_a_suite_from_before_setup_cache(worker_entry):
    class Old:  # a base revision's class: setup(*params), then each track(*params)
        def setup(self, *params):
            self.params = params

        def track_latency(self, *params):
            return {"samples": [2e-3], "number": 1}

        def track_vs_torch(self, *params):
            return {"samples": [1.2], "number": 1}

    got = worker_entry("process").measure(Old(), ("x",))
    assert got == {"track_latency": (2e-3,), "track_vs_torch": (1.2,)}


class _Bench:
    def __init__(self, data):
        self.data = data

    def prepare(self, *params):
        return self.data, "cfg"


class _DelayedKernel:
    """Stands in for a kernel built with the test-only delay: 8 blocks, and a launch
    records the cycles it spun."""

    blocks = 8

    def __init__(self, launches):
        self.delay_cycles = 0
        self.launches = launches

    def __call__(self, a, b, out):
        self.launches.append(self.delay_cycles)


def test_injection_launches_a_delayed_build_calibrated_to_the_request(monkeypatch, worker_entry):
    """Process mode: the copy's kernel is the delayed build, its cycles set until the
    revision's timer sees the asked fraction; the shared inputs' own path is untouched."""
    launches = []
    kernel = _DelayedKernel(launches)
    process = worker_entry("process")
    monkeypatch.setattr(process.injection, "delayed_kernel", lambda data, config: kernel)
    monkeypatch.setattr(process.common, "paired_median_ms", lambda fn, launches=5: 0.05)
    # What the timer sees: a fixed cost of the spin plus a share proportional to cycles.
    monkeypatch.setattr(
        process, "tree_seen", lambda plain, slowed, pairs: 0.004 + 2e-6 * kernel.delay_cycles
    )
    shared = FakeCase()
    shared.a = shared.b = shared.out = None  # the inputs the delayed kernel is given
    bench = _Bench(shared)
    entry = {}
    process.inject_slowdown(bench, 0.02, clock=(1.98e6, 132, 0.1), entry=entry)
    data, config = bench.prepare("a")
    assert data is not shared and "tilelang_fn" not in vars(shared)
    data.time_tilelang(config)
    record = entry["injection"]
    assert record.requested == 0.02
    assert abs(record.seen - 0.02) <= 0.001
    assert launches == [record.cycles] == [kernel.delay_cycles]
    # The first guess: 2% of 0.05 ms at 1.98e6 cycles/ms, one wave (8 blocks, 132 SMs).
    assert record.steps[0][0] == 1980
    shared.time_tilelang("cfg")  # the shared inputs' own launch path is untouched
    assert launches == [record.cycles] and shared.launches == 1


def _fake_paired_run(slow_names, calls):
    """Stands in for launch.run_paired: head's kernels of ``slow_names`` are 5% slower."""

    def run_paired(trees, bench, out_file, inject=None, gpu=None, only=None, **kw):
        calls.append({"sides": list(trees), "gpu": gpu})
        rng = random.Random(len(calls))
        results = {}
        for name in ("gemm.S(0)", "gemm.S(1)"):
            factor = 1.05 if name in slow_names else 1.0
            ratios = [factor * rng.gauss(1.0, 0.001) for _ in range(10)]
            results[name] = {
                "sides": {
                    "base": {"latency": [1e-3] * 10},
                    "head": {"latency": [1e-3 * r for r in ratios]},
                },
                "ratios": {"base": [1.0] * 10, "head": ratios},
            }
        return paired_run(results)

    return run_paired


@pytest.fixture
def fake_gate(monkeypatch, tmp_path):
    """compare() with no git worktrees, compiles or GPU: the pieces it calls, faked."""
    monkeypatch.setattr(git, "worktree", lambda out, side, sha: tmp_path / side)
    monkeypatch.setattr(launch, "precompile", lambda *a, **kw: None)
    monkeypatch.setattr(gate, "calibration_path", lambda: tmp_path / "none.json")
    monkeypatch.setattr("harness.measure.device.gpu_name", lambda: "NVIDIA H200")
    monkeypatch.setattr("harness.measure.device.versions", lambda: {"tilelang": "0.1.15"})
    resources_calls = []

    def resources(tree, names, out_file, site=None):
        resources_calls.append((tree.name, tuple(names)))
        regs = 168 if tree.name == "base" else 232
        return records.Resources(
            {
                n: {
                    "registers": regs,
                    "smem_bytes": 1024,
                    "spill_bytes": 0,
                    "has_wgmma": True,
                    "has_tma": tree.name == "base",
                }
                for n in names
            }
        )

    monkeypatch.setattr(launch, "resources", resources)
    return resources_calls


def test_paired_gate_flags_the_slow_kernel_and_shows_its_resources(
    fake_gate, monkeypatch, tmp_path
):
    calls = []
    monkeypatch.setattr(launch, "run_paired", _fake_paired_run({"gemm.S(1)"}, calls))
    shas = {"base": "a" * 40, "head": "b" * 40}
    result = gate.compare(shas, ".", None, tmp_path, method="paired", log=lambda line: None)
    assert len(calls) == 1 and calls[0]["sides"] == ["base", "head"]
    status = {v.name: v.status for v in result.verdicts}
    assert status == {"gemm.S(0)": "unchanged", "gemm.S(1)": "regression"}
    assert result.code == 1 and result.method == "paired"
    assert {v.threshold for v in result.verdicts} == {0.01}
    # Evidence: only the regressed benchmark, both sides, base -> head in the report.
    assert sorted(fake_gate) == [("base", ("gemm.S(1)",)), ("head", ("gemm.S(1)",))]
    assert "**168 → 232**" in result.report and "**yes → no**" in result.report
    assert "paired" in result.report


def test_paired_gate_without_regression_reads_no_resources(fake_gate, monkeypatch, tmp_path):
    monkeypatch.setattr(launch, "run_paired", _fake_paired_run(set(), []))
    shas = {"base": "a" * 40, "head": "b" * 40}
    result = gate.compare(shas, ".", 2, tmp_path, method="paired", log=lambda line: None)
    assert result.code == 0 and fake_gate == [] and "Compiled resources" not in result.report
    # Two paired processes pool their trials.
    assert all(len(s) == 20 for s in [gs.pool_paired(result.rounds)[0].ratios])


def test_auto_takes_process_when_head_changes_the_measuring_code(monkeypatch):
    monkeypatch.setattr(git, "changed_files", lambda b, h, cwd: ["harness/measure/timing.py"])
    monkeypatch.setattr(git, "has_prepare", lambda sha, cwd: True)
    method, why = gate.choose_method("auto", {"base": "a", "head": "b"})
    assert method == "process" and "harness/measure/timing.py" in why
    monkeypatch.setattr(git, "changed_files", lambda b, h, cwd: ["kernels/gemm.py"])
    assert gate.choose_method("auto", {"base": "a", "head": "b"})[0] == "paired"
    monkeypatch.setattr(git, "has_prepare", lambda sha, cwd: False)
    assert gate.choose_method("auto", {"base": "a", "head": "b"})[0] == "process"
    assert gate.choose_method("paired", {"base": "a", "head": "b"}) == ("paired", "as asked")


def test_pool_paired_marks_a_side_error_and_a_benchmark_head_added():
    payload = paired_run(
        {
            "gemm.S(0)": {"sides": {"base": {"latency": [1e-3]}, "head": {"error": "boom"}}},
            "gemm.S(1)": {"sides": {"head": {"latency": [1e-3]}}, "ratios": {}},
        }
    )
    got = {s.name: s for s in gs.pool_paired([payload])}
    assert got["gemm.S(0)"].error == "head: boom"
    assert got["gemm.S(1)"].missing == "base"


def _worker(mode, *args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, str(ROOT / "harness" / "gate" / "worker" / f"{mode}.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def test_the_worker_runs_as_a_script(tmp_path):
    # Run as a script, the worker's folder must not shadow the standard library's modules.
    out = tmp_path / "names.json"
    proc = _worker("listing", "--tree", str(ROOT), "--out", str(out), "--bench", r"gemm\.Tuned")
    assert proc.returncode == 0, proc.stderr
    assert "gemm.Tuned(square4096, f16)" in records.from_json(out.read_text()).names


@pytest.mark.parametrize("mode", ["process", "paired", "listing", "resources"])
def test_every_worker_entry_point_starts_as_a_script(mode, tmp_path):
    # Its folder comes first on sys.path: nothing there may stand in for the standard
    # library's bisect, which statistics (imported by the worker) imports.
    proc = _worker(mode, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--out" in proc.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--side", "base"], "'base': must be NAME=WORKTREE"),
        (["--side", "a=x", "--inject", "a=1.5"], "'a=1.5': 1.5 must be a fraction"),
        (["--side", "a=x", "--inject", "a=two"], "'a=two': could not convert"),
        (["--side", "a=x", "--trials", "0"], "--trials: '0' must be an integer >= 1"),
        (["--side", "a=x", "--launches", "-2"], "--launches: '-2' must be an integer >= 1"),
    ],
)
def test_worker_options_name_the_field_and_rule(args, message, tmp_path):
    proc = _worker("paired", *args, "--out", str(tmp_path / "x.json"))
    assert proc.returncode == 2 and message in proc.stderr


def test_paired_trials_give_short_kernels_more_launches(monkeypatch, tmp_path, worker_entry):
    """Default launches: each benchmark's from its own kernel time, recorded per entry;
    a given --launches holds for every benchmark."""
    kernel_ms = {"gemm.Short()": 0.009, "gemm.Long()": 2.0}

    class Data:
        def __init__(self, name):
            self.a = self.b = self.out = object()
            self.name = name

        def tilelang_fn(self, config):
            return lambda: kernel_ms[self.name]

    def prepare_side(tree, trees, pattern, only, delayed=False):
        return {n: {"data": Data(n), "config": "cfg"} for n in kernel_ms}

    asked = {}

    def paired_times(fns, trials, launches):
        ms = fns[0]()
        if trials > 1:  # the trials, not the one-trial median that sizes them
            asked.setdefault(ms, set()).add(launches)
        return [[[ms] * launches for _ in range(trials)] for _ in fns]

    paired = worker_entry("paired")
    monkeypatch.setattr(paired, "prepare_side", prepare_side)
    monkeypatch.setattr(paired.common, "paired_times", paired_times)
    monkeypatch.setattr(paired.injection, "flush_ms", lambda: 0.1)
    monkeypatch.setattr(paired.common, "tree_module", lambda *names: _NoNvml)
    sides = {"base": tmp_path / "a", "head": tmp_path / "b"}
    out = paired.run_paired(sides, None, {})
    short, long = out["gemm.Short()"].launches, out["gemm.Long()"].launches
    assert short == paired.interleave.launches_for(0.009, 0.1) > long
    assert asked == {0.009: {short}, 2.0: {long}}
    assert len(out["gemm.Short()"].ratios["head"]) == 20
    fixed = paired.run_paired(sides, None, {}, launches=12)
    assert {e.launches for e in fixed.values()} == {12}


class _NoNvml:
    @staticmethod
    def open_nvml():
        return None


def test_the_gate_runs_noisy_benchmarks_at_their_launch_scale_and_says_so(
    fake_gate, monkeypatch, tmp_path
):
    calls, given = [], []
    fake = _fake_paired_run(set(), calls)

    def run_paired(*args, launch_scale=None, **kw):
        given.append(launch_scale)
        return fake(*args, **kw)

    monkeypatch.setattr(launch, "run_paired", run_paired)
    cal = tmp_path / "h200.json"
    benchmarks = {
        "gemm.S(0)": calibration.Benchmark(threshold=0.01, launch_scale=3),
        "gemm.S(1)": calibration.Benchmark(threshold=0.01),
    }
    calibration.write(cal, calibration.Calibration(method="paired", benchmarks=benchmarks))
    shas = {"base": "a" * 40, "head": "b" * 40}
    result = gate.compare(shas, ".", 1, tmp_path / "out", calibration=cal, method="paired")
    assert json.loads(given[0].read_text()) == {"gemm.S(0)": 3}
    assert "more per trial for noisy benchmarks (h200.json): gemm.S(0) x3" in result.report
