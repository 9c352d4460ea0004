"""The worker's records and the calibration file: each read and written in one module,
versioned, a record of another version refused with an error naming both versions."""

import json
import re

import pytest

from harness.revisions import calibration, records


def test_every_worker_record_comes_back_as_it_went():
    runs = [
        records.ProcessRun(
            {
                "a": records.Measured(
                    (1e-3,),
                    (1.1,),
                    gpu=records.Gpu(1980, 1755, "power cap"),
                    injection=records.Injection(0.02, 2100, 0.019, ((2000, 0.018),)),
                ),
                "b": records.Measured(skipped="invalid"),
            },
            tilelang="0.1.15",
        ),
        records.PairedRun(
            ("base", "head"),
            {
                "a": records.Paired(
                    sides={"base": records.Side((1e-3,)), "head": records.Side(error="boom")},
                    ratios={"base": (1.0,)},
                    launches=12,
                    shared_inputs=True,
                )
            },
            timer="cupti",
        ),
        records.Listing(("a", "b")),
        records.Resources({"a": {"registers": 168}}),
        records.Fatal("SyntaxError", side="head", seconds=1.5),
    ]
    for run in runs:
        assert records.from_json(records.to_json(run)) == run


def test_a_record_of_another_version_names_both_versions():
    data = records.to_dict(records.Listing(("a",)))
    data["version"] = records.VERSION + 1
    with pytest.raises(records.RecordError, match=rf"version {records.VERSION + 1}: .*version 1"):
        records.from_dict(data)
    with pytest.raises(records.RecordError, match="kind 'names'"):
        records.from_dict({**records.to_dict(records.Listing(())), "kind": "names"})


def test_the_calibration_file_is_read_and_written_by_one_module(tmp_path):
    path = tmp_path / "h200.json"
    record = calibration.Calibration(
        method="paired",
        benchmarks={"a": calibration.Benchmark(threshold=0.01, mde=0.002, launches=(66, 72))},
        failures=("b: too noisy",),
    )
    calibration.write(path, record)
    assert json.loads(path.read_text())["version"] == calibration.VERSION
    assert calibration.read(path) == record
    # A file from before the version was recorded is version 1.
    path.write_text(json.dumps({"benchmarks": {"a": {"threshold": 0.02}}}))
    assert calibration.read(path).benchmarks["a"].threshold == 0.02


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"version": 2, "benchmarks": {}}', "calibration version 2; this reader reads version 1"),
        ('{"benchmarks": {"a": {"mde": 0.1}}}', "benchmarks['a']: no 'threshold'"),
        ("{", "not a calibration file"),
        ('{"method": "paired"}', "no 'benchmarks' table"),
    ],
)
def test_a_bad_calibration_file_names_the_field(tmp_path, text, message):
    path = tmp_path / "h200.json"
    path.write_text(text)
    with pytest.raises(calibration.CalibrationError, match=re.escape(message)):
        calibration.read(path)


def test_the_committed_calibration_reads():
    found = calibration.read(calibration.calibration_path("h200"))
    assert found.method == "paired" and found.benchmarks
