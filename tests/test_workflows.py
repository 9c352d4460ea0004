"""The workflows' security rules, read from the YAML (docs/runners.md says why each).

`nox -s workflows` lints the same files with zizmor and actionlint; these tests pin the
rules those linters cannot know: which runner serves which job, where caches and the
token live, and what a label event may cancel.
"""

import re
from pathlib import Path

import pytest

from harness.suite.results_branch import TOKEN_ENV

yaml = pytest.importorskip("yaml", reason="PyYAML comes with asv (the bench extra)")

WORKFLOWS = Path(__file__).resolve().parent.parent / ".github" / "workflows"


def _load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def _self_hosted_jobs():
    for name in ("gpu.yml", "publish.yml", "tilelang-nightly.yml"):
        for job_id, job in _load(name)["jobs"].items():
            if "matrix.runner.labels" in str(job.get("runs-on")):
                yield name, job_id, job


def _labels(job: dict) -> list[set[str]]:
    return [set(entry["labels"]) for entry in job["strategy"]["matrix"]["runner"]]


# The one idiom these workflows use to choose a value by event.
_BY_EVENT = re.compile(
    r"\$\{\{ github\.event_name == '(\w+)' && format\('\{0\}([\w/.-]+)', (runner\.\w+)\)"
    r" \|\| format\('\{0\}([\w/.-]+)', (runner\.\w+)\) \}\}"
)


def _on(event: str, value) -> str:
    """What a workflow value reads on ``event``: itself, or the branch of the idiom above."""
    text = " ".join(str(value).split())
    match = _BY_EVENT.fullmatch(text)
    if not match:
        return text
    name, then_path, then_ctx, else_path, else_ctx = match.groups()
    ctx, path = (then_ctx, then_path) if event == name else (else_ctx, else_path)
    return f"${{{{ {ctx} }}}}{path}"


def _cache(step: dict, event: str) -> str | None:
    value = step.get("env", {}).get("TILELANG_CACHE_DIR")
    return None if value is None else _on(event, value)


def _runs_on_a_push_to_main(workflow: dict, job: dict) -> bool:
    if "push" not in workflow["on"]:
        return False
    if "main" not in (workflow["on"]["push"] or {}).get("branches", ["main"]):
        return False
    conjuncts = [c.strip() for c in " ".join(str(job.get("if", "")).split()).split("&&")]
    return "github.event_name == 'pull_request'" not in conjuncts


def test_no_pr_job_names_the_cache_publish_loads():
    published = {
        str(s.get("env", {}).get("TILELANG_CACHE_DIR"))
        for s in _load("publish.yml")["jobs"]["publish"]["steps"]
    } - {"None"}
    pr = str(_load("gpu.yml"))
    assert published and not any(path in pr for path in published)


def test_publish_has_a_runner_pr_jobs_cannot_ask_for():
    publish = _load("publish.yml")["jobs"]["publish"]
    for labels in _labels(publish):
        assert "gpu-publish" in labels and "gpu" not in labels
    # The nightly installs the newest TileLang, which nobody here has reviewed: it runs
    # where untrusted code may run, never on the runner that can push.
    pr_jobs = [("gpu.yml", "gpu-tests"), ("gpu.yml", "gate")]
    for name, job_id in [*pr_jobs, ("tilelang-nightly.yml", "tilelang-ab")]:
        for labels in _labels(_load(name)["jobs"][job_id]):
            assert "gpu" in labels and "gpu-publish" not in labels, (name, job_id)


def test_only_publish_runs_on_the_publish_runner():
    # Its runner group allows publish.yml on main only (docs/runners.md).
    on_publish = [
        (name, job_id)
        for name, job_id, job in _self_hosted_jobs()
        if any("gpu-publish" in labels for labels in _labels(job))
    ]
    assert on_publish == [("publish.yml", "publish")]


def test_no_job_that_runs_on_a_push_to_main_names_the_pr_cache():
    # A PR can leave a shared object in the PR runner's cache: a job for main that
    # loaded it would run the PR's code.
    checked = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        workflow = _load(path.name)
        for job_id, job in workflow["jobs"].items():
            if not _runs_on_a_push_to_main(workflow, job):
                continue
            checked.append((path.name, job_id))
            steps = job.get("steps", [])
            values = [*job.get("env", {}).values(), *(s.get("run", "") for s in steps)]
            values += [value for s in steps for value in s.get("env", {}).values()]
            for value in values:
                assert "tilelang-cache-pr" not in _on("push", value), (path.name, job_id)
    assert ("gpu.yml", "gpu-tests") in checked and ("gpu.yml", "gate") not in checked


SELF_HOSTED = list(_self_hosted_jobs())


