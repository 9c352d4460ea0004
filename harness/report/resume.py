"""What an interrupted measurement already holds, so that the same command run again
(``--resume``) measures only the rest.

A measurement is resumed only from one taken the same way: the same GPU model and SM
count, the same library versions, and the same settings of the command (timing, rounds,
seed...). Anything else is refused with the setting that differs, since figures taken
another way are not the same measurement.

Two kinds of record are resumed:

- the off-table record (``benchmarks.offtable --json``, one file per measurement): its
  finished shapes are kept, and the resumed run adds the others to the same record;
- a sweep's JSON lines (``bench_gemm --jsonl``, runs appended one after another): a shape
  counts as done only where one earlier run timed every config planned for it, because
  configs are compared within one run (two runs differ by a few percent alone). A shape
  cut short is timed again, whole, in the new run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# What every measurement depends on: the GPU (DeviceSpec.record) and the libraries
# (device.versions).
DEVICE_KEYS = ("gpu", "sm_count", "tilelang", "torch", "cuda")
# A first-use tuning's settings (bench_gemm.first_use_meta); its cache folder may differ.
FIRST_USE_KEYS = ("budget_s", "candidates")


def differences(earlier: Mapping, now: Mapping, keys: Iterable[str]) -> list[str]:
    """``key: was X, is Y`` for each of ``keys`` whose value differs (a key missing from
    the earlier record differs: it was written before the setting was recorded)."""
    out = []
    for key in keys:
        was, is_ = earlier.get(key, "not recorded"), now.get(key, "not recorded")
        if key == "first_use":
            was, is_ = _first_use(was), _first_use(is_)
        if was != is_:
            out.append(f"{key}: was {was!r}, is {is_!r}")
    return out


def _first_use(value: object) -> object:
    if isinstance(value, Mapping):
        return {k: value.get(k) for k in FIRST_USE_KEYS}
    return value


def refuse(path: Path, diffs: Sequence[str]) -> None:
    """ValueError naming the settings that differ from the record being resumed."""
    if diffs:
        raise ValueError(
            f"{path} was measured another way ({'; '.join(diffs)}): run the command it was "
            "measured by, or write to a new file"
        )


@dataclass(frozen=True, slots=True)
class Done:
    """A sweep's shapes that earlier runs finished: each shape's id and the run that timed
    all its configs."""

    runs: Mapping[str, str]

    def line(self, total: int) -> str:
        if not self.runs:
            return f"resume: none of the {total} shapes was timed whole before; timing all"
        runs = ", ".join(sorted(set(self.runs.values())))
        return (
            f"resume: {len(self.runs)} of {total} shapes already timed whole (run {runs}); "
            f"timing the other {total - len(self.runs)}"
        )


def sweep_done(
    runs: Sequence, meta: Mapping, keys: Sequence[str], planned: Mapping[str, set | None]
) -> Done:
    """The shapes of ``planned`` (shape id -> the config ids to time, None for any config:
    a first-use pick) that one run of ``runs`` (``records.Run``) taken like ``meta`` (the
    same ``keys``) timed whole. A row that failed to build counts: it fails again."""
    done: dict[str, str] = {}
    for run in runs:
        if differences(run.meta, meta, keys):
            continue
        timed: dict[str, set] = {}
        for row in run.rows:
            timed.setdefault(row.shape.id, set()).add(row.config.id if row.config else None)
        for shape, configs in planned.items():
            have = timed.get(shape)
            if shape not in done and have and (configs is None or configs <= have):
                done[shape] = run.id
    return Done(done)
