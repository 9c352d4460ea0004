"""The Kubernetes deployment (deploy/arc/: Helm values of two gha-runner-scale-set
releases and their cache claims) against the workflows, on the CPU: every GPU job lands
on exactly one scale set, the PR set can reach neither the publish cache nor a secret,
and every runner is one job on one GPU (docs/runners.md, Running on Kubernetes with ARC).
"""

from pathlib import Path

import pytest

from tests.test_workflows import _cache, _labels, _self_hosted_jobs

yaml = pytest.importorskip("yaml", reason="PyYAML comes with asv (the bench extra)")

ARC = Path(__file__).resolve().parent.parent / "deploy" / "arc"
# Which set serves which kind of job: the publish runner's job alone can push.
PUBLISH = {("publish.yml", "publish")}


def _sets() -> dict[str, dict]:
    sets = {}
    for path in sorted(ARC.glob("*.values.yaml")):
        values = yaml.safe_load(path.read_text())
        sets[values["runnerScaleSetName"]] = values
    return sets


def _claims() -> dict[str, str]:
    """Each cache claim's name -> its namespace."""
    docs = yaml.safe_load_all((ARC / "caches.yaml").read_text())
    return {
        d["metadata"]["name"]: d["metadata"]["namespace"]
        for d in docs
        if d["kind"] == "PersistentVolumeClaim"
    }


def _runner(values: dict) -> dict:
    (runner,) = [c for c in values["template"]["spec"]["containers"] if c["name"] == "runner"]
    return runner


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _walk(node):
    yield node
    children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
    for child in children:
        yield from _walk(child)


def _set_of(job: dict) -> list[str]:
    """The scale sets a job's matrix lines can land on (one entry per line)."""
    names = set(_sets())
    return [name for labels in _labels(job) for name in labels & names]


JOBS = list(_self_hosted_jobs())


def test_there_is_a_pr_set_and_a_publish_set():
    sets = _sets()
    assert sorted(sets) == ["gpu", "gpu-publish"]
    # Two runner groups: the publish group's workflow access names publish.yml alone.
    assert len({values["runnerGroup"] for values in sets.values()}) == 2
    assert len({values["namespaceOverride"] for values in sets.values()}) == 2


@pytest.mark.parametrize("name, job_id, job", JOBS, ids=[f"{n}:{j}" for n, j, _ in JOBS])
def test_every_gpu_job_lands_on_exactly_one_set(name, job_id, job):
    # A job lands on a scale set by its name: each matrix line names exactly one set,
    # and the right kind (the single-machine labels carry the same name beside
    # self-hosted and linux).
    lines = _labels(job)
    landed = _set_of(job)
    assert len(landed) == len(lines), f"{name}:{job_id}: each line names exactly one set"
    want = "gpu-publish" if (name, job_id) in PUBLISH else "gpu"
    assert set(landed) == {want}, f"{name}:{job_id}"


def test_every_set_serves_a_job():
    assert {s for _, _, job in JOBS for s in _set_of(job)} == set(_sets())


@pytest.mark.parametrize("set_name", ["gpu", "gpu-publish"])
def test_each_set_is_one_job_on_one_pinned_gpu(set_name):
    values = _sets()[set_name]
    spec = values["template"]["spec"]
    runner = _runner(values)
    # Ephemeral: the scale-set runner takes one job (a just-in-time config) and exits;
    # the pod is never restarted, and nothing but the cache claim outlives it.
    assert runner["command"] == ["/home/runner/run.sh"]
    assert spec["restartPolicy"] == "Never"
    for volume in spec["volumes"]:
        kinds = set(volume) - {"name"}
        assert kinds <= {"emptyDir", "persistentVolumeClaim"}, volume["name"]
    # One GPU, pinned: the device plugin's choice (NVIDIA_VISIBLE_DEVICES) is device 0.
    for kind in ("requests", "limits"):
        assert runner["resources"][kind]["nvidia.com/gpu"] == 1
    env = _env(runner)
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert 0 <= values["minRunners"] <= values["maxRunners"]


@pytest.mark.parametrize("set_name", ["gpu", "gpu-publish"])
def test_each_set_keeps_its_cache_on_its_own_claim(set_name):
    values = _sets()[set_name]
    spec = values["template"]["spec"]
    env = _env(_runner(values))
    mounts = {m["name"]: m["mountPath"] for m in _runner(values)["volumeMounts"]}
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in spec["volumes"]
        if "persistentVolumeClaim" in v
    }
    (volume,) = [name for name, path in mounts.items() if path == env["TILELANG_CACHE_DIR"]]
    (claim,) = claims.values()
    assert claims == {volume: claim}
    # The claim lives in the set's own namespace: the other set cannot mount it.
    assert _claims()[claim] == values["namespaceOverride"]
    # The folder the workflows name for this kind of job is the mounted claim.
    kind = "main" if set_name == "gpu-publish" else "pr"
    tool_cache = env["RUNNER_TOOL_CACHE"]
    assert env["TILELANG_CACHE_DIR"] == f"{tool_cache}/tilelang-cache-{kind}"
    for name, job_id, job in JOBS:
        if set_name in _set_of(job):
            event = "push" if (name, job_id) in PUBLISH else "pull_request"
            for step in job["steps"]:
                cache = _cache(step, event)
                if cache and "runner.tool_cache" in cache:
                    assert (
                        cache.replace("${{ runner.tool_cache }}", tool_cache)
                        == env["TILELANG_CACHE_DIR"]
                    ), (name, job_id)


def test_the_pr_set_mounts_no_publish_volume_and_holds_no_secret():
    sets = _sets()
    publish_claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in sets["gpu-publish"]["template"]["spec"]["volumes"]
        if "persistentVolumeClaim" in v
    }
    pr = sets["gpu"]
    assert publish_claims and not publish_claims & {
        v.get("persistentVolumeClaim", {}).get("claimName")
        for v in pr["template"]["spec"]["volumes"]
    }
    assert not publish_claims & set(map(str, _walk(pr)))
    for name, values in sets.items():
        # The GitHub config secret (to register runners) is a name, never inline
        # credentials; the runner pod holds no secret and no Kubernetes API token.
        assert isinstance(values["githubConfigSecret"], str), name
        spec = values["template"]["spec"]
        assert spec["automountServiceAccountToken"] is False, name
        for node in _walk(spec):
            if isinstance(node, dict):
                found = {"secretKeyRef", "secretRef", "secret", "projected"} & set(node)
                assert not found, (name, found)
    # The PR set's jobs hold a read-only token (gpu.yml, the nightly).
    for name, job_id, job in JOBS:
        if "gpu" in _set_of(job):
            assert job["permissions"] == {"contents": "read"}, (name, job_id)
            assert "secrets." not in str(job), (name, job_id)
