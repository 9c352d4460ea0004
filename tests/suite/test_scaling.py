"""The one-GPU-against-all comparison, on the CPU with a fake runner: both legs run warm,
each storing apart, and the record holds walls, speedup, every piece's timing line and
its asv run's phases."""

import json
from pathlib import Path

import pytest

from harness.cli import EXIT_OK
from harness.suite import asv_phases, discovery, run, scaling

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_leg_stores_in_its_own_folder_with_absolute_paths(tmp_path):
    path = scaling.leg_config(ROOT, tmp_path / "gpus-0")
    conf = discovery.read_asv_conf(path)
    assert conf["results_dir"] == str(tmp_path / "gpus-0" / "results")
    assert Path(conf["benchmark_dir"]) == discovery.benchmark_dir(ROOT)
    assert discovery.benchmark_dir(path) == discovery.benchmark_dir(ROOT)


@pytest.fixture
def two_gpus(monkeypatch):
    import torch

    from harness.measure import device
    from harness.suite import precompile

    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)
    monkeypatch.setattr(device, "machine_name", lambda: "h200")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    warmed = []
    monkeypatch.setattr(precompile, "main", lambda argv: warmed.append(argv))
    return warmed


def test_the_record_holds_both_legs_and_the_speedup(two_gpus, monkeypatch, tmp_path):
    legs = []

    def fake_run_target(target, user, asv_args, gpus, log):
        legs.append((gpus, target.results_dir()))
        for g in gpus:
            log(run.timing_line("gemm.Tuned[1/2]", 10.0 / len(gpus), f"gpu{g}"))
            log(asv_phases.phases_line("gemm.Tuned[1/2]", {"setup_cache": 4.0}, f"gpu{g}"))
        return EXIT_OK

    monkeypatch.setattr(scaling.run, "run_target", fake_run_target)
    monkeypatch.setattr(scaling, "ROOT", ROOT)
    out = tmp_path / "scaling.json"
    assert scaling.main(["--gpus", "all", "--json", str(out)]) == EXIT_OK
    assert two_gpus == [[]]  # warm: the kernel cache is filled before either leg
    assert [g for g, _ in legs] == [[0], [0, 1]]
    assert legs[0][1] != legs[1][1]  # each leg stores apart: nothing is skipped as stored
    record = json.loads(out.read_text())
    assert [leg["gpus"] for leg in record["legs"]] == [[0], [0, 1]]
    assert record["legs"][1]["timings"] == [
        ["gemm.Tuned[1/2]", "gpu0", 5.0],
        ["gemm.Tuned[1/2]", "gpu1", 5.0],
    ]
    assert record["legs"][0]["phases"] == [["gemm.Tuned[1/2]", "gpu0", {"setup_cache": 4.0}]]
    first, last = (leg["wall_s"] for leg in record["legs"])
    assert record["speedup"] == (round(first / last, 3) if last else None)


def test_one_gpu_is_refused_by_name(two_gpus, capsys):
    with pytest.raises(SystemExit) as exit_:
        scaling.main(["--gpus", "1"])
    assert exit_.value.code == 2
    assert "--gpus=1: a comparison needs at least two GPUs" in capsys.readouterr().err
