"""The commands that opt in to tuning on first use, on the CPU with a fake GPU:
``bench_gemm --tune-first-use`` and ``offtable --first-use`` (each shape's config and its
source, the cache written then read back, the candidates precompiled as the suite's
combinations), their argument checks, and ``offtable --list --first-use``."""

import json
import subprocess
import sys

import pytest

from benchmarks import bench_gemm, offtable
from harness.measure import first_use
from harness.measure.device import versions
from harness.measure.first_use_cache import CacheFile, Entry, Tried
from harness.report.offtable import ShapeResult
from kernels import GemmConfig, GemmShape
from kernels.tuned import heuristic
from tests.test_cli import fake_gpu  # noqa: F401 (a fixture)

FAKE_GPU, FAKE_SMS = "Fake GPU", 16  # what the fake_gpu fixture's device reads


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TILELANG_GEMM_PERF_CACHE", str(folder))
    return folder


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_bench_tunes_an_untuned_shape_once_then_reads_the_cache(
    fake_gpu,  # noqa: F811
    cache_dir,
    tmp_path,
    capsys,
):
    shape = GemmShape(256, 256, 256)
    rows = tmp_path / "rows.jsonl"
    argv = ["--shape", "256x256x256", "--tune-first-use", "--tune-candidates", "3"]
    argv += ["--warmup", "1", "--repeat", "3", "--jsonl", str(rows)]
    assert bench_gemm.main(argv) == 0
    out = capsys.readouterr().out
    pick = heuristic(shape, FAKE_SMS)  # every fake candidate takes 0.5 ms: the first wins
    assert f"{shape.id}: not in the table for {FAKE_GPU}; tuning 3 candidates" in out
    assert out.count("; best ") == 3  # a progress line per candidate
    path = cache_dir / "fake-gpu-16sm.json"
    assert f"config {shape.id}: {pick.id} (tuned now, 0.5000 ms when tuned, {path})" in out
    meta, row = _records(rows)
    assert meta["meta"]["first_use"] == {"budget_s": 60.0, "candidates": 3, "cache": str(cache_dir)}
    assert (row["config"], row["config_source"]) == (pick.id, "tuned now")
    assert len(CacheFile(cache_dir, FAKE_GPU, FAKE_SMS).read()[shape.id].tried) == 3
    # The second run reads the cache: one config built, checked and timed, none tuned.
    assert bench_gemm.main(argv) == 0
    out = capsys.readouterr().out
    assert "tuning" not in out and f"{pick.id} (first-use cache, 0.5000 ms" in out
    assert _records(rows)[-1]["config_source"] == "first-use cache"
    assert {c.id for c in fake_gpu[-1].compiled} == {pick.id}


def test_bench_without_the_flag_sweeps_as_before(fake_gpu, cache_dir, tmp_path):  # noqa: F811
    rows = tmp_path / "rows.jsonl"
    argv = ["--shape", "256x256x256", "--run-tilelang", "--repeat", "2", "--jsonl", str(rows)]
    assert bench_gemm.main(argv) == 0
    meta, row = _records(rows)
    assert "first_use" not in meta["meta"] and "config_source" not in row
    assert row["config"] == GemmConfig().id and not cache_dir.exists()


def _run(module, *args):
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args], capture_output=True, text=True
    )


