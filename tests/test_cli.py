"""The training-stage CLIs (bench_gemm, tune_gemm) on the CPU: argument checks, the
no-GPU path, sweeps with fake cases (a failing config, run ids) and replay of recorded
runs."""

import json
import math
import subprocess
import sys

import pytest

from benchmarks import bench_gemm
from harness import cli
from tests.conftest import NO_GPU
from tests.fakes import FakeCase


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_gemm", *args], capture_output=True, text=True
    )


def test_help_explains_itself():
    out = _run("--help")
    assert out.returncode == 0
    for word in ("--run-tilelang", "--warmup", "--repeat", "--num-stages", "TFLOPS", "--report"):
        assert word in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--m", "0"], "argument --m: 0 must be >= 1"),
        (["--repeat", "0"], "argument --repeat: 0 must be >= 1"),
        (["--warmup", "-3"], "argument --warmup: -3 must be >= 0"),
        (["--dtype", "float32"], "argument --dtype: invalid choice"),
        (["--shape", "12x4"], "must be MxNxK"),
        (["--threads", "96"], "GemmConfig.threads=96: must be >= 128"),
    ],
)
def test_bad_input_names_the_field(args, message):
    out = _run(*args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_sweep_plan_keeps_rejected_combinations_with_reason():
    args = bench_gemm.build_parser().parse_args(
        [
            "--m",
            "128",
            "256",
            "--threads",
            "128",
            "256",
            "--num-stages",
            "2",
            "3",
            "--block-k",
            "8",
            "32",
        ]
    )
    shapes, entries = bench_gemm.plan(args)
    assert [s.m for s in shapes] == [128, 256]
    configs = [e for e in entries if isinstance(e, bench_gemm.GemmConfig)]
    rejected = [e for e in entries if isinstance(e, bench_gemm.Rejected)]
    assert {(c.threads, c.num_stages) for c in configs} == {
        (t, s) for t in (128, 256) for s in (2, 3)
    }
    assert {c.block_k for c in configs} == {32}
    assert len(rejected) == 4 and all("block_k=8: must be >= 16" in e.error for e in rejected)
    assert {e.requested["block_k"] for e in rejected} == {8}
    assert rejected[0].label == "b128x128x8_t128_s2"


def test_config_alone_sweeps_only_the_configs_named_and_knobs_add_their_product():
    named = ["b64x64x128_t128_s6_k4", "b128x192x64_t256_s4_pr_e"]
    args = bench_gemm.build_parser().parse_args(["--config", *named])
    _, entries = bench_gemm.plan(args)
    assert [e.id for e in entries] == named

    args = bench_gemm.build_parser().parse_args(["--threads", "256", "--config", named[0]])
    _, entries = bench_gemm.plan(args)
    baseline = bench_gemm.GemmConfig()
    assert [e.id for e in entries] == [
        bench_gemm.GemmConfig(
            baseline.block_m, baseline.block_n, baseline.block_k, 256, baseline.num_stages
        ).id,
        named[0],
    ]

    _, entries = bench_gemm.plan(bench_gemm.build_parser().parse_args([]))
    assert entries == [baseline]


def test_explicit_shapes_replace_the_product():
    args = bench_gemm.build_parser().parse_args(["--shape", "128x128x128", "4096x4096x4096"])
    shapes, _ = bench_gemm.plan(args)
    assert [(s.m, s.n, s.k) for s in shapes] == [(128, 128, 128), (4096, 4096, 4096)]


def test_a_shapes_file_gives_each_shape_its_dtype_and_layout(tmp_path):
    entries = [
        {"m": 3341, "n": 4104, "k": 1459, "dtype": "bfloat16", "layout": "NN"},
        {"m": 2256, "n": 1688, "k": 3608, "dtype": "float16", "layout": "NT"},
    ]
    path = tmp_path / "shapes.json"
    path.write_text(
        json.dumps({"shapes": [{**e, "categories": ["non_multiple"]} for e in entries]})
    )
    args = bench_gemm.build_parser().parse_args(
        ["--shapes", str(path), "--config", "b128x192x64_t256_s4_pr_e"]
    )
    shapes, entries_planned = bench_gemm.plan(args)
    assert [(s.m, s.n, s.k, s.dtype, s.layout) for s in shapes] == [
        tuple(e.values()) for e in entries
    ]
    assert bench_gemm.GemmConfig.from_id("b128x192x64_t256_s4_pr_e") in entries_planned


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--dtype", "bfloat16"],
            "--shapes: each entry names its own size, dtype and layout, so it takes no --dtype",
        ),
        (["--shape", "128x128x128", "--layout", "NT"], "so it takes no --shape/--layout"),
        (["--m", "256"], "so it takes no --m"),
    ],
)
def test_a_shapes_file_takes_no_other_problem_options(extra, message):
    out = _run("--shapes", "reports/offtable_random5_shapes.json", *extra)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_a_bad_shapes_file_names_the_entry_and_the_rule(tmp_path):
    path = tmp_path / "shapes.json"
    entry = {"m": 4096, "n": 512, "k": 4096, "dtype": "float16", "layout": "NN"}
    path.write_text(json.dumps({"shapes": [{**entry, "categories": ["mid"]}]}))
    out = _run("--shapes", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"--shapes: {path}: shapes[0]: categories: m4096_n512_k4096_f16 is not mid" in out.stderr
    out = _run("--shapes", str(tmp_path / "missing.json"))
    assert out.returncode == 2 and "--shapes: " in out.stderr and "cannot read" in out.stderr


@pytest.mark.skipif(NO_GPU is None, reason="checks the no-GPU message; a GPU is present")
def test_without_gpu_one_line_and_nonzero():
    out = _run("--m", "128", "--n", "128", "--k", "128", "--run-tilelang")
    assert out.returncode == cli.EXIT_NO_GPU
    assert out.stderr.strip().count("\n") == 0
    assert "no CUDA device" in out.stderr and "Traceback" not in out.stderr


def test_replay_renders_a_recorded_sweep_without_a_gpu(tmp_path):
    report = tmp_path / "r.md"
    out = _run("--replay", "reports/stage04_gemm.jsonl", "--report", str(report))
    assert out.returncode == 0, out.stderr
    text = report.read_text()
    assert "NVIDIA H200" in text and "## Benchmark Table" in text
    assert text.count("**best**") == 2  # one per recorded shape


def test_replay_round_trips_rows():
    run, notes = bench_gemm.load_run(bench_gemm.Path("reports/stage04_gemm.jsonl"))
    assert run.meta["gpu"] == "NVIDIA H200" and len(run.rows) >= 3 and notes == []
    assert run.id == "legacy"  # recorded before rows carried a run id
    again = type(run.rows[0]).from_dict(run.rows[0].to_dict())
    assert again.to_dict() == run.rows[0].to_dict()


def test_replay_of_empty_file_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = _run("--replay", str(empty))
    assert out.returncode == 2 and "holds no measured rows" in out.stderr


def test_replay_with_the_tuned_table_adds_the_section_and_plots(tmp_path):
    report = tmp_path / "r.md"
    out = _run(
        "--replay",
        "reports/stage04_gemm.jsonl",
        "--report",
        str(report),
        "--tuned",
        "kernels/tuned_configs.json",
        "--tune-log",
        "reports/tune_h200.jsonl",
    )
    assert out.returncode == 0, out.stderr
    text = report.read_text()
    assert "## Tuned Configs" in text and "| square4096 |" in text
    assert "Re-tuned since" not in text  # no --retune-log
    for png in ("r_roofline.png", "r_tflops_4096.png"):
        assert f"]({png})" in text and (tmp_path / png).stat().st_size > 5000


def test_replay_with_off_table_records_adds_their_tables_and_points(tmp_path):
    report = tmp_path / "r.md"
    out = _run(
        "--replay",
        "reports/stage04_gemm.jsonl",
        "--report",
        str(report),
        "--tuned",
        "kernels/tuned_configs.json",
        "--offtable",
        "reports/offtable_h200.json",
        "reports/offtable_first_use_h200.json",
    )
    assert out.returncode == 0, out.stderr
    text = report.read_text()
    assert "**Shapes nobody tuned.**" in text
    assert text.count("| `m2500_n1800_k4000_f16` | NN |") == 2
    assert "the heuristic's config" in text and "each shape tuned on first use" in text
    assert "20 shapes: median speedup" in text
    assert "shapes nobody tuned (hollow o, +)](r_roofline.png)" in text


def test_an_off_table_file_that_is_not_a_record_is_a_clear_error(tmp_path):
    bad = tmp_path / "o.json"
    bad.write_text('{"version": 1}')
    args = ["--replay", "reports/stage04_gemm.jsonl", "--report", str(tmp_path / "r.md")]
    out = _run(*args, "--tuned", "kernels/tuned_configs.json", "--offtable", str(bad))
    assert out.returncode == 2 and "--offtable" in out.stderr and "not an off-table" in out.stderr
    out = _run(*args, "--offtable", "reports/offtable_h200.json")
    assert out.returncode == 2 and "--offtable: feeds the Tuned Configs section" in out.stderr


def test_tuned_table_without_this_gpu_is_a_clear_error(tmp_path):
    table = tmp_path / "t.json"
    table.write_text('{"NVIDIA H100": {}}')
    out = _run(
        "--replay",
        "reports/stage04_gemm.jsonl",
        "--report",
        str(tmp_path / "r.md"),
        "--tuned",
        str(table),
    )
    assert out.returncode == 2 and "--tuned" in out.stderr and "NVIDIA H200" in out.stderr


@pytest.fixture
def fake_gpu(monkeypatch):
    """A GPU as far as the CLI can tell, and a fake case per shape in place of inputs and
    kernels: a config with 512 threads fails to build. Returns the cases made."""
    from harness.measure import cases, device

    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(device, "gpu_name", lambda index=0: "Fake GPU")
    spec = device.DeviceSpec("Fake GPU", 16, 101376, 4 * 2**20, (9, 0))
    monkeypatch.setattr(device.DeviceSpec, "read", classmethod(lambda cls, index=0: spec))
    monkeypatch.setattr(device, "versions", lambda: {"tilelang": "t", "torch": "p", "cuda": "c"})
    made = []

    def case(shape, seed=0):
        made.append(FakeCase(shape, broken=lambda config: config.threads == 512))
        return made[-1]

    monkeypatch.setattr(cases, "Case", case)
    return made


SWEEP = ["--m", "128", "--n", "128", "--k", "128", "--warmup", "1", "--repeat", "3"]


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_config_that_fails_to_build_is_a_failed_row_and_the_sweep_goes_on(
    fake_gpu, tmp_path, capsys
):
    report, rows = tmp_path / "r.md", tmp_path / "rows.jsonl"
    argv = [*SWEEP, "--threads", "128", "256", "512", "--run-tilelang"]
    code = bench_gemm.main([*argv, "--report", str(report), "--jsonl", str(rows)])
    assert code == cli.EXIT_FAILED
    out = capsys.readouterr().out
    assert "FAILED b128x128x32_t512_s3 at m128_n128_k128_f16: RuntimeError: fake compile" in out
    meta, *recorded = _records(rows)
    # The device's own figures, as read: the report's SM count comes from here.
    assert meta["meta"]["sm_count"] == 16 and meta["meta"]["compute_capability"] == "9.0"
    assert [r["config"] for r in recorded] == [f"b128x128x32_t{t}_s3" for t in (128, 256, 512)]
    assert recorded[2]["error"].startswith("RuntimeError: fake compile error")
    assert "(the rest of a long log)" in recorded[2]["error"]  # the JSON keeps all of it
    assert recorded[2]["tilelang_ms"] is None and recorded[2]["tflops"] is None
    text = report.read_text()
    assert text.count("**FAILED**") == 1 and "| 512 | 3 |" in text
    assert "- `b128x128x32_t512_s3` at `m128_n128_k128_f16`: RuntimeError: fake compile" in text
    assert "1 config failed to build or run" in text


def test_a_combination_the_validator_rejects_is_a_failed_row_without_gpu_work(
    fake_gpu, tmp_path, capsys
):
    report, rows = tmp_path / "r.md", tmp_path / "rows.jsonl"
    argv = [*SWEEP, "--block-m", "100", "128", "--run-tilelang"]
    code = bench_gemm.main([*argv, "--report", str(report), "--jsonl", str(rows)])
    assert code == cli.EXIT_FAILED
    assert [c.block_m for c in fake_gpu[0].compiled] == [128, 128]  # check, then time
    _, bad, good = _records(rows)
    assert bad["config"] is None and bad["requested"]["block_m"] == 100
    assert bad["error"] == "GemmConfig.block_m=100: must be a multiple of 16"
    assert good["config"] == "b128x128x32_t128_s3" and good["error"] is None
    text = report.read_text()
    assert "| 100 | 128 | 32 | 128 | 3 |" in text and "**FAILED**" in text
    assert "- `b100x128x32_t128_s3` at `m128_n128_k128_f16`: GemmConfig.block_m=100" in text
    assert "multiple of 16" in capsys.readouterr().out


def test_exit_status_ranks_interrupted_then_wrong_then_failed():
    from harness.measure.cases import CaseResult
    from harness.measure.correctness import Check
    from harness.measure.timing import Timing
    from kernels import GemmConfig, GemmShape

    shape, t = GemmShape(128, 128, 128), Timing((0.01,), "event", 0)
    ok = CaseResult(shape, GemmConfig(), t, t, Check(shape, 1e-4, 0, 2e-3))
    wrong = CaseResult(shape, GemmConfig(), t, t, Check(shape, 0.5, 0, 2e-3))
    failed = CaseResult(shape, GemmConfig(), t, error="RuntimeError: boom")
    assert bench_gemm.exit_status([ok], False) == 0
    assert bench_gemm.exit_status([ok, failed], False) == cli.EXIT_FAILED
    assert bench_gemm.exit_status([failed, wrong], False) == cli.EXIT_INCORRECT
    assert bench_gemm.exit_status([failed, wrong], True) == cli.EXIT_INTERRUPTED


def test_rows_carry_the_run_id_of_their_meta_line(fake_gpu, tmp_path):
    rows = tmp_path / "rows.jsonl"
    assert bench_gemm.main([*SWEEP, "--run-tilelang", "--jsonl", str(rows)]) == 0
    (meta,), recorded = [r["meta"] for r in _records(rows) if "meta" in r], _records(rows)[1:]
    assert meta["gpu"] == "Fake GPU" and meta["started"].startswith(meta["date"])
    assert meta["command"].startswith("python3 -m benchmarks.bench_gemm --m 128")
    assert recorded and all(r["run"] == meta["run"] for r in recorded)


def _two_runs(path):
    """A legacy run (rows without ids) and two fresh runs of the fake sweep in one file."""
    legacy = [
        line
        for line in bench_gemm.Path("reports/stage04_gemm.jsonl").read_text().splitlines()
        if "b128x128x32_t128_s3" in line or '"meta"' in line
    ]
    path.write_text("\n".join(legacy) + "\n")
    ids = []
    for threads in ("128", "256"):
        assert (
            bench_gemm.main([*SWEEP, "--threads", threads, "--run-tilelang", "--jsonl", str(path)])
            == 0
        )
        ids.append([r for r in _records(path) if "meta" in r][-1]["meta"]["run"])
    return ids


def test_replay_of_several_runs_lists_them_and_run_picks_one(fake_gpu, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    first, second = _two_runs(rows)
    assert first != second
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        bench_gemm.main(["--replay", str(rows)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "holds 3 runs; choose one with --run ID" in err
    for run_id in ("legacy", first, second):
        assert f"  {run_id}  " in err
    report = tmp_path / "r.md"
    assert bench_gemm.main(["--replay", str(rows), "--run", second, "--report", str(report)]) == 0
    text = report.read_text()
    assert f"- Run: `{second}`" in text and "- GPU: Fake GPU" in text
    assert "| 256 | 3 |" in text and "| 128 | 3 |" not in text  # the other runs stay out
    assert bench_gemm.main(["--replay", str(rows), "--run", "legacy", "--report", str(report)]) == 0
    assert "NVIDIA H200" in report.read_text() and "- Run:" not in report.read_text()
    with pytest.raises(SystemExit):
        bench_gemm.main(["--replay", str(rows), "--run", "nope"])
    assert "--run 'nope' matches no run" in capsys.readouterr().err


def _recorded(tmp_path, mutate=None, tail=""):
    """The committed recording's first run, one row changed by ``mutate``, plus ``tail``."""
    lines = bench_gemm.Path("reports/stage04_gemm.jsonl").read_text().splitlines()[:4]
    if mutate:
        row = json.loads(lines[2])
        mutate(row)
        lines[2] = json.dumps(row)
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join(lines) + "\n" + tail)
    return path


def test_a_torn_line_is_reported_by_number_and_skipped(tmp_path):
    torn = '{"shape": "m128_n128_k128_f16", "m": 128, "n": 1'
    path = _recorded(tmp_path, tail=torn)
    out = _run("--replay", str(path), "--report", str(tmp_path / "r.md"))
    assert out.returncode == 0, out.stderr
    assert f"{path}:5: torn line skipped" in out.stderr and "Traceback" not in out.stderr
    assert (tmp_path / "r.md").read_text().count("| 128 | 128 | 128 |") == 3


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r["torch_samples_ms"].__setitem__(0, -0.005), "torch_samples_ms[0]=-0.005"),
        (lambda r: r["tilelang_samples_ms"].__setitem__(3, math.nan), "tilelang_samples_ms[3]=nan"),
        (lambda r: r.pop("m"), "missing 'm'"),
        (lambda r: r.__setitem__("torch_samples_ms", []), "must be a non-empty list"),
        (lambda r: r.__setitem__("config", "b100x128x32_t128_s3"), "block_m=100"),
    ],
)
def test_a_row_off_the_schema_is_refused_with_its_line(tmp_path, mutate, message):
    path = _recorded(tmp_path, mutate)
    out = _run("--replay", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"--replay: {path}:3: " in out.stderr and message in out.stderr


def test_run_needs_replay():
    out = _run("--run", "x")
    assert out.returncode == 2 and "--run: picks a recorded run, so it needs --replay" in out.stderr


def test_tables_name_the_ratio_speedup():
    from benchmarks import tune_gemm
    from kernels import GemmShape

    assert "speedup" in bench_gemm.TABLE_COLUMNS and "x torch" not in bench_gemm.TABLE_COLUMNS
    row = {"config": "b128x256x64_t256_s3", "tilelang_ms": 0.2, "torch_ms": 0.18, "speedup": 0.9}
    head, line = tune_gemm.summary([(GemmShape(4096, 4096, 4096), row)])
    assert head.split()[-1] == "speedup" and line.split()[-1] == "0.900"


def test_a_run_appended_after_a_torn_line_keeps_its_meta_line(fake_gpu, tmp_path, capsys):
    rows = _recorded(tmp_path, tail='{"shape": "m128_n128_k128_f16", "m": 1')  # no line end
    assert bench_gemm.main([*SWEEP, "--run-tilelang", "--jsonl", str(rows)]) == 0
    run_id = json.loads(rows.read_text().splitlines()[5])["meta"]["run"]
    capsys.readouterr()
    assert bench_gemm.main(["--replay", str(rows), "--run", run_id]) == 0
    assert f"{rows}:5: torn line skipped" in capsys.readouterr().err


def _stopping(monkeypatch, stop_at=None):
    """A fake case per shape whose ``stop_at``-th kernel timing gets SIGTERM (as from
    ``timeout``); returns the (shape, config) pairs timed."""
    import os
    import signal
    import time

    from harness.measure import cases

    timed = []

    class Stopping(FakeCase):
        def time_tilelang(self, config, **timing):
            timed.append((self.shape.id, config.id))
            if len(timed) == stop_at:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)  # the handler interrupts this
                raise AssertionError("SIGTERM did not stop the sweep")
            return super().time_tilelang(config, **timing)

    monkeypatch.setattr(cases, "Case", lambda shape, seed=0: Stopping(shape))
    monkeypatch.setattr(bench_gemm, "precompile_sweep", lambda *args: None)
    return timed


