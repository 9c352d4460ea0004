"""A self-test resumed from its checkpoint: it runs only the missing iterations, with the
cycles the first run calibrated, tallies all of them, and refuses a checkpoint of other
settings by name."""

import json

import pytest

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED
from harness.gate import selftest, selftest_state
from harness.revisions import git, launch
from harness.suite import discovery
from tests.fakes import WORKER_NAMES as NAMES
from tests.fakes import FakePairedWorker, FakeWorker


class StoppingPairedWorker(FakePairedWorker):
    """A paired worker interrupted (Ctrl-C) at its ``stop_at``-th call."""

    def __init__(self, stop_at=None):
        super().__init__()
        self.stop_at = stop_at

    def __call__(self, *args, **kwargs):
        if self.stop_at is not None and len(self.calls) + 1 == self.stop_at:
            raise KeyboardInterrupt
        return super().__call__(*args, **kwargs)


def _offline(monkeypatch, tmp_path, worker, sha="0" * 40):
    monkeypatch.setattr(launch, "run_paired", worker)
    monkeypatch.setattr(launch, "listing", FakeWorker().listing)
    monkeypatch.setattr(launch, "precompile", lambda *args, **kw: None)
    monkeypatch.setattr(git, "worktree", lambda work, side, sha: tmp_path)
    monkeypatch.setattr(git, "resolve", lambda *args, **kw: sha)
    monkeypatch.setattr(git, "ROOT", tmp_path)
    monkeypatch.setattr(discovery, "gate_subset", lambda root: ".")
    monkeypatch.setattr(selftest, "calibration_path", lambda: tmp_path / "none.json")
    monkeypatch.setattr("harness.measure.device.no_gpu_reason", lambda: None)


def _run(tmp_path, checkpoint, n=5, extra=()):
    out = tmp_path / "tally.json"
    argv = ["--n", str(n), "--slowdown", "0.1", "--resume", str(checkpoint), "--json", str(out)]
    return selftest.main([*argv, *extra]), out


def test_an_interrupted_run_resumes_with_the_missing_iterations_only(monkeypatch, tmp_path):
    checkpoint = tmp_path / "ck" / "selftest.json"
    first = StoppingPairedWorker(stop_at=4)  # three iterations, then Ctrl-C
    _offline(monkeypatch, tmp_path, first)
    code, out = _run(tmp_path, checkpoint)
    assert code == EXIT_INTERRUPTED
    saved = json.loads(checkpoint.read_text())
    assert len(saved["iterations"]["all"]) == 3
    assert saved["settings"]["commit"] == "0" * 40
    cycles_path = tmp_path / ".gate" / "selftest" / "inject-cycles.json"
    first_cycles = json.loads(cycles_path.read_text())
    assert saved["cycles"]["all"] == {"injected": first_cycles}
    assert set(saved["calibrated"]) == {"injected"}
    assert set(saved["calibrated"]["injected"]) == set(NAMES)

    # A fresh machine: no work folder; the checkpoint alone carries the state.
    cycles_path.unlink()
    second = StoppingPairedWorker()
    _offline(monkeypatch, tmp_path, second)
    code, out = _run(tmp_path, checkpoint)
    assert code == 0
    assert len(second.calls) == 2  # iterations 4 and 5 only
    assert [c["file"] for c in second.calls] == ["paired-3-0.json", "paired-4-0.json"]
    # Both set the first run's cycles; none calibrates again.
    assert all(c["inject_cycles"] == [cycles_path] for c in second.calls)
    assert json.loads(cycles_path.read_text()) == first_cycles
    record = json.loads(out.read_text())
    assert record["n"] == 5 and record["resumed_iterations"] == 3
    assert record["interrupted"] is False
    # The injection calibration reaches the record from the checkpoint.
    assert all(record["benchmarks"][n]["injection_cycles"] is not None for n in NAMES)
    assert len(json.loads(checkpoint.read_text())["iterations"]["all"]) == 5


