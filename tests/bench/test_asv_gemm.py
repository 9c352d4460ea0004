"""The asv suite's structure on the CPU: each family measured once in setup_cache, the
tracks reading the cache back, skips and failures per combination, light imports."""

import itertools
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from asv_runner.benchmarks._base import get_setup_cache_key

from asv_bench import gemm
from harness.measure import versus
from harness.measure.timing import Timing
from harness.ops.contract import Baseline
from harness.suite import discovery

ROOT = Path(__file__).resolve().parent.parent.parent
FAMILIES = [
    gemm.Stage,
    gemm.Stage128,
    gemm.Tiles,
    gemm.Attention,
    gemm.Tuned,
    gemm.Launch,
]
BROKEN = "b256x128x64_t256_s3"  # the fake build fails for this config


class Fake(gemm._GpuFamily):
    """A family of three: one valid, one invalid (the config's rule), one that fails to
    compile."""

    params = (["ok", "invalid", "broken"], ["f16"])
    param_names = ["what", "dtype"]

    def case(self, what, dtype):
        if what == "invalid":
            raise ValueError("block_m=100: must be a multiple of 16")
        config = BROKEN if what == "broken" else "b128x128x32_t128_s3"
        return gemm.shape_of("256x256x256", dtype), gemm.config_of(config)


class Compiler:
    """Stands in for the registry's build behind discovery's walk: records the configs it
    builds, and the ``BROKEN`` config fails to compile as TileLang would."""

    def __init__(self):
        self.built = []

    def __call__(self, op, shape, config, device=None):
        if config.id == BROKEN:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        self.built.append(config)
        return lambda inputs: ("kernel", inputs)