RESUMED = ["--m", "128", "256", *SWEEP[2:], "--threads", "128", "256", "--run-tilelang"]


def test_sigterm_keeps_the_rows_and_resume_times_only_shapes_not_timed_whole(
    fake_gpu, tmp_path, capsys, monkeypatch
):
    rows = tmp_path / "rows.jsonl"
    argv = [*RESUMED, "--jsonl", str(rows), "--resume"]
    timed = _stopping(monkeypatch, stop_at=4)  # the second shape's second config
    assert bench_gemm.main(argv) == cli.EXIT_INTERRUPTED
    shapes = [r.get("shape") for r in _records(rows)[1:]]
    assert shapes == ["m128_n128_k128_f16"] * 2 + ["m256_n128_k128_f16"]
    first = _records(rows)[0]["meta"]["run"]

    timed = _stopping(monkeypatch)
    assert bench_gemm.main(argv) == 0
    out = capsys.readouterr().out
    assert "resume: 1 of 2 shapes already timed whole" in out and first in out
    # The shape cut short is timed again whole, in a run of its own.
    assert timed == [("m256_n128_k128_f16", f"b128x128x32_t{t}_s3") for t in (128, 256)]
    second = [r for r in _records(rows) if "meta" in r][-1]["meta"]
    assert second["resumes"] == [first] and second["seed"] == 0

    timed = _stopping(monkeypatch)
    lines = len(_records(rows))
    assert bench_gemm.main(argv) == 0 and timed == []
    assert "nothing left to time" in capsys.readouterr().out
    assert len(_records(rows)) == lines  # no empty run appended

    timed = _stopping(monkeypatch)  # timed another way: nothing earlier counts
    assert bench_gemm.main([*argv, "--repeat", "5"]) == 0 and len(timed) == 4


