"""Regressions in the stored history, on the CPU: a synthetic asv results folder written
with asv's own ``Results`` writer, over a throwaway git repository whose first-parent
history orders the commits. The histories are seeded: a detector has a false-alarm rate,
not a certainty (test_regressions_noise.py measures it), and the verdicts here should not
depend on the draw; the steps are far from the thresholds either way."""

import itertools
import json
import random
import statistics
import subprocess

import pytest
from asv import util
from asv.results import Results
from asv.runner import BenchmarkResult

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION
from harness.policy import POLICY
from harness.suite import regressions as rg
from harness.suite import result_files
from harness.suite.detector import inputs as detector_inputs
from harness.suite.detector.find import find
from harness.suite.detector.inputs import with_commits
from harness.suite.detector.steps import latest_step
from harness.suite.detector.threshold import threshold_for
from harness.suite.regressions_file import JSON_VERSION
from harness.suite.series import load_history

MACHINE = "testgpu"
N_COMMITS = 30
STEP_AT = 20  # the first commit after each step
SHAPE = "'4096x4096x4096'"

# name -> (unit, run-to-run noise, level factor from STEP_AT on)
HISTORIES = {
    ("gemm.Stage.track_latency", SHAPE, "128", "3", "'f16'"): ("seconds", 0.004, 1.12),
    ("gemm.Stage.track_latency", SHAPE, "128", "3", "'bf16'"): ("seconds", 0.004, 0.85),
    # The same 4% step: beyond a quiet benchmark's noise, within a noisy one's.
    ("gemm.Stage.track_latency", SHAPE, "256", "3", "'f16'"): ("seconds", 0.002, 1.04),
    ("gemm.Stage.track_latency", SHAPE, "256", "3", "'bf16'"): ("seconds", 0.05, 1.04),
    ("gemm.Stage.track_latency", SHAPE, "256", "4", "'f16'"): ("seconds", 0.01, 1.0),
    ("gemm.Stage.track_vs_torch", SHAPE, "128", "3", "'f16'"): ("kernel/torch", 0.004, 1.10),
}
FLAGGED = {
    "gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')",
    "gemm.Stage.track_latency('4096x4096x4096', 256, 3, 'f16')",
    "gemm.Stage.track_vs_torch('4096x4096x4096', 128, 3, 'f16')",
}
QUIET_UP = "gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')"
QUIET_UP_GATE = "gemm.Stage(4096x4096x4096, 128, 3, f16)"
QUIET_SMALL = "gemm.Stage.track_latency('4096x4096x4096', 256, 3, 'f16')"
NOISY_UP = "gemm.Stage.track_latency('4096x4096x4096', 256, 3, 'bf16')"


def _git(*args, cwd):
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def _commits(repo, n):
    """``n`` commits on main of a new repository at ``repo``, oldest first."""
    repo.mkdir()
    _git("init", "-q", "-b", "main", cwd=repo)
    for i in range(n):
        _git(
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            f"c{i}",
            cwd=repo,
        )
    return _git("rev-list", "--reverse", "main", cwd=repo).split()


def _levels(noise, factor, rng, base, n=N_COMMITS, at=STEP_AT):
    """Each commit's true latency: one run's drift around the level, a step at ``at``."""
    return [base * (factor if i >= at else 1.0) * (1 + rng.gauss(0, noise)) for i in range(n)]


def store(results, machine, sha, date, rows, units):
    """One commit's results file through asv's writer; ``rows``: ``{(key, *params): samples}``.
    Each key holds one combination per distinct parameter tuple."""
    util.write_json(results / machine / "machine.json", {"machine": machine}, api_version=1)
    run = Results({"machine": machine, "python": "3.11"}, {}, sha, date, "3.11", "existing-py", {})
    by_key = {}
    for (key, *params), samples in rows.items():
        by_key.setdefault(key, []).append((params, samples))
    for key, combos in by_key.items():
        columns = [sorted({p[i] for p, _ in combos}) for i in range(len(combos[0][0]))]
        lookup = {tuple(p): s for p, s in combos}
        ordered = [lookup.get(c) for c in itertools.product(*columns)]
        result = BenchmarkResult(
            result=[statistics.median(s) if s else None for s in ordered],
            samples=ordered,
            number=[1 if s else None for s in ordered],
            errcode=0,
            stderr="",
            profile=None,
        )
        run.add_result(
            {"name": key, "version": "1", "params": columns}, result, record_samples=True
        )
    run.save(str(results))
    bench = {k: {"name": k, "unit": u, "type": "track"} for k, u in units.items()}
    util.write_json(results / "benchmarks.json", bench, api_version=2)


