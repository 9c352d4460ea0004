"""asv's forkserver imports the families' heavy modules once (``asv_bench._preimport``);
every other process (discovery, a plain import) leaves them to the process that needs them."""

import sys
import types

import pytest

from asv_bench import _preimport


def test_only_the_forkserver_imports_anything(monkeypatch):
    monkeypatch.delitem(sys.modules, "json.tool", raising=False)
    assert _preimport.preimport(["benchmark.py", "discover", "asv_bench"], ("json.tool",)) == []
    assert "json.tool" not in sys.modules
    got = _preimport.preimport(["benchmark.py", "run_server", "asv_bench", "sock"], ("json.tool",))
    assert got == ["json.tool"] and "json.tool" in sys.modules


def test_a_module_this_host_lacks_is_left_out():
    server = ["benchmark.py", "run_server", "asv_bench", "sock"]
    assert _preimport.preimport(server, ("no_such_module_here", "json")) == ["json"]


def test_an_import_that_starts_cuda_is_refused_by_name(monkeypatch):
    fake = types.ModuleType("torch")
    fake.cuda = types.SimpleNamespace(is_initialized=lambda: True)
    monkeypatch.setitem(sys.modules, "torch", fake)
    with pytest.raises(_preimport.CudaStarted, match="importing json initialised CUDA"):
        _preimport.preimport(["benchmark.py", "run_server"], ("json",))


def test_the_heavy_modules_import_without_starting_cuda():
    server = ["benchmark.py", "run_server", "asv_bench", "sock"]
    got = _preimport.preimport(server)
    assert "torch" in got and "kernels.gemm" in got
    import torch

    assert not torch.cuda.is_initialized()
