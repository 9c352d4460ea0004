"""The gate runner's bookkeeping on the CPU: pooling rounds, discovery, no-GPU exit."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from harness import gate
from harness.gate_worker import discover
from tests.conftest import NO_GPU

ROOT = Path(__file__).resolve().parent.parent


def _round(rng, base_ms, head_ms, error=None):
    def payload(ms):
        return {
            "results": {
                "gemm.X(a)": {
                    "track_latency": [rng.gauss(ms, ms * 0.01) for _ in range(20)],
                    "track_vs_torch": [rng.gauss(1.1, 0.01) for _ in range(5)],
                },
                "gemm.X(bad)": {"skipped": "invalid combination"},
            }
        }

    head = {"fatal": error} if error else payload(head_ms)
    return {"base": payload(base_ms), "head": head}


def test_pool_concatenates_rounds_and_drops_skipped():
    rng = random.Random(5)
    samples = gate.pool([_round(rng, 1e-3, 1e-3) for _ in range(3)])
    assert [s.name for s in samples] == ["gemm.X(a)"]
    s = samples[0]
    assert len(s.base) == len(s.head) == 60 and len(s.base_rel) == 15 and s.error is None


def test_pool_marks_a_fatal_side_as_failed():
    rng = random.Random(6)
    samples = gate.pool([_round(rng, 1e-3, 1e-3), _round(rng, 1e-3, 1e-3, error="ImportError")])
    assert samples[0].error == "head: ImportError"


def test_discover_finds_the_gpu_suite():
    names = [name for name, _, _ in discover(ROOT, gate.DEFAULT_BENCH)]
    assert len(names) >= 12
    assert "gemm.Stage(4096x4096x4096, 128, 3, f16)" in names
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
    assert out.returncode == 2 and (tmp_path / "exit_code").read_text() == "2"


def test_multi_gpu_gate_keeps_base_and_head_of_a_benchmark_on_one_gpu(monkeypatch, tmp_path):
    names = [f"gemm.S({i})" for i in range(14)]
    calls = []

    def fake_side(tree, bench, out_file, inject=0.0, gpu=None, only=None, listing=False):
        if listing:
            return {"names": names}
        shard = json.loads(only.read_text())
        calls.append((tree, gpu, tuple(shard)))
        rng = random.Random(hash((tree, gpu)))
        return {
            "results": {
                n: {
                    "track_latency": [rng.gauss(1e-3, 1e-5) for _ in range(5)],
                    "track_vs_torch": [1.0],
                    "gpu_seen": gpu,
                }
                for n in shard
            }
        }

    monkeypatch.setattr(gate, "_run_side", fake_side)
    trees = {"base": "B", "head": "H"}
    rounds = gate.interleave_gpus(trees, ".", 2, tmp_path, [0, 1], log=lambda line: None)
    assert len(rounds) == 2
    for r in rounds:
        assert sorted(r["base"]["results"]) == sorted(r["head"]["results"]) == sorted(names)
        for n in names:
            assert r["base"]["results"][n]["gpu_seen"] == r["head"]["results"][n]["gpu_seen"]
    shards = {gpu: set(shard) for _, gpu, shard in calls}
    assert shards[0].isdisjoint(shards[1]) and len(shards[0]) == len(shards[1]) == 7
    assert len(calls) == 2 * 2 * 2  # sides x rounds x GPUs
    samples = gate.pool(rounds)
    assert len(samples) == 14 and all(len(s.base) == 10 for s in samples)


def test_merge_keeps_a_fatal_shard_visible():
    merged = gate._merge([{"results": {"a": {}}}, {"fatal": "ImportError"}])
    assert merged == {"fatal": "ImportError"}


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