def write_history(results, machine, shas, histories, rng, within=0.003):
    """Store every commit of ``histories`` (name -> (unit, noise, factor)) with samples."""
    levels = {
        name: _levels(noise, factor, rng, base=2e-3 if unit == "seconds" else 1.1)
        for name, (unit, noise, factor) in histories.items()
    }
    units = {name[0]: unit for name, (unit, _, _) in histories.items()}
    for i, sha in enumerate(shas):
        rows = {
            name: [lv[i] * (1 + rng.gauss(0, within)) for _ in range(15)]
            for name, lv in levels.items()
        }
        store(results, machine, sha, 1_700_000_000_000 + i * 60_000, rows, units)


@pytest.fixture
def history(tmp_path, monkeypatch):
    """A repository of N_COMMITS on main and a results folder for MACHINE covering them."""
    shas = _commits(tmp_path / "repo", N_COMMITS)
    results = tmp_path / "results"
    write_history(results, MACHINE, shas, HISTORIES, random.Random(20261130))
    # the git history that orders commits
    monkeypatch.setattr(detector_inputs, "ROOT", tmp_path / "repo")
    return results, shas


def _by_name(found):
    return {r.benchmark: r for r in found}


def test_the_latest_step_up_beyond_the_noise_is_flagged_with_its_commit_range(history):
    results, shas = history
    found = _by_name(find(results, MACHINE, shas, calibration={}))
    assert set(found) == FLAGGED
    up = found[QUIET_UP]
    assert (up.good, up.bad) == (shas[STEP_AT - 1], shas[STEP_AT])
    assert up.ratio == pytest.approx(1.12, rel=0.03)
    assert up.before == pytest.approx(2e-3, rel=0.02) and up.unit == "seconds"
    assert up.commits_after == N_COMMITS - STEP_AT
    assert up.threshold_source in ("history", "floor")  # 0.4% noise: k x spread is near 2%


def test_each_benchmark_is_judged_by_its_own_noise(history):
    results, shas = history
    series = {s.name: s for s in load_history(results, MACHINE, shas)[0]}
    quiet = threshold_for(series[QUIET_SMALL], {})
    noisy = threshold_for(series[NOISY_UP], {})
    assert POLICY.floor <= quiet.value < 0.03  # the floor, or near it
    assert noisy.value > max(0.08, 3 * quiet.value)  # ~3 x 5% run-to-run: a 4% step is noise
    assert 0.02 < noisy.spread < 0.1
    assert series[QUIET_UP].combination == QUIET_UP_GATE


def test_a_calibration_threshold_replaces_the_derived_one(history):
    results, shas = history
    calibration = {
        QUIET_UP_GATE: {"threshold": 0.25, "spread": 0.04},  # covers both of its tracks
        "gemm.Stage(4096x4096x4096, 256, 3, f16)": {"threshold": 0.03},
    }
    found = _by_name(find(results, MACHINE, shas, calibration=calibration))
    assert set(found) == {QUIET_SMALL}
    (hit,) = found.values()
    assert (hit.threshold, hit.threshold_source, hit.spread) == (0.03, "calibration", None)


def test_the_default_calibration_file_is_the_machines(history, tmp_path, monkeypatch):
    results, _ = history
    from harness.revisions import git

    monkeypatch.setattr(git, "ROOT", tmp_path / "repo")
    (tmp_path / "repo" / "calibration").mkdir()
    body = {"benchmarks": {QUIET_UP_GATE: {"threshold": 0.5}}}
    (tmp_path / "repo" / "calibration" / f"{MACHINE}.json").write_text(json.dumps(body))
    code = rg.main(["--results", str(results), "--json", str(tmp_path / "r.json")])
    assert code == EXIT_OK
    doc = json.loads((tmp_path / "r.json").read_text())
    names = {r["benchmark"] for r in doc["regressions"]}
    assert names == {QUIET_SMALL}


@pytest.mark.parametrize(
    "levels, flagged",
    [
        ([1.0] * 10 + [1.15] * 10 + [1.0] * 10, False),  # slowed, then fixed: latest is down
        ([1.0] * 10 + [0.85] * 10 + [1.0] * 10, True),  # sped up, then lost it again
        ([1.0] * 14 + [0.8] + [1.0] * 15, False),  # one fast outlier is not a level
        ([1.0] * 29 + [1.2], False),  # one slow commit: not confirmed yet
        ([1.0] * 28 + [1.2] * 2, True),  # two: confirmed
        ([1.0] * 10 + [1.1] * 10 + [1.2] * 10, True),  # the latest of two steps up
    ],
)
def test_only_the_latest_confirmed_step_counts(levels, flagged):
    rng = random.Random()
    values = [v * (1 + rng.gauss(0, 0.004)) for v in levels]
    step = latest_step(values, None, threshold=0.03)
    assert (step is not None and step.ratio > 1.03) == flagged
    if flagged:
        first_after = max(i for i in range(1, len(levels)) if levels[i] != levels[i - 1])
        assert (step.last_before, step.first_after) == (first_after - 1, first_after)


