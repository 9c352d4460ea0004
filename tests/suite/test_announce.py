"""The announcer against a fake GitHub: one issue per benchmark and step, updated in
place, a comment for a new machine, closed issues left alone, bad input refused."""

import json
import urllib.parse

import pytest

from harness.cli import EXIT_FAILURE, EXIT_OK, EXIT_REGRESSION
from harness.suite import announce as an
from harness.suite import regressions as rg

REPO = "acme/gemm"
API = "https://api.github.com"
GOOD, BAD, LATER = "a" * 40, "b" * 40, "c" * 40
BENCH = "gemm.Stage.track_latency('4096x4096x4096', 128, 3, 'f16')"


class FakeGitHub:
    """The REST endpoints the announcer uses, in memory; pages of ``page_size`` issues."""

    def __init__(self, page_size=2):
        self.issues, self.comments, self.labels, self.calls = {}, {}, set(), []
        self.page_size = page_size

    def add(self, body, state="open", pull_request=False):
        number = len(self.issues) + 1
        self.issues[number] = {
            "number": number,
            "title": "t",
            "body": body,
            "state": state,
            "labels": [{"name": an.LABEL}],
        }
        if pull_request:
            self.issues[number]["pull_request"] = {"url": "x"}
        return number

    def writes(self):
        return [(m, p) for m, p in self.calls if m != "GET"]

    def __call__(self, method, url, headers, body):
        assert headers["Authorization"] == "Bearer secret"
        parts = urllib.parse.urlsplit(url)
        path = parts.path.removeprefix(f"/repos/{REPO}")
        query = dict(urllib.parse.parse_qsl(parts.query))
        data = json.loads(body) if body else None
        self.calls.append((method, path))
        if method == "GET" and path == "/issues":
            assert query["labels"] == an.LABEL and query["state"] == "all"
            page = int(query.get("page", 1))
            listed = [i for i in self.issues.values() if i["labels"]]
            chunk = listed[(page - 1) * self.page_size : page * self.page_size]
            headers = {}
            if page * self.page_size < len(listed):
                nxt = urllib.parse.urlencode({**query, "page": page + 1})
                headers["Link"] = f'<{API}/repos/{REPO}/issues?{nxt}>; rel="next"'
            return 200, headers, json.dumps(chunk).encode()
        if method == "POST" and path == "/issues":
            assert data["labels"] == [an.LABEL] and an.LABEL in self.labels
            number = self.add(data["body"])
            self.issues[number]["title"] = data["title"]
            return 201, {}, json.dumps(self.issues[number]).encode()
        if method == "PATCH" and path.startswith("/issues/"):
            self.issues[int(path.split("/")[2])]["body"] = data["body"]
            return 200, {}, b"{}"
        if method == "POST" and path.endswith("/comments"):
            self.comments.setdefault(int(path.split("/")[2]), []).append(data["body"])
            return 201, {}, b"{}"
        if method == "GET" and path == f"/labels/{an.LABEL}":
            return (200, {}, b"{}") if an.LABEL in self.labels else (404, {}, b"{}")
        if method == "POST" and path == "/labels":
            self.labels.add(data["name"])
            return 201, {}, b"{}"
        return 404, {}, b'{"message": "Not Found"}'


def entry(machine="h200", good=GOOD, bad=BAD, after=1.2e-3, benchmark=BENCH):
    """One regressions.json row as harness.suite.regressions writes it."""
    return rg.Regression(
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
    ).as_json()


def run(fake, rows, tmp_path, *extra):
    path = tmp_path / f"run{len(list(tmp_path.iterdir()))}" / "regressions.json"
    path.parent.mkdir()
    path.write_text(json.dumps(rows))
    return an.main([str(path), "--repo", REPO, *extra], transport=fake)


