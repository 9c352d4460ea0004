"""The announcer against a fake GitHub that speaks real HTTP (tests/fake_github.py): one
issue per benchmark and step, updated in place, narrowed, closed once the benchmark is
back, a comment for a new machine, other people's and closed issues left alone, and bad
input and API errors refused in one line."""

import json
import re
import shlex
import socket
import subprocess

import pytest

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION
from harness.report import issue as issue_report
from harness.suite import announce as an
from harness.suite import issue_state
from harness.suite.detector.records import Regression
from harness.suite.github_api import LABEL
from harness.suite.regressions_file import load_rows
from tests.fake_github import FakeGitHub

REPO = "acme/gemm"
C = [f"{i:x}" * 40 for i in range(1, 10)]  # c1..c9: first-parent commits, oldest first
BENCH = "gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')"
HOSTILE = "gemm.X.track('a\"b', `id`, $(touch PWNED), 1 > out, ';' | <img src=x>)"


def entry(machine="h200", good=C[3], bad=C[4], after=1.2e-3, benchmark=BENCH, commits=None):
    """One regression as harness.suite.regressions writes it (after its good..bad)."""
    if commits is None:
        commits = C[C.index(good) + 1 : C.index(bad) + 1]
    return Regression(
        benchmark=benchmark,
        machine=machine,
        good=good,
        bad=bad,
        before=1e-3,
        after=after,
        unit="seconds",
        threshold=0.02,
        spread=0.003,
        threshold_source="history",
        commits_after=4,
        commits=tuple(commits),
        bad_subject=f"subject of {bad[:4]}",
        bad_author="Ada Lovelace",
    ).as_json()


def latest(value, machine="h200", benchmark=BENCH, commit=C[8]):
    return {"benchmark": benchmark, "machine": machine, "commit": commit, "value": value,
            "text": f"{value * 1e3:.2f}ms"}  # fmt: skip


def run(gh, rows, tmp_path, *extra, latest_rows=()):
    path = tmp_path / f"run{len(list(tmp_path.iterdir()))}" / "regressions.json"
    path.parent.mkdir()
    doc = {"version": 2, "regressions": rows, "latest": list(latest_rows)}
    path.write_text(json.dumps(doc))
    return an.main([str(path), "--repo", REPO, *extra])


@pytest.fixture
def gh(monkeypatch):
    with FakeGitHub(repo=REPO) as fake:
        monkeypatch.setenv("GITHUB_TOKEN", fake.token)
        monkeypatch.setenv("GITHUB_API_URL", fake.url)
        monkeypatch.delenv("GITHUB_SERVER_URL", raising=False)
        yield fake


def _command(body, program):
    """The one line of ``body`` that starts ``nox -s PROGRAM``."""
    (line,) = [x for x in body.splitlines() if x.startswith(f"nox -s {program} ")]
    return line


# --- opening, updating, leaving alone ------------------------------------------------------


def test_adjacent_commits_name_the_culprit_and_offer_no_bisect(gh, tmp_path, capsys):
    assert run(gh, [entry("h200"), entry("h100")], tmp_path) == EXIT_OK
    (issue,) = gh.issues.values()
    body = issue["body"]
    assert f"<!-- regression: {BENCH} {C[3]}..{C[4]} -->" in body
    assert f"**Culprit: {C[4][:10]}** ` subject of {C[4][:4]} ` by ` Ada Lovelace `" in body
    assert f"/commit/{C[4]}" in body and "nox -s bisect" not in body
    assert "| h100 |" in body and "| h200 |" in body and "1.00ms → 1.20ms | 1.200 |" in body
    assert issue["title"] == f"Perf regression: {BENCH} ({C[4][:8]})"
    assert issue["labels"] == [{"name": LABEL}] and "created #1" in capsys.readouterr().out


def test_unmeasured_commits_between_get_the_commands_and_their_count(gh, tmp_path):
    assert run(gh, [entry(good=C[1], bad=C[4])], tmp_path) == EXIT_OK
    body = gh.issues[1]["body"]
    assert "2 commit(s) between them were not measured" in body and "Culprit" not in body
    assert f"compare/{C[1]}...{C[4]}" in body
    assert _command(body, "bisect") and _command(body, "backfill")


def test_a_file_without_the_range_offers_bisect(gh, tmp_path):
    row = entry(good=C[3], bad=C[4])
    del row["commits"], row["bad_subject"], row["bad_author"]  # as written before them
    assert run(gh, [row], tmp_path) == EXIT_OK
    body = gh.issues[1]["body"]
    assert "an unknown number of commits" in body and _command(body, "bisect")


