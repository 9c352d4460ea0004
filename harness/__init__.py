"""Measurement harness for the GEMM kernels: device facts, the one timing path, metrics,
correctness checks, reports and the performance gate. Imports ``kernels``; nothing here
is imported by ``kernels``."""
