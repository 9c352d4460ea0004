"""Operator families behind one contract (``contract.Operator``): shapes, config space,
seeded inputs, a float64 reference, build, baseline, flops and bytes, asv tracks.

``registry`` names every family and owns the one walk from a combination to a built
kernel (``build_combination``). The dense GEMM's operator is ``gemm`` here; every other
family is a package of its own (``families/``), registered by one line of pyproject.toml
(``docs/add_a_family.md``)."""
