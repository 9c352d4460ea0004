"""Static resources of a kernel built for sm_90a, and its cold compile time. CPU only:
needs the CUDA compiler, not a GPU."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kernels import GemmConfig, GemmKernel, GemmShape, make_gemm
from kernels.gemm import pass_configs

ARCH = "sm_90a"
_PTXAS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "static_smem": re.compile(r"(\d+) bytes smem"),
}


# The packed launch arguments in TileLang's host code end with grid x, y, z, block x, y, z
# and the dynamic shared memory in bytes, each an int64 literal.
_LAUNCH_INT = re.compile(r"v_int64\) = \(\(int64_t\)(\d+)\)")


def dynamic_smem(host_source: str) -> int | None:
    """The dynamic shared memory the host code launches the kernel with, or None when the
    launch arguments do not read as expected (block x a whole number of warps, y = z = 1)."""
    values = [int(v) for v in _LAUNCH_INT.findall(host_source)]
    if len(values) < 7:
        return None
    block, smem = values[-4:-1], values[-1]
    if block[0] % 32 or block[1:] != [1, 1]:
        return None
    return smem


@dataclass(frozen=True, slots=True)
class Resources:
    registers: int  # per thread
    spill_bytes: int  # spill stores + spill loads
    # static (ptxas) + dynamic: what the built kernel is launched with, read from its host
    # code (the config's estimate of the A/B stages where that cannot be read)
    smem_bytes: int
    has_wgmma: bool
    has_tma: bool


def parse_ptxas(text: str) -> dict[str, int]:
    """Numbers from ``ptxas --verbose`` output for the single kernel entry. ptxas leaves
    the static shared memory out where there is none (a kernel without mbarriers, such
    as cp.async loads': "Used 162 registers, used 1 barriers"): 0 then."""
    out = {}
    for key, pattern in _PTXAS.items():
        found = pattern.search(text)
        if found is None and key == "static_smem" and _PTXAS["registers"].search(text):
            out[key] = 0
            continue
        if found is None:
            raise ValueError(f"ptxas output has no {key!r} line:\n{text[-500:]}")
        out[key] = int(found.group(1))
    return out


def sm90a_resources(kernel: GemmKernel) -> Resources:
    """Rebuild the kernel's generated CUDA source with ``ptxas --verbose`` and read the
    register, spill and shared-memory figures; TileLang reports them only for HIP. Any
    family's compiled kernel serves (``Operator.kernel``: ``source``, ``jit_kernel``,
    ``config``)."""
    from tilelang.contrib import nvcc

    src = kernel.source
    with tempfile.TemporaryDirectory() as tmp:
        cu = Path(tmp) / "gemm.cu"
        cu.write_text(src)
        cmd = [
            nvcc.get_nvcc_compiler(),
            "-cubin",
            "-O3",
            "-gencode=arch=compute_90a,code=sm_90a",
            "--ptxas-options=--verbose",
            *nvcc.default_compile_options(),
            "-o",
            str(Path(tmp) / "gemm.cubin"),
            str(cu),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise RuntimeError(f"nvcc failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    stats = parse_ptxas(proc.stdout + proc.stderr)
    try:
        dynamic = dynamic_smem(kernel.jit_kernel.get_host_source())
    except Exception:  # no host code to read (another backend): the config's estimate
        dynamic = None
    return Resources(
        registers=stats["registers"],
        spill_bytes=stats["spill_stores"] + stats["spill_loads"],
        smem_bytes=stats["static_smem"]
        + (kernel.config.smem_bytes if dynamic is None else dynamic),
        has_wgmma="GmmaDescriptor" in src or "wgmma" in src,
        has_tma="tma_load" in src,
    )


def cold_compile_seconds(shape: GemmShape, config: GemmConfig, arch: str = ARCH) -> float:
    """Wall time of TileLang lowering plus nvcc for one GEMM config, caches off."""
    return cold_compile_program_seconds(make_gemm(shape, config), arch, pass_configs(config))


def cold_compile_program_seconds(
    program, arch: str = ARCH, options: dict[str, bool] | None = None
) -> float:
    """Wall time of TileLang lowering plus nvcc for one program (any family's
    ``Operator.program``), with TileLang's caches off; ``options``: its pass options."""
    import tilelang

    tilelang.disable_cache()
    try:
        start = time.perf_counter()
        tilelang.compile(program, target={"kind": "cuda", "arch": arch}, pass_configs=options)
        return time.perf_counter() - start
    finally:
        tilelang.enable_cache()
