"""benchmarks.torch_kernels on the CPU: what it reads from CUPTI's records and from
cuBLAS's kernel names, and its refusals; the records come from a run's shape, not a GPU."""

import json
import random

import pytest

from benchmarks import torch_kernels
from harness.measure.kernel_timer import FLUSH_NAME


def test_an_nvjet_name_gives_its_schedule():
    name = "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_TNT"
    assert torch_kernels.schedule_of(name) == (
        "256x128 tile, K 64 x 4 stages, cluster 1x2, h_bz_coopA_TNT"
    )
    got = torch_kernels.schedule_of("void nvjet_sm90_tst_64x16_128x6_2x1_v_bz_splitK_TNN<...>")
    assert got == "64x16 tile, K 128 x 6 stages, cluster 2x1, v_bz_splitK_TNN"


@pytest.mark.parametrize(
    "name", ["sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x256x64", "memset", ""]
)
def test_a_name_without_a_schedule_gives_none(name):
    assert torch_kernels.schedule_of(name) is None


def _records(rng, launches, kernels):
    """CUPTI-like records: per launch a flush, then each of ``kernels`` (name, mean us)
    with a random duration around its mean; the records in a shuffled order."""
    out, t, durations = [], 0, {name: [] for name, _ in kernels}
    for _ in range(launches):
        out.append((f"void at::native::{FLUSH_NAME}_kernel", t, 50_000))
        t += 60_000
        for name, mean_us in kernels:
            d = int(mean_us * 1e3 * rng.uniform(0.9, 1.1))
            durations[name].append(d)
            out.append((name, t, d))
            t += d + 1_000
    rng.shuffle(out)
    return out, durations


def test_kernels_seen_counts_and_averages_each_kernel_but_the_flush():
    rng = random.Random()
    launches = rng.randint(3, 20)
    gemm = "nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_TNN"
    records, durations = _records(rng, launches, [("memset", 1.5), (gemm, 30.0)])
    seen = torch_kernels.kernels_seen(records, launches, FLUSH_NAME)
    assert [k.name for k in seen] == [gemm, "memset"]  # the most time first
    for k in seen:
        assert k.launches == launches
        assert k.mean_us == pytest.approx(sum(durations[k.name]) / launches / 1e3)
    assert seen[0].schedule.startswith("192x192 tile, K 64 x 3 stages, cluster 2x1")
    assert seen[1].schedule is None


def test_records_of_flushes_alone_are_refused():
    records = [(f"{FLUSH_NAME}_kernel", i, 10) for i in range(4)]
    with pytest.raises(ValueError, match="no kernel besides the flush in 4 launches"):
        torch_kernels.kernels_seen(records, 4, FLUSH_NAME)


def test_a_bad_shapes_file_names_the_option(tmp_path, capsys):
    bad = tmp_path / "shapes.json"
    bad.write_text(json.dumps({"shapes": [{"m": 0}]}))
    assert torch_kernels.main(["--shapes", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--shapes" in err and "shapes[0]" in err


def test_without_a_gpu_it_says_so(tmp_path, capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    shapes = tmp_path / "shapes.json"
    entry = dict(m=1536, n=1200, k=1736, dtype="bfloat16", layout="NT", categories=["mid"])
    shapes.write_text(json.dumps({"shapes": [entry]}))
    assert torch_kernels.main(["--shapes", str(shapes)]) == 3
    assert "no CUDA device" in capsys.readouterr().err


def test_where_cupti_records_nothing_it_says_so_and_keeps_what_finished(
    tmp_path, capsys, monkeypatch
):
    import torch

    from harness.measure import device, kernel_timer

    class Spec:
        name = "a GPU"

        def record(self):
            return {"sm_count": 132}

    entries = [
        dict(m=1536, n=1200, k=1736, dtype="bfloat16", layout="NT", categories=["mid"]),
        dict(m=2096, n=2728, k=1304, dtype="float16", layout="NT", categories=["mid"]),
    ]
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"shapes": entries}))
    first = torch_kernels.KernelSeen("nvjet_sm90_tst_112x128_64x7_1x2_h_bz_TNN", 3, 15.4, None)

    def observe(shape, repeat, seed):
        if shape.m == 2096:
            raise kernel_timer.CuptiUnavailable("torch.profiler recorded no CUDA kernels")
        return [first]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device.DeviceSpec, "read", classmethod(lambda cls, index=0: Spec()))
    monkeypatch.setattr(device, "versions", lambda: {})
    monkeypatch.setattr(torch_kernels, "observe", observe)
    out = tmp_path / "kernels.json"
    assert torch_kernels.main(["--shapes", str(shapes), "--json", str(out)]) == 2
    assert "m2096_n2728_k1304_f16_nt: torch.profiler recorded no CUDA kernels" in (
        capsys.readouterr().err
    )
    record = json.loads(out.read_text())
    assert [r["shape"] for r in record["shapes"]] == ["m1536_n1200_k1736_bf16_nt"]
    assert record["shapes"][0]["kernels"][0]["name"] == first.name
