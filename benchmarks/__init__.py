"""Command-line benchmarks of the training stage (``python3 -m benchmarks.bench_gemm``)."""
