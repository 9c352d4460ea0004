"""The dependency A/B's inputs on the CPU: what a SPEC may name and the errors it gets."""

import subprocess
import sys
from pathlib import Path

import pytest

from harness.gate import deps
from harness.revisions import records


def _site(root: Path, version: str) -> Path:
    (root / "tilelang").mkdir(parents=True)
    (root / "tilelang" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return root


def test_installed_and_a_site_folder(tmp_path):
    assert deps.resolve_env("installed", tmp_path).python == sys.executable
    env = deps.resolve_env(str(_site(tmp_path / "s", "0.1.14")), tmp_path)
    assert env.site == (tmp_path / "s").resolve() and env.expect is None


def test_a_site_folder_without_tilelang_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(deps.DepsError, match="site folder without TileLang"):
        deps.resolve_env(str(tmp_path / "empty"), tmp_path)


def test_a_spec_that_names_nothing_is_refused(tmp_path):
    with pytest.raises(deps.DepsError, match="not 'installed', 'latest', a TileLang version"):
        deps.resolve_env(str(tmp_path / "nowhere"), tmp_path)


def test_a_virtualenv_runs_its_own_interpreter(tmp_path):
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    assert deps.resolve_env(str(tmp_path / "venv"), tmp_path).python == str(python)


def test_an_unknown_version_names_the_version(monkeypatch, tmp_path):
    def pip(cmd, **kw):
        err = "ERROR: No matching distribution found for tilelang==9.9.9\n"
        return subprocess.CompletedProcess(cmd, 1, "", err)

    monkeypatch.setattr(deps.subprocess, "run", pip)
    with pytest.raises(deps.DepsError, match=r"TileLang 9\.9\.9: unknown version.*9\.9\.9"):
        deps.resolve_env("9.9.9", tmp_path)
    assert not (tmp_path / "tilelang-9.9.9").exists()


def test_an_installed_version_is_reused(monkeypatch, tmp_path):
    _site(tmp_path / "tilelang-0.1.14", "0.1.14")
    monkeypatch.setattr(deps.subprocess, "run", lambda *a, **kw: pytest.fail("pip ran"))
    env = deps.resolve_env("0.1.14", tmp_path)
    assert env.site == tmp_path / "tilelang-0.1.14" and env.expect == "0.1.14"


def test_probe_reads_the_version_a_side_imports_and_refuses_another(tmp_path):
    site = _site(tmp_path / "s", "0.1.14")
    env = deps.Env("x", "x", site=site)
    assert deps.probe(env, tmp_path) == "0.1.14"
    wrong = deps.Env("0.1.13", "x", site=site, expect="0.1.13")
    with pytest.raises(deps.DepsError, match="imports TileLang 0.1.14, not 0.1.13"):
        deps.probe(wrong, tmp_path)
    (tmp_path / "t" / "tilelang").mkdir(parents=True)
    (tmp_path / "t" / "tilelang" / "__init__.py").write_text("raise ImportError('broken')\n")
    with pytest.raises(deps.DepsError, match="cannot import TileLang there"):
        deps.probe(deps.Env("t", "t", site=tmp_path / "t"), tmp_path)


def test_a_worker_that_imported_another_version_is_a_problem():
    run = records.ProcessRun({}, tilelang="0.1.14")
    rounds = [{"base": run, "head": run, "failed": records.Fatal("ImportError")}]
    problems = deps.check_versions(rounds, {"base": "0.1.14", "head": "0.1.15"})
    assert problems == ["head: a worker imported TileLang 0.1.14, not 0.1.15"]


def test_bad_spec_exits_2_before_any_gpu_work(tmp_path, capsys):
    code = deps.main(["--base", "installed", "--head", str(tmp_path / "nope")])
    assert code == 2 and "gate_deps: error:" in capsys.readouterr().err