@pytest.mark.parametrize(
    "module, args, message",
    [
        ("bench_gemm", ["--tune-first-use", "--threads", "256"], "takes no --threads"),
        ("bench_gemm", ["--tune-first-use", "--config", "b64x64x64_t128_s3"], "takes no --config"),
        ("bench_gemm", ["--tune-first-use", "--replay", "x.jsonl"], "--replay renders"),
        ("bench_gemm", ["--tune-first-use", "--tune-budget", "0"], "Budget.seconds=0.0: must"),
        ("bench_gemm", ["--tune-budget", "5"], "only with --tune-first-use"),
        ("offtable", ["--first-use", "--tune-budget", "nan"], "Budget.seconds=nan: must"),
        ("offtable", ["--tune-candidates", "4"], "only with --first-use"),
        ("offtable", ["--first-use", "--tune-candidates", "0"], "0 must be >= 1"),
    ],
)
def test_bad_first_use_options_name_the_option(module, args, message):
    out = _run(module, *args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_offtable_list_shows_the_cached_config_only_with_first_use(cache_dir):
    shapes = offtable.load_shapes(offtable.SHAPES_FILE)
    cached, config = shapes[2].shape, GemmConfig.from_id("b128x128x64_t128_s4_w4")
    tilelang = versions()["tilelang"]  # what the command will compare the entry's with
    tried = (Tried(config.id, 0.1),)
    entry = Entry(cached, config, 0.1, tried, 60.0, 9.0, "2026-12-01", tilelang)
    CacheFile.for_gpu("NVIDIA H200", 132).put(entry)
    args = ["--list", "--sms", "132", "--gpu", "NVIDIA H200"]
    plain = _run("offtable", *args).stdout.splitlines()
    first = _run("offtable", *args, "--first-use").stdout.splitlines()
    assert plain[3].split()[2:4] == [heuristic(cached, 132).id, "heuristic"]
    assert first[3].split()[2:5] == [config.id, "first-use", "cache"]
    assert first[:3] == plain[:3] and first[4:] == plain[4:]


def test_offtable_first_use_precompiles_the_candidates_and_names_each_source(
    fake_gpu,  # noqa: F811
    cache_dir,
    tmp_path,
    monkeypatch,
    capsys,
):
    from harness.suite import precompile

    compiled = []

    def fake_precompile(combos, workers=None, log=print):
        combos = list(combos)
        compiled.append([(c.operator, c.shape, c.config) for c in combos])
        return {}

    def fake_measure(entry, config, source, args, tried=()):
        return ShapeResult.of(
            entry.shape,
            entry.categories,
            config.id,
            source,
            tried=tuple(t.to_dict() for t in tried),
            rel_error=1e-4,
            correct=True,
            kernel_ms=(0.5,),
            torch_ms=(0.4,),
            launches=1,
            timer="event",
        )

    monkeypatch.setattr(precompile, "precompile", fake_precompile)
    monkeypatch.setattr(offtable, "measure_shape", fake_measure)
    shapes = tmp_path / "shapes.json"
    entries = [
        {"m": 2048, "n": 2048, "k": 2048, "dtype": "float16", "layout": "NN"},
        {"m": 32, "n": 4096, "k": 14336, "dtype": "float16", "layout": "NN"},
    ]
    entries[0]["categories"], entries[1]["categories"] = ["mid"], ["skinny_m"]
    shapes.write_text(json.dumps({"shapes": entries}))
    record = tmp_path / "offtable.json"
    argv = ["--shapes", str(shapes), "--first-use", "--tune-candidates", "2"]
    assert offtable.main([*argv, "--json", str(record)]) == 0
    mid, skinny = GemmShape(2048, 2048, 2048), GemmShape(32, 4096, 14336)
    want = [(s, c) for s in (mid, skinny) for c in first_use.plan(s, FAKE_SMS, 2)]
    assert sorted(compiled[0], key=str) == sorted(
        (("gemm", s, c) for s, c in want), key=str
    )  # each shape's candidates, built as the suite's combinations, before any timing
    rows = json.loads(record.read_text())["rows"]
    assert [r["source"] for r in rows] == ["tuned now", "tuned now"]
    tried = [r["tried"] for r in rows]
    assert all(t and all(c["latency_ms"] for c in t) for t in tried)
    assert [r["config"] for r in rows] == [heuristic(s, FAKE_SMS).id for s in (mid, skinny)]
    assert "(tuned now" in capsys.readouterr().out
    # Next time: from the cache, nothing left to tune or precompile beyond the picks.
    assert offtable.main([*argv, "--json", str(record)]) == 0
    rows = json.loads(record.read_text())["rows"]
    assert [r["source"] for r in rows] == ["first-use cache", "first-use cache"]
    # Each row keeps what its config was picked over, as the first run timed it.
    assert [r["tried"] for r in rows] == tried
    assert all(r["config"] in [t["config"] for t in r["tried"]] for r in rows)
    assert len(compiled[1]) == 2
