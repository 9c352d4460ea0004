"""Measuring one GEMM: timing, GPU state, correctness, inputs, compiled resources, metrics."""
