"""Binding the kernel families' asv classes into the suite's modules.

Every package pyproject.toml registers (``[tool.tilelang-gemm-perf] families``, read by
``harness.ops.registry``) declares its classes in its ``bench`` module's ``ASV`` table,
kind -> classes. A suite module binds the kinds it holds onto their bases, under each
class's own name: ``families.py`` the ``gpu`` ones (on ``gemm._GpuFamily``), ``static.py``
the ``resources`` and ``compile_time`` ones (on its ``_Resources`` and ``_CompileTime``),
so all CPU tracks stay one unit that compiles alone.

asv finds a benchmark class by walking a module's public names, and names it by that
module and the class (``families.<Class>.track_latency``). The bound class keeps its
family module as ``__module__`` and its qualified name, so asv reads its source (the
version hash, the setup_cache key) from the family's own ``bench.py``.
"""

from harness.ops import registry

KINDS = ("gpu", "resources", "compile_time")


def bound(bases: dict[str, type], module: str) -> dict[str, type]:
    """``{name: class}`` of every registered family's classes of the kinds ``bases``
    names, each a subclass of (the family's class, its kind's base), which discovery
    names as found in suite module ``module``. ValueError naming the package for an
    unknown kind or a name bound twice."""
    out: dict[str, type] = {}
    for package in registry.family_packages():
        table = getattr(registry.family_module(package, registry.ASV_MODULE), "ASV", {})
        for kind, specs in table.items():
            if kind not in KINDS:
                raise ValueError(
                    f"{package}.{registry.ASV_MODULE}.ASV: kind {kind!r}: "
                    f"must be one of {list(KINDS)}"
                )
            if kind not in bases:
                continue
            for spec in specs:
                if spec.__name__ in out:
                    raise ValueError(f"{package}: asv class {spec.__name__} is bound twice")
                namespace = {
                    "__module__": spec.__module__,
                    "__qualname__": spec.__qualname__,
                    "__doc__": spec.__doc__,
                    "_suite_module": module,
                }
                out[spec.__name__] = type(spec.__name__, (spec, bases[kind]), namespace)
    return out
