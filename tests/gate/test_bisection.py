"""Bisect on the CPU: the pure search over synthetic histories, judging one comparison,
every refusal of bad input on a throwaway git repository, and main() end to end with the
gate's comparison faked."""

import itertools
import json
import math
import random
import re
import subprocess

import pytest

from harness.cli import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION
from harness.gate import bisection as bisect
from harness.gate import decide as gd
from harness.gate import run as gate
from harness.measure import device
from harness.revisions import git, launch, placement, records
from harness.suite import discovery
from tests.fakes import paired_payload

# The search.


def _history(n):
    return [f"c{i:02d}" + "0" * 38 for i in range(n)]


def _oracle(commits, culprit, skipped=()):
    """Commits from index ``culprit`` on are bad; those in ``skipped`` do not build."""
    calls = []

    def probe(sha):
        calls.append(sha)
        i = commits.index(sha)
        if i in skipped:
            return bisect.SKIP
        return bisect.BAD if i >= culprit else bisect.GOOD

    return probe, calls


@pytest.mark.parametrize("n", range(1, 21))
def test_finds_the_culprit_at_every_position_in_log2_probes(n):
    commits = _history(n)
    for culprit in range(n):
        probe, calls = _oracle(commits, culprit)
        result = bisect.first_bad(commits, probe)
        assert result.culprit == commits[culprit], (n, culprit)
        assert len(calls) <= math.ceil(math.log2(n)), (n, culprit, calls)
        assert commits[-1] not in calls  # BAD is known bad
        assert len(set(calls)) == len(calls)


def _expected_candidates(n, culprit, skipped):
    """The last good commit before ``culprit`` that builds, up to the first bad one that
    does (BAD itself is bad without a probe)."""
    lo = max((i for i in range(culprit) if i not in skipped), default=-1)
    hi = min(i for i in range(culprit, n) if i not in skipped or i == n - 1)
    return lo + 1, hi + 1


@pytest.mark.parametrize("n", range(1, 9))
def test_skipped_commits_leave_exactly_the_range_they_hide(n):
    commits = _history(n)
    for culprit, r in itertools.product(range(n), range(n)):
        for skipped in itertools.combinations(range(n - 1), r):
            probe, calls = _oracle(commits, culprit, set(skipped))
            result = bisect.first_bad(commits, probe)
            start, stop = _expected_candidates(n, culprit, set(skipped))
            assert result.candidates == tuple(commits[start:stop]), (culprit, skipped)
            assert len(set(calls)) == len(calls)


@pytest.mark.parametrize(
    "skipped, expected",
    [
        ({4}, [4, 5]),  # the last good one's neighbour: it or the culprit
        ({5}, [5, 6]),  # the culprit itself: it or the next one
        ({6}, [5]),  # after the culprit: routed around
        ({3, 4}, [3, 4, 5]),
        ({4, 5, 6}, [4, 5, 6, 7]),
    ],
)
def test_skips_next_to_the_culprit(skipped, expected):
    commits = _history(10)
    probe, _ = _oracle(commits, 5, skipped)
    result = bisect.first_bad(commits, probe)
    assert result.candidates == tuple(commits[i] for i in expected)
    assert result.culprit == (commits[5] if expected == [5] else None)


def test_all_skipped_leaves_every_commit_a_candidate():
    commits = _history(7)
    probe, calls = _oracle(commits, 3, set(range(7)))
    result = bisect.first_bad(commits, probe)
    assert result.candidates == tuple(commits) and result.culprit is None
    assert sorted(calls) == commits[:-1]


def test_progress_lines_count_steps_and_commits_left():
    commits = _history(13)
    lines = []
    probe, calls = _oracle(commits, 9)
    bisect.first_bad(commits, probe, log=lines.append)
    assert lines[0] == f"bisect: step 1/~4: probing {calls[0][:7]} (13 commits left)"
    assert lines[1] == f"bisect: step 2/~4: probing {calls[1][:7]} (7 commits left)"
    assert len(lines) == len(calls) <= 4


def test_an_interrupted_search_keeps_its_outcomes():
    commits = _history(16)
    probe, calls = _oracle(commits, 11)
    outcomes = {}

    def interrupted(sha):
        if len(calls) == 2:
            raise KeyboardInterrupt
        return probe(sha)

    with pytest.raises(KeyboardInterrupt):
        bisect.first_bad(commits, interrupted, outcomes=outcomes)
    state = bisect.settle(commits, outcomes)
    assert len(outcomes) == 2 and commits[11] in state.candidates
    assert 1 < len(state.candidates) <= 4


def test_a_probe_answer_outside_good_bad_skip_is_refused():
    with pytest.raises(ValueError, match="not one of"):
        bisect.first_bad(_history(4), lambda sha: "regression")