def test_the_same_step_updates_its_issue_and_then_changes_nothing(gh, tmp_path, capsys):
    run(gh, [entry()], tmp_path)
    gh.calls.clear()
    assert run(gh, [entry(after=1.3e-3)], tmp_path) == EXIT_OK
    assert len(gh.issues) == 1 and "1.30ms" in gh.issues[1]["body"]
    assert gh.writes() == [("PATCH", "/issues/1")]  # an edit: no notification, no comment
    assert "updated #1" in capsys.readouterr().out
    gh.calls.clear()
    assert run(gh, [entry(after=1.3e-3)], tmp_path) == EXIT_OK
    assert gh.writes() == [] and "unchanged #1" in capsys.readouterr().out


def test_a_machine_new_to_a_known_step_is_announced_in_a_comment(gh, tmp_path):
    run(gh, [entry("h200")], tmp_path)
    run(gh, [entry("h100", after=1.25e-3)], tmp_path)
    assert len(gh.issues) == 1
    body = gh.issues[1]["body"]
    assert "| h100 |" in body and "1.00ms → 1.25ms" in body and "1.00ms → 1.20ms" in body
    (comment,) = gh.comments[1]
    assert "Also slower on h100" in comment and "h200" not in comment


def test_two_machines_on_overlapping_ranges_open_one_issue_on_the_common_commits(gh, tmp_path):
    # h100 measured c2 and c6 only, h200 every commit: the step lies on c5 for both.
    assert run(gh, [entry("h100", good=C[2], bad=C[6]), entry("h200")], tmp_path) == EXIT_OK
    (issue,) = gh.issues.values()
    assert f"<!-- regression: {BENCH} {C[3]}..{C[4]} -->" in issue["body"]
    assert f"**Culprit: {C[4][:10]}**" in issue["body"] and "| h100 |" in issue["body"]
    # The other order, and the wider range first: still one step, on c5.
    assert an.steps(load_rows([entry("h200"), entry("h100", good=C[2], bad=C[6])])) == (
        an.steps(load_rows([entry("h100", good=C[2], bad=C[6]), entry("h200")]))
    )


def test_a_narrower_range_updates_the_same_issue(gh, tmp_path):
    run(gh, [entry(good=C[1], bad=C[6])], tmp_path)
    gh.calls.clear()
    assert run(gh, [entry(good=C[3], bad=C[4])], tmp_path) == EXIT_OK  # backfilled since
    assert len(gh.issues) == 1
    body = gh.issues[1]["body"]
    assert f"{C[3]}..{C[4]} -->" in body and f"**Culprit: {C[4][:10]}**" in body
    assert "nox -s bisect" not in body and gh.issues[1]["title"].endswith(f"({C[4][:8]})")
    (comment,) = gh.comments[1]
    assert f"the culprit is {C[4][:10]}" in comment


def test_a_new_step_of_the_same_benchmark_is_a_new_issue(gh, tmp_path):
    run(gh, [entry()], tmp_path)
    run(gh, [entry(good=C[6], bad=C[7])], tmp_path)
    assert len(gh.issues) == 2
    assert f"{C[6]}..{C[7]} -->" in gh.issues[2]["body"]
    assert gh.issues[1]["body"].count("regression: ") == 1  # the first is untouched


def test_a_closed_issue_is_left_alone(gh, tmp_path, capsys):
    run(gh, [entry()], tmp_path)
    gh.issues[1]["state"] = "closed"
    gh.calls.clear()
    assert run(gh, [entry(after=1.5e-3)], tmp_path) == EXIT_OK
    assert gh.writes() == [] and len(gh.issues) == 1
    assert "left #1" in capsys.readouterr().out


def test_issues_are_found_on_any_page_and_pull_requests_are_not_issues(gh, tmp_path):
    for i in range(4):
        gh.add(f"unrelated {i}")
    gh.add(issue_state.marker(f"{BENCH} {C[3]}..{C[4]}"), pr=True)  # a PR quoting it
    run(gh, [entry()], tmp_path)
    gh.calls.clear()
    run(gh, [entry(after=1.3e-3)], tmp_path)
    assert len(gh.issues) == 6 and gh.writes() == [("PATCH", "/issues/6")]
    assert [m for m, p in gh.calls if p == "/issues" and m == "GET"] == ["GET"] * 3


