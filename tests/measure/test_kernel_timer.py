"""Per-launch kernel durations from CUPTI-style activity records, on synthetic records:
the split at each flush, and the paired loop's use of it (no GPU)."""

import pytest

from harness.measure import interleave, kernel_timer

FLUSH = "void at::native::vectorized_elementwise_kernel<4, bitwise_not_kernel_cuda>"


def test_each_launch_is_the_kernels_between_its_flush_and_the_next():
    records = [
        ("gemm_kernel", 50, 999),  # a warm-up launch before the first flush: not timed
        (FLUSH, 100, 40_000),
        ("gemm_kernel", 41_000, 4_780),
        (FLUSH, 50_000, 40_000),
        ("fill_kernel", 91_000, 1_000),  # a split-K GEMM zeroes C first: part of its launch
        ("gemm_kernel", 93_000, 5_000),
    ]
    # Records come back in any order; start times set the order.
    got = kernel_timer.segment_durations(list(reversed(records)), slots=2)
    assert got == pytest.approx([4.78e-3, 6.0e-3])


def test_records_that_do_not_match_the_launches_are_refused():
    with pytest.raises(ValueError, match="1 flushes found, 2 launches timed"):
        kernel_timer.segment_durations([(FLUSH, 0, 10), ("k", 20, 5)], slots=2)
    with pytest.raises(ValueError, match="launch slot 0 has no kernel after its flush"):
        kernel_timer.segment_durations([(FLUSH, 0, 10), (FLUSH, 20, 10), ("k", 40, 5)], 2)


class _Cache:
    """Stands in for the flush buffer: each flush adds its record."""

    def __init__(self, records, clock):
        self.records, self.clock = records, clock

    def bitwise_not_(self):
        self.clock[0] += 100
        self.records.append((FLUSH, self.clock[0], 40))


def test_the_paired_loop_reads_each_launch_from_the_records(monkeypatch):
    """Three functions in the permuted order of ``interleaved``: each launch's kernel
    time lands on its own function and trial, taken from the records alone."""
    records, clock = [], [0]

    def kernel(us):
        def launch():
            clock[0] += 100
            records.append(("gemm_kernel", clock[0], us * 1000))

        return launch

    def capture(run):
        run()
        return list(records)

    monkeypatch.setattr(interleave.kernel_timer, "capture", capture)
    fns = [kernel(5), kernel(6), kernel(7)]
    out = interleave._interleaved_cupti(fns, trials=2, launches=6, cache=_Cache(records, clock))
    assert [len(per_fn) for per_fn in out] == [2, 2, 2]
    for f, us in enumerate((5, 6, 7)):
        assert all(ms == pytest.approx([us * 1e-3] * 6) for ms in out[f])
    assert interleave.trial_ratios(out)[2] == pytest.approx([1.4, 1.4])


def test_an_unknown_timer_is_refused():
    with pytest.raises(ValueError, match="timer='wall': must be one of"):
        interleave.interleaved([lambda: None], timer="wall")


def test_no_cupti_is_said_plainly(monkeypatch):
    import torch.profiler

    class Broken:
        def __init__(self, *a, **k):
            raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    monkeypatch.setattr(torch.profiler, "profile", Broken)
    with pytest.raises(kernel_timer.CuptiUnavailable, match="could not record CUDA activity"):
        kernel_timer.capture(lambda: None)