# Judging one comparison.


def _verdict(name, status):
    return gd.Verdict(name, status, 1e-3, 1e-3, 1.0, 1.0, 0.5, 0.9, 1.1, 0.02, "why")


def _comparison(statuses, base_fatal=False):
    base = records.Fatal("ImportError") if base_fatal else records.ProcessRun({})
    verdicts = [_verdict(name, status) for name, status in statuses.items()]
    return gate.Comparison(verdicts, [{"base": base, "head": records.ProcessRun({})}], "table")


@pytest.mark.parametrize(
    "statuses, outcome",
    [
        ({"a": gd.REGRESSION, "b": gd.UNCHANGED}, bisect.BAD),
        ({"a": gd.REGRESSION, "b": gd.FAILED}, bisect.BAD),
        ({"a": gd.UNCHANGED, "b": gd.IMPROVEMENT}, bisect.GOOD),
        ({"a": gd.FAILED, "b": gd.UNCHANGED}, bisect.SKIP),
        ({"a": gd.REMOVED, "b": gd.UNCHANGED}, bisect.SKIP),
        ({"b": gd.UNCHANGED}, bisect.SKIP),  # "a" not measured at all
    ],
)
def test_judge_a_probe(statuses, outcome):
    assert bisect.judge(_comparison(statuses), ["a", "b"]) == outcome


def test_good_failing_at_a_step_stops_the_search():
    with pytest.raises(bisect.BisectError, match="failed on GOOD"):
        bisect.judge(_comparison({"a": gd.FAILED}, base_fatal=True), ["a"])
    with pytest.raises(bisect.BisectError, match="failed on GOOD"):
        bisect.judge(_comparison({}), ["a"])


def test_narrowed_bench_matches_exactly_the_regressed_names():
    names = ["gemm.Stage(4096x4096x4096, 128, 3, f16)", "gemm.Stage128(128x128x128, 256, 4, f16)"]
    pattern = bisect.exactly(names)
    assert all(re.search(pattern, n) for n in names)
    for other in ("gemm.Stage(4096x4096x4096, 128, 3, f16)x", "xgemm.Stage128(128x128x128, 256"):
        assert not re.search(pattern, other)
    assert not re.search(pattern, "gemm.Stage(4096x4096x4096, 128, 3, bf16)")


# The command, on a throwaway repository.


def _git(repo, *args):
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository of c0..c11 on one branch (c0 is GOOD in most tests) and a side branch
    ``side`` off c2; git.ROOT points at it."""
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q")
    for i in range(12):
        _git(path, "commit", "-q", "--allow-empty", "-m", f"c{i}")
        if i == 2:
            _git(path, "branch", "side")
    _git(path, "checkout", "-q", "side")
    _git(path, "commit", "-q", "--allow-empty", "-m", "s1")
    _git(path, "checkout", "-q", "-")
    monkeypatch.setattr(git, "ROOT", path)
    return path


def _shas(repo):
    """c0..c11 by index."""
    return _git(repo, "rev-list", "--reverse", "HEAD").split()


NAMES = ["gemm.Stage(a)", "gemm.Stage(b)"]


@pytest.fixture
def listing(monkeypatch, tmp_path):
    """The worker's listing, faked: no worktree, no subprocess, the names in ``names``."""
    names = list(NAMES)
    monkeypatch.setattr(git, "worktree", lambda out, name, sha: tmp_path / name)
    monkeypatch.setattr(git, "remove_worktree", lambda path: None)

    def listing(tree, bench, out_file):
        return records.Listing(tuple(n for n in names if re.search(bench, n)))

    def run_worker(*args, **kwargs):
        raise AssertionError("only the listing runs before the GPU check")

    monkeypatch.setattr(launch, "listing", listing)
    monkeypatch.setattr(launch, "run_worker", run_worker)
    monkeypatch.setattr(discovery, "gate_subset", lambda root: "gemm")  # the repo has no suite
    monkeypatch.setattr(device, "no_gpu_reason", lambda: "test: no GPU here")
    monkeypatch.setattr(gate, "compare", _refuse)
    return names


def _refuse(*args, **kwargs):
    raise AssertionError("measured despite bad input")