def test_resume_needs_jsonl_and_takes_no_report(tmp_path, capsys):
    for extra in ([], ["--jsonl", str(tmp_path / "r.jsonl"), "--report", str(tmp_path / "r.md")]):
        with pytest.raises(SystemExit) as err:
            bench_gemm.main([*SWEEP, "--run-tilelang", "--resume", *extra])
        assert err.value.code == 2 and "--resume" in capsys.readouterr().err


AROUND = ["--shape", "1432x1888x2568", "1056x1280x3384", "--dtype", "bfloat16", "--repeat", "3"]


@pytest.mark.filterwarnings("ignore::kernels.tuned.UntunedGpuWarning")
def test_around_pick_times_each_shapes_pick_and_its_changes(
    fake_gpu, tmp_path, capsys, monkeypatch
):
    from dataclasses import replace

    from kernels import GemmShape
    from kernels.tuned import pick_config

    compiled = []
    monkeypatch.setattr(bench_gemm, "precompile_sweep", lambda pairs, *rest: compiled.extend(pairs))
    rows = tmp_path / "rows.jsonl"
    changes = ["num_stages=-1", "num_stages=+9", "split_k=1"]
    assert bench_gemm.main([*AROUND, "--around-pick", *changes, "--jsonl", str(rows)]) == 0
    out = capsys.readouterr().out
    meta, *recorded = _records(rows)
    assert meta["meta"]["around_pick"] == changes
    expected = []
    for m, n, k in ((1432, 1888, 2568), (1056, 1280, 3384)):
        shape = GemmShape(m, n, k, "bfloat16")
        pick = pick_config(shape, "Fake GPU", 16)  # the fake GPU's name and SM count
        expected += [
            (shape.id, pick.id, "pick"),
            (shape.id, replace(pick, num_stages=pick.num_stages - 1).id, "num_stages=-1"),
        ]
        # Over the shared-memory budget: noted with the validator's rule, not timed.
        assert f"{shape.id}: {pick.id} with num_stages=+9: not timed (GemmConfig.num_stages=" in out
        # The pick itself again: noted, not timed twice.
        assert f"{shape.id}: {pick.id} with split_k=1: {pick.id}, as pick" in out
    got = [(r["shape"], r["config"], r.get("config_source")) for r in recorded]
    assert got == expected
    assert [r["correct"] for r in recorded] == [True] * 4
    assert sorted((s.id, c.id) for s, c in compiled) == sorted((s, c) for s, c, _ in got)