def test_a_step_that_asvs_own_penalty_search_misses_is_found():
    from asv.step_detect import detect_steps

    # 4% up at commit 20 in 0.2% noise; detect_steps' search for its penalty fits one level.
    values = [998.1, 999.9, 996.7, 999.8, 998.8, 1003.5, 998.3, 997.4, 999.4, 999.6, 997.6,
              996.8, 998.1, 996.7, 1001.3, 1001.7, 999.0, 995.3, 1001.2, 1000.7, 1040.1,
              1041.6, 1038.7, 1038.3, 1042.8, 1038.6, 1038.5, 1035.7, 1040.3, 1039.6]  # fmt: skip
    assert len(detect_steps(values)) == 1
    step = latest_step(values, None, threshold=0.02)
    assert (step.last_before, step.first_after) == (19, 20)
    assert step.ratio == pytest.approx(1.04, abs=0.002)


def test_the_report_as_markdown_and_json(history, tmp_path, capsys):
    results, shas = history
    md, js = tmp_path / "out" / "regressions.md", tmp_path / "out" / "regressions.json"
    code = rg.main(["--results", str(results), "--markdown", str(md), "--json", str(js)])
    assert code == EXIT_OK
    doc = json.loads(js.read_text())
    assert doc["version"] == JSON_VERSION
    rows = {r["benchmark"]: r for r in doc["regressions"]}
    assert set(rows) == FLAGGED
    row = rows[QUIET_UP]
    fields = "benchmark machine good bad range before after unit before_text after_text ratio"
    more = "threshold spread threshold_source commits_after commits bad_subject bad_author"
    assert set(row) == {*fields.split(), *more.split()}
    assert (row["good"], row["bad"]) == (shas[STEP_AT - 1], shas[STEP_AT])
    # Adjacent on the branch: bad is the culprit, named with its subject and author.
    assert row["commits"] == [shas[STEP_AT]]
    assert (row["bad_subject"], row["bad_author"]) == (f"c{STEP_AT}", "t")
    latest = {(r["benchmark"], r["machine"]): r for r in doc["latest"]}
    assert len(latest) == len(HISTORIES) and latest[(QUIET_UP, MACHINE)]["commit"] == shas[-1]
    assert latest[(QUIET_UP, MACHINE)]["text"].endswith("ms")
    assert row["range"] == f"{shas[STEP_AT - 1][:8]}..{shas[STEP_AT][:8]}"
    assert row["machine"] == MACHINE and row["before_text"].endswith("ms")
    text = md.read_text()
    assert text == capsys.readouterr().out
    assert f"| `{QUIET_UP}` | {MACHINE} | {row['range']} | {row['before_text']} → " in text
    ratio = rows["gemm.Stage.track_vs_torch('4096x4096x4096', 128, 3, 'f16')"]
    assert ratio["unit"] == "kernel/torch" and ratio["after_text"] == f"{ratio['after']:.4g}"
    assert f"{ratio['before_text']} → {ratio['after_text']}" in text  # a ratio stays a number


def test_no_regression_is_a_report_too_and_fail_on_regression_exits_1(history, capsys):
    results, _ = history
    args = ["--results", str(results), "-b", r"bf16"]
    assert rg.main(args + ["--fail-on-regression"]) == EXIT_OK
    assert "No benchmark's latest step is a slowdown" in capsys.readouterr().out
    assert rg.main(["--results", str(results), "--fail-on-regression"]) == EXIT_REGRESSION


def test_without_the_branch_in_git_the_results_dates_order_the_commits(history, capsys):
    results, shas = history
    by_date = _by_name(find(results, MACHINE, None, calibration={}))
    assert set(by_date) == FLAGGED and by_date[QUIET_UP].bad == shas[STEP_AT]
    assert rg.main(["--results", str(results), "--branch", "nosuch"]) == EXIT_OK
    assert "ordered by their results' dates" in capsys.readouterr().err


def test_commits_not_measured_between_good_and_bad_are_in_the_record(tmp_path, monkeypatch):
    shas = _commits(tmp_path / "repo", N_COMMITS)
    monkeypatch.setattr(detector_inputs, "ROOT", tmp_path / "repo")
    gap = range(STEP_AT - 2, STEP_AT)  # two commits before the step were never measured
    measured = [sha for i, sha in enumerate(shas) if i not in gap]
    write_history(tmp_path / "results", MACHINE, shas, HISTORIES, random.Random())
    for i in gap:
        for path in (tmp_path / "results" / MACHINE).glob(f"{shas[i][:8]}*.json"):
            path.unlink()
    found = find(tmp_path / "results", MACHINE, measured, calibration={})
    (row,) = [r for r in with_commits(found, shas) if r.benchmark == QUIET_UP]
    assert (row.good, row.bad) == (shas[STEP_AT - 3], shas[STEP_AT])
    assert row.commits == tuple(shas[STEP_AT - 2 : STEP_AT + 1]) and row.bad_subject == "c20"
    # Where git cannot say (no such repository), the record says so instead of guessing.
    (bare,) = with_commits([row], None, cwd=tmp_path)
    assert bare.commits is None and bare.bad_subject == ""