def _main(tmp_path, *argv):
    return bisect.main([*argv, "--out", str(tmp_path / "out")])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope", "HEAD"], "GOOD='nope': names no commit"),
        (["HEAD~3", "nope"], "BAD='nope': names no commit"),
        (["HEAD", "HEAD"], "GOOD='HEAD' and BAD='HEAD' are the same commit: empty range"),
        (["HEAD", "HEAD~3"], "BAD='HEAD~3' comes before GOOD='HEAD': empty range"),
        (["side", "HEAD"], "GOOD='side' is not an ancestor of BAD='HEAD'"),
        (["HEAD~11", "HEAD", "--max-commits", "10"], "holds 11 first-parent commits, more than"),
        (["HEAD~3", "HEAD", "-b", "nothing-like-this"], "--bench='nothing-like-this' matches no"),
        (["HEAD~3", "HEAD", "--calibration", "nope.json"], "--calibration=nope.json: no such"),
        (["HEAD~3", "HEAD"], "needs a CUDA GPU: test: no GPU here"),
    ],
)
def test_bad_input_names_the_argument_and_exits_2(repo, listing, tmp_path, capsys, argv, message):
    assert _main(tmp_path, *argv) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert message in err and err.startswith("bisect: error: ")


def test_good_merged_in_from_a_side_branch_is_refused(repo, listing, tmp_path, capsys):
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    assert _main(tmp_path, "side", "HEAD") == EXIT_FAILURE
    assert "GOOD='side' is not on BAD's first-parent history" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["-b", "("], ["--rounds", "0"], ["--max-commits", "x"]])