@pytest.mark.filterwarnings("ignore::kernels.tuned.UntunedGpuWarning")
def test_around_pick_resumes_by_each_shapes_own_configs(fake_gpu, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(bench_gemm, "precompile_sweep", lambda *args: None)
    rows = tmp_path / "rows.jsonl"
    argv = [*AROUND, "--jsonl", str(rows), "--resume", "--around-pick", "num_stages=-1"]
    assert bench_gemm.main(argv) == 0
    capsys.readouterr()
    assert bench_gemm.main(argv) == 0
    assert "nothing left to time" in capsys.readouterr().out
    # swizzle=0 changes the first shape's pick (panels of 16) and not the second's (none):
    # only the first has a config no run timed, and it is timed again whole.
    assert bench_gemm.main([*argv, "swizzle=0"]) == 0
    runs = [r["meta"]["run"] for r in _records(rows) if "meta" in r]
    again = [(r["shape"], r["config_source"]) for r in _records(rows) if r.get("run") == runs[-1]]
    assert len(runs) == 2 and again == [
        ("m1432_n1888_k2568_bf16", "pick"),
        ("m1432_n1888_k2568_bf16", "num_stages=-1"),
        ("m1432_n1888_k2568_bf16", "swizzle=0"),
    ]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--config", "b128x128x32_t128_s3"], "--around-pick: times each shape's pick"),
        (["--threads", "256"], "takes no --threads"),
        (["--tune-first-use"], "takes no --tune-first-use"),
        (["num_stage=5"], "argument --around-pick: 'num_stage': must be one of GemmConfig's"),
        (["num_stages=x"], "num_stages=x: must be a whole number, or +N/-N"),
    ],
)
def test_around_pick_refuses_what_it_cannot_take(extra, says, capsys):
    with pytest.raises(SystemExit) as err:
        bench_gemm.main([*AROUND, "--around-pick", "num_stages=+1", *extra])
    assert err.value.code == 2 and says in capsys.readouterr().err