# --- whose issues --------------------------------------------------------------------------


def test_a_persons_issue_quoting_the_marker_is_never_rewritten(gh, tmp_path):
    quoted = issue_report.render_body(an.steps(load_rows([entry()]))[0], REPO, "x")
    gh.add(f"Seen this too:\n{quoted}", author="a-person")
    assert run(gh, [entry(after=1.5e-3)], tmp_path) == EXIT_OK
    assert gh.issues[1]["body"].startswith("Seen this too:") and 1 not in gh.comments
    assert len(gh.issues) == 2 and gh.issues[2]["user"]["login"] == "perf-bot"
    assert ("GET", "/user") in gh.calls


def test_an_installation_token_acts_as_the_actions_bot(gh, tmp_path, capsys):
    gh.login = None  # GET /user: 403, as for the workflow's GITHUB_TOKEN
    run(gh, [entry()], tmp_path)
    assert gh.issues[1]["user"]["login"] == "github-actions[bot]"
    assert run(gh, [entry(after=1.3e-3)], tmp_path) == EXIT_OK
    assert "1.30ms" in gh.issues[1]["body"] and len(gh.issues) == 1
    assert "acting as github-actions[bot]" in capsys.readouterr().out


def test_author_names_the_identity_without_asking(gh, tmp_path):
    gh.add(issue_report.render_body(an.steps(load_rows([entry()]))[0], REPO, "x"), author="bot9")
    assert run(gh, [entry(after=1.3e-3)], tmp_path, "--author", "bot9") == EXIT_OK
    assert "1.30ms" in gh.issues[1]["body"] and ("GET", "/user") not in gh.calls


# --- back under the threshold ------------------------------------------------------------


def test_a_benchmark_back_under_its_threshold_closes_its_issue_with_a_comment(gh, tmp_path):
    run(gh, [entry()], tmp_path, latest_rows=[latest(1.2e-3)])
    assert gh.issues[1]["state"] == "open"
    gh.calls.clear()
    assert run(gh, [], tmp_path, latest_rows=[latest(1.01e-3)]) == EXIT_OK
    assert gh.issues[1]["state"] == "closed" and gh.issues[1]["state_reason"] == "completed"
    (comment,) = gh.comments[1]
    assert "back under its threshold" in comment and "1.01ms" in comment and "1.00ms" in comment
    gh.calls.clear()
    assert run(gh, [], tmp_path, latest_rows=[latest(1.0e-3)]) == EXIT_OK
    assert gh.writes() == []  # closed: nothing more to say


@pytest.mark.parametrize(
    "rows, newest",
    [
        ([], [latest(1.06e-3)]),  # faster than the step, still 6% over the level before it
        ([], [latest(1.0e-3, machine="h100")]),  # the issue's machine was not in this run
        ([entry(good=C[6], bad=C[7])], [latest(1.0e-3)]),  # regressing again, another step
    ],
)
def test_an_issue_stays_open_without_evidence_that_it_is_back(gh, tmp_path, rows, newest):
    run(gh, [entry()], tmp_path)
    run(gh, rows, tmp_path, latest_rows=newest)
    assert gh.issues[1]["state"] == "open" and 1 not in gh.comments


# --- the command in the issue --------------------------------------------------------------


def _suite_name(unit="gemm.Stage"):
    from harness.suite import discovery
    from harness.suite.target import ROOT

    listed = discovery.listing(ROOT)
    return listed, next(iter(listed[unit]["names"]))


def test_the_printed_bisect_command_selects_exactly_the_announced_benchmark(
    gh, tmp_path, worker_entry
):
    from harness.gate import bisection as bisect
    from harness.suite import history
    from harness.suite.jobs import select
    from harness.suite.target import ROOT

    listed, name = _suite_name()
    assert "'" in name  # the quotes that broke the command's shell quoting
    assert run(gh, [entry(good=C[1], bad=C[4], benchmark=name)], tmp_path) == EXIT_OK
    body = gh.issues[1]["body"]

    argv = shlex.split(_command(body, "bisect"))
    assert argv[:4] == ["nox", "-s", "bisect", "--"]
    args = bisect.build_parser().parse_args(argv[4:])
    assert (args.good, args.bad) == (C[1], C[4])
    unit = name.split(".track")[0]
    assert select(listed, [args.bench]) == {unit: [name]}  # nothing else from the suite
    gate_name = listed[unit]["names"][name][1]
    discover = worker_entry("listing").common.discover
    assert [n for n, _, _ in discover(ROOT, args.bench)] == [gate_name]

    argv = shlex.split(_command(body, "backfill"))
    args = history.build_parser().parse_args(["backfill", *argv[4:]])
    assert args.rev_range == f"{C[1]}..{C[4]}" and select(listed, args.bench) == {unit: [name]}