def test_argument_types_refuse_before_anything_runs(repo, listing, tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as exit_:
        _main(tmp_path, "HEAD~3", "HEAD", *argv)
    err = capsys.readouterr().err
    assert exit_.value.code == EXIT_FAILURE and argv[0] in err


def test_a_missing_gpu_index_exits_2(repo, listing, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)

    def parse_gpus(spec, visible):
        raise ValueError(f"--gpus={spec!r}: indices must be in 0..0")

    monkeypatch.setattr(placement, "parse_gpus", parse_gpus)
    assert _main(tmp_path, "HEAD~3", "HEAD", "--gpus", "3") == EXIT_FAILURE
    assert "--gpus='3': indices must be in 0..0" in capsys.readouterr().err


# main() end to end, the gate's comparison faked.

gate_compare = gate.compare  # the real one, before a fixture fakes it


class FakeGate:
    """Stands in for run.compare: ``NAMES[0]`` regresses from commit ``planted`` on (by
    index in ``shas``); ``broken`` commits fail to build; the rest is unchanged."""

    def __init__(self, shas, planted, broken=(), regressed=True, good_fails=False):
        self.index = {sha: i for i, sha in enumerate(shas)}
        self.planted, self.broken = planted, set(broken)
        self.regressed, self.good_fails = regressed, good_fails
        self.calls = []

    def __call__(self, shas, bench, rounds, out, threshold, gpus, calibration, log, method):
        head = self.index[shas["head"]]
        self.calls.append((shas, bench))
        verdicts = []
        for name in (n for n in NAMES if re.search(bench, n)):
            if self.good_fails or head in self.broken:
                status = gd.FAILED
            elif name == NAMES[0] and self.regressed and head >= self.planted:
                status = gd.REGRESSION
            else:
                status = gd.UNCHANGED
            verdicts.append(_verdict(name, status))
        base = records.Fatal("ImportError") if self.good_fails else records.ProcessRun({})
        rounds = [{"base": base, "head": records.ProcessRun({})}]
        report = f"TABLE base {shas['base'][:10]} head {shas['head'][:10]}\n"
        return gate.Comparison(verdicts, rounds, report)


@pytest.fixture
def gpu(monkeypatch, listing):
    monkeypatch.setattr(device, "no_gpu_reason", lambda: None)


@pytest.mark.parametrize("planted", [1, 6, 11])
def test_main_names_the_planted_culprit(repo, gpu, tmp_path, capsys, monkeypatch, planted):
    shas = _shas(repo)
    fake = FakeGate(shas, planted)
    monkeypatch.setattr(gate, "compare", fake)
    assert _main(tmp_path, shas[0], "HEAD", "-b", "Stage") == EXIT_OK
    captured = capsys.readouterr()
    culprit = shas[planted]
    assert f"bisect: first bad commit: {culprit[:10]} c{planted}" in captured.out
    assert f"TABLE base {shas[0][:10]} head {culprit[:10]}" in captured.out  # the evidence
    assert "bisect: step 1/~4: probing" in captured.err
    # GOOD vs BAD on the suite's selection, then only the regressed benchmark.
    assert fake.calls[0] == ({"base": shas[0], "head": shas[11]}, "Stage")
    assert {bench for _, bench in fake.calls[1:]} <= {bisect.exactly([NAMES[0]])}
    assert len(fake.calls) <= 1 + math.ceil(math.log2(11))
    record = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert record["culprit"] == {"sha": culprit, "subject": f"c{planted}"}
    assert record["exit"] == EXIT_OK and record["measured"] == [NAMES[0]]
    assert len(record["steps"]) == len(fake.calls) and record["commits"] == 11
    assert culprit[:10] in (tmp_path / "out" / "report.md").read_text()


def test_main_without_a_regression_exits_1(repo, gpu, tmp_path, capsys, monkeypatch):
    shas = _shas(repo)
    fake = FakeGate(shas, planted=6, regressed=False)
    monkeypatch.setattr(gate, "compare", fake)
    assert _main(tmp_path, shas[0], "HEAD") == EXIT_REGRESSION
    assert "no regression between GOOD and BAD" in capsys.readouterr().err
    assert len(fake.calls) == 1
    record = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert record["culprit"] is None and record["exit"] == EXIT_REGRESSION


def test_main_reports_the_candidates_that_skipped_commits_hide(
    repo, gpu, tmp_path, capsys, monkeypatch
):
    shas = _shas(repo)
    monkeypatch.setattr(gate, "compare", FakeGate(shas, planted=6, broken={5}))
    assert _main(tmp_path, shas[0], "HEAD") == EXIT_OK
    out = capsys.readouterr().out
    assert "no single culprit; the first bad commit is one of these 2" in out
    assert f"{shas[5][:10]} c5 (skipped)" in out and f"{shas[6][:10]} c6 (bad)" in out
    record = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert record["culprit"] is None
    assert [c["sha"] for c in record["candidates"]] == shas[5:7]


def test_main_exits_2_when_the_gate_fails_on_good_or_bad(repo, gpu, tmp_path, capsys, monkeypatch):
    shas = _shas(repo)
    monkeypatch.setattr(gate, "compare", FakeGate(shas, planted=6, broken={11}))
    assert _main(tmp_path, shas[0], "HEAD") == EXIT_FAILURE
    assert "the gate failed on BAD itself" in capsys.readouterr().err
    monkeypatch.setattr(gate, "compare", FakeGate(shas, planted=6, good_fails=True))
    assert _main(tmp_path, shas[0], "HEAD") == EXIT_FAILURE
    assert "the gate failed on GOOD itself" in capsys.readouterr().err


def test_main_interrupted_keeps_what_finished(repo, gpu, tmp_path, capsys, monkeypatch):
    shas = _shas(repo)
    fake = FakeGate(shas, planted=6)

    def interrupted(*args):
        if len(fake.calls) == 3:
            raise KeyboardInterrupt
        return fake(*args)

    monkeypatch.setattr(gate, "compare", interrupted)
    assert _main(tmp_path, shas[0], "HEAD") == EXIT_INTERRUPTED
    assert "bisect: interrupted; the first bad commit is one of" in capsys.readouterr().out
    record = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert record["interrupted"] and len(record["steps"]) == 3
    assert shas[6] in [c["sha"] for c in record["candidates"]]


def test_a_commit_that_does_not_build_is_skipped_in_the_paired_gate(
    repo, gpu, tmp_path, capsys, monkeypatch
):
    """The real paired comparison, its worker faked: c5 has a syntax error in its kernels,
    so the paired worker fails as a whole, naming the side that did not import."""
    shas = _shas(repo)
    index = {sha: i for i, sha in enumerate(shas)}
    monkeypatch.setattr(git, "worktree", lambda out, name, sha: tmp_path / sha)
    monkeypatch.setattr(launch, "precompile", lambda *a, **kw: None)
    monkeypatch.setattr(gate, "calibration_path", lambda: tmp_path / "none.json")
    monkeypatch.setattr(
        launch, "resources", lambda tree, names, out_file, site=None: records.Resources({})
    )
    monkeypatch.setattr(device, "gpu_name", lambda: "NVIDIA H200")
    monkeypatch.setattr(device, "versions", lambda: {"tilelang": "0.1.15"})
    monkeypatch.setattr(gate, "compare", gate_compare)
    rng = random.Random(7)
    heads = []

    def run_paired(trees, bench, out_file, **kwargs):
        head = index[trees["head"].name]
        heads.append(head)
        if head == 5:
            fatal = "SyntaxError: '(' was never closed (gemm.py, line 12)"
            return records.Fatal(fatal, side="head", seconds=1.0)
        names = [n for n in NAMES if re.search(bench, n)]
        return paired_payload(rng, names, {"head": 0.05 if head >= 6 else 0.0}, trees)

    monkeypatch.setattr(launch, "run_paired", run_paired)
    assert _main(tmp_path, shas[0], "HEAD", "--method", "paired") == EXIT_OK
    out = capsys.readouterr().out
    assert 5 in heads
    assert f"{shas[5][:10]} c5 (skipped)" in out and f"{shas[6][:10]} c6 (bad)" in out