def test_a_finished_checkpoint_only_tallies(monkeypatch, tmp_path):
    checkpoint = tmp_path / "selftest.json"
    _offline(monkeypatch, tmp_path, StoppingPairedWorker())
    assert _run(tmp_path, checkpoint, n=2)[0] == 0
    again = StoppingPairedWorker()
    _offline(monkeypatch, tmp_path, again)
    code, out = _run(tmp_path, checkpoint, n=2)
    assert code == 0 and again.calls == []
    assert json.loads(out.read_text())["n"] == 2


def test_a_checkpoint_of_other_settings_is_refused_by_name(monkeypatch, tmp_path, capsys):
    checkpoint = tmp_path / "selftest.json"
    _offline(monkeypatch, tmp_path, StoppingPairedWorker(stop_at=2))
    _run(tmp_path, checkpoint)
    _offline(monkeypatch, tmp_path, StoppingPairedWorker(), sha="1" * 40)
    code, _ = _run(tmp_path, checkpoint)
    assert code == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "commit was '0000" in err and "name a new checkpoint file" in err
    _offline(monkeypatch, tmp_path, StoppingPairedWorker())
    code, _ = _run(tmp_path, checkpoint, extra=["--threshold", "0.05"])
    assert code == EXIT_FAILURE
    assert "threshold was 0.01 there, is 0.05 now" in capsys.readouterr().err


def test_a_file_that_is_not_a_checkpoint_is_refused(monkeypatch, tmp_path, capsys):
    bad = tmp_path / "selftest.json"
    bad.write_text("[1, 2]")
    _offline(monkeypatch, tmp_path, StoppingPairedWorker())
    assert _run(tmp_path, bad)[0] == EXIT_FAILURE
    assert "not a self-test checkpoint" in capsys.readouterr().err


def test_verdicts_round_trip_with_unbounded_intervals(tmp_path):
    from harness.gate import decide as gd

    v = gd.Verdict("b", gd.UNCHANGED, 1.0, 1.0, 1.0, 1.0, None, 0.0, float("inf"), 0.01, "x")
    state = selftest_state.Checkpoint(
        tmp_path / "c.json", dict.fromkeys(selftest_state.SETTINGS, 1), tmp_path
    )
    state.save({0: [([v], [v])]}, {})
    finished, calibrated = state.load()
    assert finished == {0: [([v], [v])]} and calibrated == {}


def test_a_damaged_checkpoint_is_refused_not_a_traceback(monkeypatch, tmp_path, capsys):
    checkpoint = tmp_path / "selftest.json"
    _offline(monkeypatch, tmp_path, StoppingPairedWorker(stop_at=3))
    _run(tmp_path, checkpoint)
    data = json.loads(checkpoint.read_text())
    data["iterations"]["all"][0][0][0].pop("status")  # a verdict cut short
    checkpoint.write_text(json.dumps(data))
    _offline(monkeypatch, tmp_path, StoppingPairedWorker())
    assert _run(tmp_path, checkpoint)[0] == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "not a self-test checkpoint" in err and "Traceback" not in err


@pytest.mark.parametrize(("key", "value"), [("settled", [1]), ("launch_scales", ["x"])])
def test_a_damaged_settled_or_scales_field_is_refused_not_a_traceback(
    monkeypatch, tmp_path, capsys, key, value
):
    checkpoint = tmp_path / "selftest.json"
    _offline(monkeypatch, tmp_path, StoppingPairedWorker(stop_at=3))
    _run(tmp_path, checkpoint)
    data = json.loads(checkpoint.read_text())
    data[key] = value
    checkpoint.write_text(json.dumps(data))
    _offline(monkeypatch, tmp_path, StoppingPairedWorker())
    assert _run(tmp_path, checkpoint)[0] == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "not a self-test checkpoint" in err and "Traceback" not in err