def test_hostile_names_stay_inert_in_the_command(gh, tmp_path):
    assert run(gh, [entry(good=C[1], bad=C[4], benchmark=HOSTILE)], tmp_path) == EXIT_OK
    line = _command(gh.issues[1]["body"], "bisect")
    # What a shell passes on, pasted as it is: the exact arguments, nothing run.
    shown = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + line.removeprefix("nox ")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")[:-1]
    assert shown == ["-s", "bisect", "--", C[1], C[4], "-b", issue_report.bench_regex(HOSTILE)]
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "out").exists()
    assert re.search(shown[-1], HOSTILE) and not re.search(shown[-1], HOSTILE + "x")


def test_hostile_names_and_subjects_stay_inert_in_the_markdown(gh, tmp_path):
    markdown_it = pytest.importorskip("markdown_it")
    row = entry(good=C[1], bad=C[4], benchmark=HOSTILE)
    row.update(bad_subject="`x` <script>alert(1)</script> @everyone #1", before_text="<b>")
    assert run(gh, [row, {**entry(benchmark=HOSTILE), **row, "commits": [C[4]]}], tmp_path) == 0
    body = gh.issues[1]["body"]
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(body)
    assert html.count("-->") == 2  # nothing in the name ends a hidden line early
    html = re.sub(r"<!--.*?-->", "", html, flags=re.S)  # what a browser shows
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    escaped = HOSTILE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    escaped = escaped.replace('"', "&quot;")
    assert f"<code>{escaped}</code>" in html  # the whole name, one code span
    assert "<code>`x` &lt;script&gt;alert(1)&lt;/script&gt; @everyone #1</code>" in html
    assert issue_state.parse(body).benchmark == HOSTILE


# --- input, limits and errors ------------------------------------------------------------


def test_past_max_new_the_rest_is_held_and_the_run_fails(gh, tmp_path, capsys):
    rows = [entry(benchmark=f"gemm.Stage.track_latency('{i}')") for i in range(3)]
    assert run(gh, rows, tmp_path, "--max-new", "2") == EXIT_REGRESSION
    assert len(gh.issues) == 2 and "held: " in capsys.readouterr().out
    assert run(gh, [entry(benchmark="gemm.X.track_y")], tmp_path, "--max-new", "0") == 1
    assert len(gh.issues) == 2


