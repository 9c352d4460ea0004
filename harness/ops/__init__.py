"""Operator families behind one contract (``contract.Operator``): shapes, config space,
seeded inputs, a float64 reference, build, baseline, flops and bytes, asv tracks.

``registry`` names every family and owns the one walk from a combination to a built
kernel (``build_combination``). A new family is its operator module here plus its
registration; the kernel itself lives in ``kernels/``."""