@pytest.fixture(autouse=True)
def token(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    monkeypatch.delenv("GITHUB_API_URL", raising=False)
    monkeypatch.delenv("GITHUB_SERVER_URL", raising=False)


def test_a_new_step_opens_one_issue_with_the_marker_and_label(tmp_path, capsys):
    fake = FakeGitHub()
    assert run(fake, [entry("h200"), entry("h100")], tmp_path) == EXIT_OK
    (issue,) = fake.issues.values()
    assert f"<!-- regression: {BENCH} {GOOD}..{BAD} -->" in issue["body"]
    assert "| h100 | 1.00ms → 1.20ms | 1.200 | 2.0% (history) |" in issue["body"]
    assert "| h200 |" in issue["body"] and f"compare/{GOOD}...{BAD}" in issue["body"]
    assert issue["title"] == f"Perf regression: {BENCH} ({GOOD[:8]}..{BAD[:8]})"
    assert an.LABEL in fake.labels and "created #1" in capsys.readouterr().out


def test_the_same_benchmark_and_step_updates_its_issue(tmp_path, capsys):
    fake = FakeGitHub()
    run(fake, [entry()], tmp_path)
    fake.calls.clear()
    assert run(fake, [entry(after=1.3e-3)], tmp_path) == EXIT_OK
    assert len(fake.issues) == 1 and "1.30ms" in fake.issues[1]["body"]
    assert fake.writes() == [("PATCH", "/issues/1")]  # an edit: no notification, no comment
    assert "updated #1" in capsys.readouterr().out
    fake.calls.clear()
    assert run(fake, [entry(after=1.3e-3)], tmp_path) == EXIT_OK
    assert fake.writes() == [] and "unchanged #1" in capsys.readouterr().out


def test_a_machine_new_to_a_known_step_is_announced_in_a_comment(tmp_path):
    fake = FakeGitHub()
    run(fake, [entry("h200")], tmp_path)
    run(fake, [entry("h100", after=1.25e-3)], tmp_path)
    assert len(fake.issues) == 1
    body = fake.issues[1]["body"]
    assert "| h100 | 1.00ms → 1.25ms |" in body and "| h200 | 1.00ms → 1.20ms |" in body
    (comment,) = fake.comments[1]
    assert "Also slower on h100" in comment and "h200" not in comment


def test_a_new_step_of_the_same_benchmark_is_a_new_issue(tmp_path):
    fake = FakeGitHub()
    run(fake, [entry()], tmp_path)
    run(fake, [entry(good=BAD, bad=LATER)], tmp_path)
    assert len(fake.issues) == 2
    assert f"{BAD}..{LATER} -->" in fake.issues[2]["body"]
    assert fake.issues[1]["body"].count("regression: ") == 1  # the first is untouched


def test_a_closed_issue_is_left_alone(tmp_path, capsys):
    fake = FakeGitHub()
    run(fake, [entry()], tmp_path)
    fake.issues[1]["state"] = "closed"
    fake.calls.clear()
    assert run(fake, [entry(after=1.5e-3)], tmp_path) == EXIT_OK
    assert fake.writes() == [] and len(fake.issues) == 1
    assert "closed #1" in capsys.readouterr().out


def test_issues_are_found_on_any_page_and_pull_requests_are_not_issues(tmp_path):
    fake = FakeGitHub(page_size=2)
    for i in range(4):
        fake.add(f"unrelated {i}")
    fake.add(an.marker(f"{BENCH} {GOOD}..{BAD}"), pull_request=True)  # a PR quoting it
    run(fake, [entry()], tmp_path)
    fake.calls.clear()
    run(fake, [entry(after=1.3e-3)], tmp_path)
    assert len(fake.issues) == 6 and fake.writes() == [("PATCH", "/issues/6")]
    assert [m for m, p in fake.calls if p == "/issues" and m == "GET"] == ["GET"] * 3


def test_past_max_new_the_rest_is_held_and_the_run_fails(tmp_path, capsys):
    fake = FakeGitHub()
    rows = [entry(benchmark=f"gemm.Stage.track_latency('{i}')") for i in range(3)]
    assert run(fake, rows, tmp_path, "--max-new", "2") == EXIT_REGRESSION
    assert len(fake.issues) == 2 and "held: " in capsys.readouterr().out


def test_a_folder_of_artifacts_is_searched_and_an_empty_one_is_nothing(tmp_path, capsys):
    fake = FakeGitHub()
    for machine in ("h100", "h200"):
        (tmp_path / "art" / f"regressions-{machine}").mkdir(parents=True)
        path = tmp_path / "art" / f"regressions-{machine}" / "regressions.json"
        path.write_text(json.dumps([entry(machine)]))
    assert an.main([str(tmp_path / "art"), "--repo", REPO], transport=fake) == EXIT_OK
    (issue,) = fake.issues.values()
    assert "| h100 |" in issue["body"] and "| h200 |" in issue["body"]
    (tmp_path / "empty").mkdir()
    fake.calls.clear()
    assert an.main([str(tmp_path / "empty"), "--repo", REPO], transport=fake) == EXIT_OK
    assert fake.calls == [] and "nothing to announce" in capsys.readouterr().out


def test_dry_run_reads_and_writes_nothing(tmp_path, capsys):
    fake = FakeGitHub()
    assert run(fake, [entry()], tmp_path, "--dry-run") == EXIT_OK
    assert fake.writes() == [] and fake.issues == {}
    assert "dry run: POST" in capsys.readouterr().out


def test_text_from_the_artifact_is_inert_in_the_issue(tmp_path):
    row = {**entry(), "before_text": "1ms | <img src=x>", "threshold_source": "`x`"}
    fake = FakeGitHub()
    assert run(fake, [row], tmp_path) == EXIT_OK
    body = fake.issues[1]["body"]
    assert "<img" not in body and "1ms \\| &lt;img src=x&gt;" in body and "(\\`x\\`)" in body
    assert an.parse_rows(body)["h200"]["before"] == "1ms | <img src=x>"


@pytest.mark.parametrize(
    "change, names",
    [
        ({"good": "abc"}, "'good'"),
        ({"benchmark": "x --> <b>"}, "'benchmark'"),
        ({"machine": "a b"}, "'machine'"),
        ({"ratio": "big"}, "'ratio'"),
    ],
)
def test_malformed_rows_are_refused_naming_the_field(tmp_path, capsys, change, names):
    fake = FakeGitHub()
    assert run(fake, [{**entry(), **change}], tmp_path) == EXIT_FAILURE
    assert names in capsys.readouterr().err and fake.calls == []


def test_bad_input_and_api_errors_exit_2(tmp_path, capsys, monkeypatch):
    fake = FakeGitHub()
    assert an.main([str(tmp_path / "nowhere"), "--repo", REPO], transport=fake) == EXIT_FAILURE
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{not json")
    assert an.main([str(tmp_path / "bad.json"), "--repo", REPO], transport=fake) == EXIT_FAILURE
    assert an.main([str(tmp_path / "bad.json"), "--repo", "nope"]) == EXIT_FAILURE
    assert "--repo='nope'" in capsys.readouterr().err

    def broken(method, url, headers, body):
        return 403, {}, b'{"message": "Resource not accessible by integration"}'

    path = tmp_path / "one.json"
    path.write_text(json.dumps([entry()]))
    assert an.main([str(path), "--repo", REPO], transport=broken) == EXIT_FAILURE
    assert "HTTP 403" in capsys.readouterr().err
    monkeypatch.delenv("GITHUB_TOKEN")
    assert an.main([str(path), "--repo", REPO], transport=fake) == EXIT_FAILURE
    assert "GITHUB_TOKEN" in capsys.readouterr().err