@pytest.fixture
def gpu_here(monkeypatch):
    """A GPU as far as the suite can tell: fake inputs and baseline per shape, a fake
    build behind discovery's walk, a fake timer."""
    import harness.measure.timing
    import harness.measure.versus

    monkeypatch.setattr(gemm._device, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(gemm, "_NVML", [None])
    monkeypatch.setattr(gemm, "_INPUTS", {})
    baseline = Baseline("torch.matmul", lambda: "torch")
    monkeypatch.setattr(gemm, "_inputs", lambda combo: ("inputs", baseline))
    monkeypatch.setattr(gemm, "_placement", lambda combo: ("more inputs", baseline))
    from harness.ops import registry

    built = Compiler()
    monkeypatch.setattr(registry, "build_combination", built)

    def measure(fn, repeat=1, **timing):
        ms = 0.4 if fn is baseline.fn else 0.5
        return Timing((ms,) * repeat, "event", 0)

    monkeypatch.setattr(harness.measure.timing, "measure", measure)

    def versus(kernel, ref, trials=harness.measure.versus.TRIALS, *args):
        assert ref is baseline.fn
        return harness.measure.versus.Versus((0.5,) * trials, (0.4,) * trials, 6, "cupti")

    monkeypatch.setattr(harness.measure.versus, "versus", versus)
    return built


def test_without_a_gpu_every_combination_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(gemm._device, "no_gpu_reason", lambda: "no CUDA device visible (test)")
    for family in FAMILIES:
        bench = family()
        cache = bench.setup_cache()
        assert cache == {"no_gpu": "GPU track skipped: no CUDA device visible (test)"}
        for params in itertools.product(*family.params):
            with pytest.raises(NotImplementedError, match="no CUDA device visible"):
                bench.setup(cache, *params)


def test_setup_cache_measures_every_combination_once(gpu_here, capsys):
    cache = Fake().setup_cache()
    entries = cache["combinations"]
    assert list(entries) == [("ok", "f16"), ("invalid", "f16"), ("broken", "f16")]
    ok = entries[("ok", "f16")]
    assert set(ok) == {"track_latency", "track_vs_torch"}
    assert ok["track_vs_torch"] == pytest.approx([0.5 / 0.4] * versus.TRIALS)
    assert ok["track_latency"] == pytest.approx([0.5e-3] * gemm.TIMING["repeat"])
    assert entries[("invalid", "f16")] == {"skipped": "block_m=100: must be a multiple of 16"}
    assert "illegal memory access" in entries[("broken", "f16")]["error"]
    assert "test_asv_gemm.Fake(broken, f16)" in entries[("broken", "f16")]["error"]
    assert "Traceback" in entries[("broken", "f16")]["error"]
    # Plain values only: a track's process unpickles it without torch or the kernels.
    assert pickle.loads(pickle.dumps(cache)) == cache
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("[1/3] test_asv_gemm.Fake(ok, f16): 0.500 ms, kernel/torch 1.250 (")
    assert lines[1].startswith("[2/3] test_asv_gemm.Fake(invalid, f16): skipped: block_m=100")
    assert lines[2].startswith(
        "[3/3] test_asv_gemm.Fake(broken, f16): error: harness.suite.discovery.BuildFailed: "
        "test_asv_gemm.Fake(broken, f16) [gemm m256_n256_k256_f16"
    )
    # The track's error starts with its cause: history keeps a failure's first line.
    with pytest.raises(RuntimeError) as failed:
        Fake().track_latency(cache, "broken", "f16")
    first = str(failed.value).splitlines()[0]
    assert first.startswith("test_asv_gemm.Fake(broken, f16) failed: ")
    assert first.endswith("RuntimeError: CUDA error: an illegal memory access was encountered")


def test_vs_torch_is_measured_over_the_process_inputs_and_fresh_sets(gpu_here, monkeypatch):
    """``track_vs_torch`` pools ``versus.PLACEMENTS`` input sets: the kernel bound to the
    process's cached inputs first, then to fresh sets, each built through the walk."""
    import harness.measure.versus

    seen = []
    fake = harness.measure.versus.versus

    def versus(kernel, ref, trials=harness.measure.versus.TRIALS, *args):
        seen.append((kernel, trials))
        return fake(kernel, ref, trials)

    monkeypatch.setattr(harness.measure.versus, "versus", versus)
    cache = Fake().setup_cache()
    assert [k for k, _ in seen] == [("kernel", "inputs")] + [("kernel", "more inputs")] * (
        harness.measure.versus.PLACEMENTS - 1
    )
    assert sum(n for _, n in seen) == harness.measure.versus.TRIALS
    samples = cache["combinations"][("ok", "f16")]["track_vs_torch"]
    assert len(samples) == harness.measure.versus.TRIALS


def test_setup_cache_measures_only_the_combinations_the_runner_lists(gpu_here, monkeypatch, capsys):

    name = Fake().combination_name(("invalid", "f16"))
    other = "gemm.Stage(4096x4096x4096, 128, 3, f16)"  # another family's: ignored here
    monkeypatch.setenv(discovery.COMBINATIONS_ENV, json.dumps([name, other]))
    assert list(Fake().setup_cache()["combinations"]) == [("invalid", "f16")]
    assert capsys.readouterr().err.startswith("[1/1] test_asv_gemm.Fake(invalid, f16): skipped")
    monkeypatch.setenv(discovery.COMBINATIONS_ENV, '{"not": "a list"}')
    with pytest.raises(ValueError, match="SUITE_COMBINATIONS=.*must be a JSON list of names"):
        Fake().setup_cache()


def test_tracks_read_the_cache_and_fail_or_skip_per_combination(gpu_here):
    bench = Fake()
    cache = bench.setup_cache()
    bench.setup(cache, "ok", "f16")
    got = bench.track_latency(cache, "ok", "f16")
    assert got == {"samples": cache["combinations"][("ok", "f16")]["track_latency"], "number": 1}
    assert bench.track_vs_torch(cache, "ok", "f16")["number"] == 1
    with pytest.raises(NotImplementedError, match="block_m=100"):
        bench.setup(cache, "invalid", "f16")
    bench.setup(cache, "broken", "f16")  # setup passes; the track fails with the error
    cause = (
        r"(?s)Fake\(broken, f16\) failed: .*BuildFailed: .*RuntimeError: CUDA error.*\nTraceback"
    )
    with pytest.raises(RuntimeError, match=cause):
        bench.track_latency(cache, "broken", "f16")


def test_tracks_with_a_fabricated_cache():
    cache = {
        "combinations": {
            ("4096x4096x4096", 128, 3, "f16"): {
                "track_latency": [3.6e-4, 3.7e-4],
                "track_vs_torch": [1.1, 1.12],
            },
            ("128x128x128", "b128x128x32_t128_s3"): {"track_launch": [8e-6, 9e-6]},
        }
    }
    stage = gemm.Stage()
    stage.setup(cache, "4096x4096x4096", 128, 3, "f16")
    assert stage.track_latency(cache, "4096x4096x4096", 128, 3, "f16") == {
        "samples": [3.6e-4, 3.7e-4],
        "number": 1,
    }
    assert stage.track_vs_torch(cache, "4096x4096x4096", 128, 3, "f16")["samples"] == [1.1, 1.12]
    launch = gemm.Launch()
    assert launch.track_launch(cache, "128x128x128", "b128x128x32_t128_s3")["samples"][0] == 8e-6


def test_launch_measures_only_its_launch_track(gpu_here, monkeypatch):
    import harness.measure.timing

    launches = Timing((0.008, 0.009), "wall", 10)
    seen = []
    monkeypatch.setattr(
        harness.measure.timing, "measure_launch", lambda fn: seen.append(fn) or launches
    )
    got = gemm.Launch().measure("128x128x128", "b128x128x32_t128_s3")
    assert got == {"track_launch": pytest.approx([8e-6, 9e-6])}
    assert seen == [("kernel", "inputs")]  # the kernel the walk built, on the inputs


def test_launch_times_torch_matmul_too(gpu_here, monkeypatch):
    import harness.measure.timing

    seen = []
    launches = Timing((0.011,), "wall", 10)
    monkeypatch.setattr(
        harness.measure.timing, "measure_launch", lambda fn: seen.append(fn) or launches
    )
    got = gemm.Launch().measure("128x128x128", gemm.TORCH)
    assert got == {"track_launch": pytest.approx([1.1e-5])}
    assert [fn() for fn in seen] == ["torch"] and gpu_here.built == []  # nothing built


def test_tuned_family_covers_the_tuner_cases_and_picks_the_table(monkeypatch):
    from kernels import tuned

    assert list(gemm.Tuned.params[0]) == list(tuned.CASES)
    # A GPU of 16 SMs: the heuristic for its own count, not another part's.
    spec = gemm._device.DeviceSpec("NVIDIA H200", 16, 232448, 50 * 2**20, (9, 0))
    monkeypatch.setattr(gemm._device, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(gemm._device.DeviceSpec, "read", classmethod(lambda cls, index=0: spec))
    monkeypatch.setattr(tuned, "lookup", lambda shape, gpu, path=None: None)
    shape, config = gemm.Tuned().case("attn_qk_t", "bf16")
    assert (shape.m, shape.n, shape.k, shape.dtype) == (4096, 4096, 128, "bfloat16")
    assert config == tuned.heuristic(shape, 16) and config.persistent == 16  # no row for it


def test_family_tracks_and_shapes():
    assert gemm.Launch.tracks() == ["track_launch"]
    for family in (
        gemm.Stage,
        gemm.Stage128,
        gemm.Tiles,
        gemm.Attention,
        gemm.Tuned,
    ):
        assert family.tracks() == ["track_latency", "track_vs_torch"]
    assert gemm.Stage.params[0] == ["4096x4096x4096"] and gemm.Stage128.params[0] == ["128x128x128"]
    for family in (gemm.Stage, gemm.Stage128):
        assert len(list(itertools.product(*family.params))) == 16
    name = gemm.Stage().combination_name(("4096x4096x4096", 128, 3, "f16"))
    assert name == "gemm.Stage(4096x4096x4096, 128, 3, f16)"


def test_each_family_has_its_own_setup_cache_and_a_long_timeout():
    # asv keys setup_cache by module and source line; a shared key would hand one
    # family's cache to all of them.
    keys = [get_setup_cache_key(family().setup_cache) for family in FAMILIES]
    assert len(set(keys)) == len(keys) and all(k.startswith("gemm:") for k in keys)
    for family in FAMILIES:
        assert family().setup_cache.timeout == gemm.SETUP_CACHE_TIMEOUT >= 1200
        assert family.timeout < gemm.SETUP_CACHE_TIMEOUT


def test_module_imports_light_and_exposes_only_the_families():
    code = (
        "import sys, inspect, asv_bench.gemm as g\n"
        "heavy = ['torch', 'tilelang', 'harness.measure.cases', 'harness.measure.timing',"
        " 'harness.measure.gpu_state']\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "print(sorted(n for n, v in vars(g).items()"
        " if inspect.isclass(v) and not n.startswith('_')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    heavy, classes = out.stdout.splitlines()
    assert heavy == "[]"
    assert classes == str(sorted(f.__name__ for f in FAMILIES))


def test_tuned_family_plans_without_a_gpu_silently(monkeypatch):
    """Planning and precompile call ``case`` on CPU hosts: the shape, and no config (which
    one runs depends on the device), with no warning about a GPU called 'cpu'."""
    import warnings

    monkeypatch.setattr(gemm._device, "no_gpu_reason", lambda: "no CUDA device visible")
    monkeypatch.setattr(gemm._device, "gpu_name", lambda index=0: "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shape, config = gemm.Tuned().case("square4096", "f16")
    assert shape.m == 4096 and config is None


def test_setup_cache_records_its_seconds_where_the_runner_asks(gpu_here, tmp_path, monkeypatch):
    path = tmp_path / "seconds.jsonl"
    monkeypatch.delenv(discovery.SECONDS_ENV, raising=False)
    Fake().setup_cache()
    assert not path.exists()  # a plain asv run records nothing
    monkeypatch.setenv(discovery.SECONDS_ENV, str(path))
    Fake().setup_cache()
    Fake().setup_cache()
    path.write_text(path.read_text() + '{"unit": "cut short", "secon\n')
    got = discovery.read_seconds(path)
    assert list(got) == ["test_asv_gemm.Fake"]  # the damaged line is left out
    spent = got["test_asv_gemm.Fake"]
    assert set(spent["combinations"]) == {
        "test_asv_gemm.Fake(ok, f16)",
        "test_asv_gemm.Fake(invalid, f16)",
        "test_asv_gemm.Fake(broken, f16)",
    }
    assert all(s >= 0 for s in spent["combinations"].values())
    assert spent["seconds"] >= sum(spent["combinations"].values())
    assert discovery.read_seconds(tmp_path / "none.jsonl") == {}


def test_an_unwritable_seconds_file_costs_the_record_not_the_measurements(
    gpu_here, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(discovery.SECONDS_ENV, str(tmp_path / "no-such-folder" / "s.jsonl"))
    cache = Fake().setup_cache()
    assert "track_vs_torch" in cache["combinations"][("ok", "f16")]
    assert "its seconds were not recorded" in capsys.readouterr().err
