"""The workflows' security rules, read from the YAML (docs/runners.md says why each).

`nox -s workflows` lints the same files with zizmor and actionlint; these tests pin the
rules those linters cannot know: which runner serves which job, where caches and the
token live, and what a label event may cancel.
"""

from pathlib import Path

import pytest

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


def test_no_pr_job_names_the_cache_publish_loads():
    published = {
        str(s.get("env", {}).get("TILELANG_CACHE_DIR"))
        for s in _load("publish.yml")["jobs"]["publish"]["steps"]
    } - {"None"}
    pr = str(_load("gpu.yml"))
    assert published and not any(path in pr for path in published)


def test_publish_has_a_runner_pr_jobs_cannot_ask_for():
    publish = _load("publish.yml")["jobs"]["publish"]
    pr_jobs = _load("gpu.yml")["jobs"]
    for labels in _labels(publish):
        assert "gpu-publish" in labels and "gpu" not in labels
    for job_id in ("gpu-tests", "gate"):
        for labels in _labels(pr_jobs[job_id]):
            assert "gpu" in labels and "gpu-publish" not in labels


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
    # TileLang's cache persists on the runner, one folder per kind of job: PR jobs
    # (gpu.yml) never name the folder publish loads its kernels from.
    kind = "pr" if name == "gpu.yml" else "main"
    for step in nox:
        assert (
            step["env"]["TILELANG_CACHE_DIR"]
            == f"${{{{ runner.tool_cache }}}}/tilelang-cache-{kind}"
        )
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
    assert [s["run"] for name, s in steps.items() if name and name.endswith("asv-results")] == [
        "nox -s results -- checkout",
        'nox -s results -- push --message "asv results from $ASV_MACHINE"',
    ]


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