@pytest.mark.parametrize(
    "name, job_id, job", SELF_HOSTED, ids=[f"{name}:{job_id}" for name, job_id, _ in SELF_HOSTED]
)
def test_self_hosted_jobs_keep_their_caches_to_themselves(name, job_id, job):
    workflow = _load(name)
    assert workflow["env"].get("PIP_NO_CACHE_DIR") == "1", "pip must keep no cache"
    steps = job["steps"]
    setup = [s for s in steps if "actions/setup-python" in s.get("uses", "")]
    assert setup and all(
        s["env"]["AGENT_TOOLSDIRECTORY"].startswith("${{ runner.temp }}/") for s in setup
    )
    nox = [s for s in steps if s.get("run", "").startswith("nox ")]
    assert nox
    # TileLang's cache persists on the runner in one folder per kind of runner, which
    # only that kind's own jobs load: PR jobs on the PR runner, publish on its own.
    # Main's code on the PR runner (a push, the nightly) compiles into $RUNNER_TEMP.
    events = ["push"] if name != "gpu.yml" or _runs_on_a_push_to_main(workflow, job) else []
    events += ["pull_request"] if "pull_request" in workflow["on"] else []
    for step in nox:
        for event in events:
            if name == "publish.yml":
                want = "${{ runner.tool_cache }}/tilelang-cache-main"
            elif event == "pull_request":
                want = "${{ runner.tool_cache }}/tilelang-cache-pr"
            else:
                want = "${{ runner.temp }}/tilelang-cache"
            assert _cache(step, event) == want, (name, job_id, event)
    # One GPU, one job: the group names the GPU (machine), whatever the runner.
    assert job["concurrency"]["group"] == "gpu-runner-${{ matrix.runner.machine }}"


def test_the_token_reaches_the_results_branch_steps_only():
    holders = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        workflow = _load(path.name)
        assert "GITHUB_TOKEN" not in str(workflow.get("env", {}))
        for job_id, job in workflow["jobs"].items():
            assert "secrets." not in str(job.get("env", {})), (path.name, job_id)
            for step in job.get("steps", []):
                if "secrets." in str(step):
                    holders.append((path.name, job_id, step.get("name")))
    # The git steps around the measuring one (main's benchmarks never run beside the
    # token), and the announcer on a GitHub-hosted runner.
    assert holders == [
        ("publish.yml", "publish", "fetch asv-results"),
        ("publish.yml", "publish", "push asv-results"),
        ("publish.yml", "announce", "python -m harness.suite.announce"),
    ]
    announce = _load("publish.yml")["jobs"]["announce"]
    assert announce["runs-on"] == "ubuntu-latest"
    assert announce["permissions"] == {"contents": "read", "issues": "write"}
    steps = {s.get("name"): s for s in _load("publish.yml")["jobs"]["publish"]["steps"]}
    # Git and the standard library only, in an environment of the token, PATH and HOME.
    clean = "env -i " + " ".join(f'{k}="${k}"' for k in TOKEN_ENV)
    module = "python3 -S -m harness.suite.results_branch"
    runs = [" ".join(s["run"].split()) for n, s in steps.items() if n and n.endswith("asv-results")]
    assert runs == [
        f"{clean} {module} checkout .asv/results",
        f'{clean} {module} push .asv/results --message "asv results from $ASV_MACHINE"',
    ]


# A command that installs packages: every package's install code would run beside the token.
_INSTALLS = re.compile(r"\b(nox|pip3?|pipx|uv|poetry|conda|mamba|npm|npx|yarn)\b|\binstall\b")


def test_no_step_that_holds_a_token_installs_anything():
    holders = 0
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_id, job in _load(path.name)["jobs"].items():
            for step in job.get("steps", []):
                if "secrets." in str(step) or "github.token" in str(step):
                    holders += 1
                    assert "run" in step, (path.name, job_id, step.get("name"))
                    assert not _INSTALLS.search(step["run"]), (path.name, job_id, step["name"])
    assert holders


def test_a_label_cancels_nothing_and_runs_nothing_but_gpu_rerun():
    gpu = _load("gpu.yml")
    assert "labeled" in gpu["on"]["pull_request"]["types"]
    concurrency = gpu["concurrency"]
    # Labeled runs get a group of their own and never cancel the one running.
    assert "github.event.action == 'labeled'" in concurrency["group"]
    assert "github.event.action != 'labeled'" in concurrency["cancel-in-progress"]
    rerun = "(github.event.action != 'labeled' || github.event.label.name == 'gpu-rerun')"
    for job_id in ("gpu-tests", "gate", "gate-comment"):
        assert rerun in gpu["jobs"][job_id]["if"], job_id