def test_commits_off_the_branch_are_left_out(history, capsys):
    results, shas = history
    series, ignored = load_history(results, MACHINE, shas[:25])
    assert ignored == 5 and all(len(s.points) == 25 for s in series)


def test_a_failed_combination_is_a_gap_not_a_value(tmp_path):
    shas = [f"{i}" * 40 for i in range(1, 4)]  # asv names files by 8 characters
    key = ("b.F.track_latency", "1")
    for i, sha in enumerate(shas):
        samples = None if i == 1 else [1e-3] * 5
        store(tmp_path, MACHINE, sha, 1_000 + i, {key: samples}, {"b.F.track_latency": "seconds"})
    (series,), _ = load_history(tmp_path, MACHINE, shas)
    assert [p.commit for p in series.points] == [shas[0], shas[2]]


def _error(capsys):
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "args, names",
    [
        (["--results", "{tmp}/nowhere"], "--results="),
        (["--machine", "nosuch"], "--machine=nosuch"),
        (["-b", "zzz_matches_nothing"], "-b/--bench='zzz_matches_nothing'"),
        (["--calibration", "{tmp}/missing.json"], "--calibration"),
        (["--calibration", "{tmp}/bad.json"], "--calibration"),
        (["--min-commits", "0"], "--min-commits=0"),
    ],
)
def test_bad_input_exits_2_naming_the_argument(history, tmp_path, capsys, args, names):
    results, _ = history
    (tmp_path / "bad.json").write_text('{"benchmarks": {"x": {"threshold": "big"}}}')
    argv = ["--results", str(results)] + [a.format(tmp=tmp_path) for a in args]
    assert rg.main(argv) == EXIT_FAILURE
    assert names in _error(capsys)


def test_an_invalid_regex_is_refused_by_argparse(history, capsys):
    results, _ = history
    with pytest.raises(SystemExit) as exit_:
        rg.main(["--results", str(results), "-b", "gemm.(Stage"])
    assert exit_.value.code == EXIT_FAILURE and "-b/--bench" in _error(capsys)


def test_one_calibration_file_for_several_machines_is_refused(history, tmp_path, capsys):
    results, shas = history
    write_history(results, "other", shas[:10], HISTORIES, random.Random())
    assert result_files.machines(results) == sorted([MACHINE, "other"])
    (tmp_path / "c.json").write_text('{"benchmarks": {}}')
    assert (
        rg.main(["--results", str(results), "--calibration", str(tmp_path / "c.json")])
        == EXIT_FAILURE
    )
    assert "--machine" in _error(capsys)
    assert rg.main(["--results", str(results), "--machine", "other"]) == EXIT_OK


def test_a_folder_without_machines_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert rg.main(["--results", str(tmp_path / "empty")]) == EXIT_FAILURE
    assert "holds no asv machine" in _error(capsys)


@pytest.mark.parametrize(
    "damage",
    [
        "truncated",  # asv writes in place; an interrupted write leaves half a file
        "a list",
        "a string for a value",
        "machine.json truncated",
        "machine.json a list",
    ],
)
def test_a_damaged_file_is_an_error_naming_it_never_a_silent_report(history, capsys, damage):
    results, shas = history
    path = next((results / MACHINE).glob(f"{shas[3][:8]}-*.json"))
    if damage.startswith("machine.json"):
        path = results / MACHINE / "machine.json"
    text = path.read_text()
    if damage.endswith("truncated"):
        path.write_text(text[: len(text) // 2])
    elif damage.endswith("a list"):
        path.write_text("[1, 2]")
    else:
        data = json.loads(text)
        key = next(iter(data["results"]))
        data["results"][key][0] = ["fast"] * len(data["results"][key][0])
        path.write_text(json.dumps(data))
    assert rg.main(["--results", str(results)]) == EXIT_FAILURE
    captured = capsys.readouterr()
    assert f"error: {path}: damaged (" in captured.err
    assert "Traceback" not in captured.err
    if not damage.startswith("machine.json"):
        # The rest of the history is still read and judged.
        assert f"({len(HISTORIES)} benchmarks checked on {MACHINE})" in captured.out
        assert "1 results file(s) could not be read" in captured.out