def test_max_new_below_zero_is_refused_naming_the_rule(gh, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        run(gh, [entry()], tmp_path, "--max-new", "-1")
    err = capsys.readouterr().err
    assert exit_.value.code == EXIT_FAILURE and "--max-new" in err and ">= 0" in err
    assert gh.calls == []


def test_a_folder_of_artifacts_is_searched_and_an_empty_one_is_nothing(gh, tmp_path, capsys):
    for machine in ("h100", "h200"):
        path = tmp_path / "art" / f"regressions-{machine}" / "regressions.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps([entry(machine)]))  # version 1: the bare list
    assert an.main([str(tmp_path / "art"), "--repo", REPO]) == EXIT_OK
    (issue,) = gh.issues.values()
    assert "| h100 |" in issue["body"] and "| h200 |" in issue["body"]
    (tmp_path / "empty").mkdir()
    gh.calls.clear()
    assert an.main([str(tmp_path / "empty"), "--repo", REPO]) == EXIT_OK
    assert gh.calls == [] and "nothing to announce" in capsys.readouterr().out


def test_an_issue_written_before_the_state_line_is_still_updated(gh, tmp_path):
    old_rows = {"h200": {"before": "1.00ms", "after": "1.20ms", "ratio": 1.2, "threshold": 0.02,
                         "source": "history"}}  # fmt: skip
    old = f"{issue_state.marker(f'{BENCH} {C[3]}..{C[4]}')}\n<!-- regression-data: "
    gh.add(old + json.dumps(old_rows) + " -->\nold text")
    assert run(gh, [entry("h100", after=1.3e-3)], tmp_path) == EXIT_OK
    body = gh.issues[1]["body"]
    assert len(gh.issues) == 1 and "| h200 |" in body and "1.00ms → 1.30ms" in body


def test_dry_run_reads_and_writes_nothing(gh, tmp_path, capsys):
    assert run(gh, [entry()], tmp_path, "--dry-run") == EXIT_OK
    assert gh.writes() == [] and gh.issues == {}
    assert "dry run: POST" in capsys.readouterr().out


def test_text_from_the_artifact_is_inert_in_the_table(gh, tmp_path):
    row = {**entry(), "before_text": "1ms | <img src=x>", "threshold_source": "`x`"}
    assert run(gh, [row], tmp_path) == EXIT_OK
    body = gh.issues[1]["body"]
    assert "<img" not in body and "1ms \\| &lt;img src=x&gt;" in body and "(\\`x\\`)" in body
    assert issue_state.parse(body).rows["h200"]["before_text"] == "1ms | <img src=x>"


@pytest.mark.parametrize(
    "change, names",
    [
        ({"good": "abc"}, "'good'"),
        ({"benchmark": "x --> <b>"}, "'benchmark'"),
        ({"machine": "a b"}, "'machine'"),
        ({"ratio": "big"}, "'ratio'"),
        ({"commits": ["abc"]}, "'commits'"),
    ],
)
def test_malformed_rows_are_refused_naming_the_field(gh, tmp_path, capsys, change, names):
    assert run(gh, [{**entry(), **change}], tmp_path) == EXIT_FAILURE
    assert names in capsys.readouterr().err and gh.calls == []


def test_bad_input_exits_2(gh, tmp_path, capsys, monkeypatch):
    assert an.main([str(tmp_path / "nowhere"), "--repo", REPO]) == EXIT_FAILURE
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{not json")
    assert an.main([str(tmp_path / "bad.json"), "--repo", REPO]) == EXIT_FAILURE
    assert an.main([str(tmp_path / "bad.json"), "--repo", "nope"]) == EXIT_FAILURE
    assert "--repo='nope'" in capsys.readouterr().err
    assert run(gh, [entry()], tmp_path, "--author", "a b") == EXIT_FAILURE
    assert "--author='a b'" in capsys.readouterr().err
    monkeypatch.delenv("GITHUB_TOKEN")
    assert run(gh, [entry()], tmp_path) == EXIT_FAILURE
    assert "GITHUB_TOKEN" in capsys.readouterr().err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "fault, says",
    [
        (dict(method="GET", path="/issues$", status=500), "HTTP 500: Server Error"),
        (dict(method="GET", path="/issues$", status=200, body=b"<html>proxy</html>"), "not JSON"),
        (dict(method="GET", path="/issues$", status=404, body=b'{"message": "Not Found"}'), "404"),
        (dict(method="POST", path="/issues$", status=502, body=b"<h1>bad</h1>", echo=True), "502"),
        (dict(method="GET", path="/user$", status=401, body=b'{"message": "Bad creds"}'), "401"),
    ],
)
def test_api_errors_exit_2_in_one_line_without_the_token(gh, tmp_path, capsys, fault, says):
    gh.fail(**fault)
    assert run(gh, [entry()], tmp_path) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert says in err and gh.token not in err and len(err.strip().splitlines()) == 1


def test_a_refused_connection_exits_2_in_one_line(gh, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{_closed_port()}")
    assert run(gh, [entry()], tmp_path) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert "no reply" in err and len(err.strip().splitlines()) == 1


def test_render_writes_each_steps_text_without_a_token_or_the_api(gh, tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN")
    out = tmp_path / "bodies"
    rows = [entry(), entry(benchmark=HOSTILE, good=C[1], bad=C[5])]
    assert run(gh, rows, tmp_path, "--render", str(out)) == EXIT_OK
    assert gh.calls == [] and sorted(p.name for p in out.iterdir()) == ["step-1.md", "step-2.md"]
    texts = [p.read_text() for p in sorted(out.iterdir())]
    adjacent = next(t for t in texts if C[4][:7] in t.splitlines()[0] or "Ada Lovelace" in t)
    assert "subject of" in adjacent and "nox -s bisect" not in adjacent
    gapped = next(t for t in texts if t is not adjacent)
    line = _command(gapped, "bisect")
    assert re.search(shlex.split(line)[-1], HOSTILE)  # one inert argument, the exact name
    (tmp_path / "ro").write_text("a file, not a folder")
    assert run(gh, rows, tmp_path, "--render", str(tmp_path / "ro")) == EXIT_FAILURE
