"""What a gate self-test keeps between its workers and across runs.

- **Injection cycles.** The first injected worker on a GPU calibrates the delay of each
  injected side (one per slowdown); their cycles go to ``inject-cycles<tag>.json`` (the
  ``injected`` side) or ``inject-cycles<tag>-<side>.json`` in the work folder, and every
  later worker on that GPU sets them (``keep_cycles``). After the first
  ``inject.SETTLE_ITERATIONS`` iterations, a benchmark whose injection those iterations
  saw off the request gets its cycles moved in the file, and the iterations so far are
  run again (``settle_cycles``); each GPU settles once.
- **The checkpoint** (``--resume FILE``). After every finished iteration the self-test
  rewrites FILE with its settings, each GPU's finished iterations (the gate's verdicts,
  A/A and injected, per slowdown), the injection calibrations, each GPU's cycles and
  whether they were settled, and the launch scales its workers ran at.
  Started again with the same FILE and settings, it loads them and runs only the
  iterations still missing, with the same cycles, so an n = 20 run can span several
  shorter sessions on one GPU.
  Settings that differ (another commit, regex, slowdown, threshold, method, rounds, GPUs
  or calibration file) are refused by name: their iterations would not add up.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness.gate import decide as gd
from harness.gate import inject
from harness.revisions import records

VERSION = 2
# The settings a resumed run must share with the checkpoint, in the order they are checked.
SETTINGS = ("commit", "bench", "slowdown", "threshold", "method", "rounds", "gpus", "calibration")


def calibrations(run: records.Record, side: str = "injected") -> dict[str, records.Injection]:
    """``{benchmark: injection}`` of the calibrations one injected worker's run made
    (paired: ``side``'s), leaving out benchmarks that were given their cycles and those
    that failed."""
    if isinstance(run, records.Fatal):
        return {}
    out = {}
    for name, entry in run.results.items():
        if isinstance(entry, records.Paired):
            found = entry.injection.get(side)
        else:
            found = entry.injection
        if found is not None and found.steps:
            out[name] = found
    return out


def cycles_file(work: Path, tag: str, side: str = "injected") -> Path:
    """Where the workers of GPU ``tag`` (``""`` or ``-gpu<N>``) find the cycles of the
    injected ``side``."""
    return work / (
        f"inject-cycles{tag}.json" if side == "injected" else f"inject-cycles{tag}-{side}.json"
    )


def keep_cycles(
    work: Path,
    injected: Mapping[str, float],
    run: records.Record,
    tag: str,
    log: Callable[[str], None],
    calibrated: dict[str, dict[str, records.Injection]] | None = None,
) -> dict[str, Path]:
    """Write the cycles ``run``'s worker calibrated for each ``injected`` side (side ->
    slowdown) to a file for the later workers (``--inject-cycles``) and add its records to
    ``calibrated[side]``; ``{side: file}`` of the sides it calibrated (a side missing
    from it calibrated nothing, and the next worker calibrates it again)."""
    out = {}
    for side, slowdown in injected.items():
        found = calibrations(run, side)
        if not found:
            continue
        if calibrated is not None:
            calibrated.setdefault(side, {}).update(found)
        path = cycles_file(work, tag, side)
        cycles = {name: record.cycles for name, record in found.items()}
        path.write_text(json.dumps(inject.cycles_record(slowdown, cycles), indent=2) + "\n")
        log(
            f"gate_selftest{tag}: injection of {slowdown:.1%} calibrated for {len(found)} "
            f"benchmark(s); the later workers set these cycles ({path.name})"
        )
        out[side] = path
    return out


def settle_cycles(
    arms: Sequence,
    out: Sequence[tuple[list[gd.Verdict], ...]],
    cycles: Mapping[str, Path],
    calibrated: dict[str, dict[str, records.Injection]] | None,
    tag: str,
    log: Callable[[str], None],
) -> bool:
    """Settle the calibrated cycles of each of ``arms`` (side, slowdown; its verdicts are
    the (2k+1)-th of each iteration in ``out``) on the slowdown the gate saw in those
    iterations (``inject.settle``): the moved cycles go to the side's file in ``cycles``
    and to ``calibrated`` (``settled_from``). True where any moved: the iterations so
    far did not run at the cycles the later ones will, and must not count."""
    moved = False
    for k, arm in enumerate(arms):
        path = cycles.get(arm.side)
        if path is None:
            continue
        now = inject.read_cycles(path.read_text(), [arm.slowdown])
        seen: dict[str, list[float]] = {}
        for iteration in out:
            for v in iteration[2 * k + 1]:
                if v.ratio is not None:
                    seen.setdefault(v.name, []).append(v.ratio - 1.0)
        new = inject.settle(now, seen, arm.slowdown)
        if not new:
            continue
        moved = True
        record = inject.cycles_record(arm.slowdown, {**now, **new})
        path.write_text(json.dumps(record, indent=2) + "\n")
        found = (calibrated or {}).get(arm.side, {})
        for name, cycles_now in new.items():
            was = statistics.median(seen[name])
            if name in found:
                settled = (now[name], was)
                found[name] = dataclasses.replace(
                    found[name], cycles=cycles_now, settled_from=settled
                )
            log(
                f"gate_selftest{tag}: {name}: the {arm.slowdown:.1%} injection was seen at "
                f"{was:+.2%} over {len(out)} iterations with {now[name]} cycles; "
                f"{cycles_now} from now on"
            )
    return moved


def join_shards(parts: dict) -> list[tuple[list[gd.Verdict], ...]]:
    """Each iteration's verdicts joined across GPUs, for the iterations every GPU
    finished. An iteration is (A/A, injected) per slowdown, in the order of the arms."""
    done = min((len(p) for p in parts.values()), default=0)
    first = next(iter(parts.values()), [])
    return [
        tuple([v for p in parts.values() for v in p[i][k]] for k in range(len(first[i])))
        for i in range(done)
    ]


def gpu_key(gpu: int | None) -> str:
    return "all" if gpu is None else str(gpu)


def tag_of(gpu: int | None) -> str:
    return "" if gpu is None else f"-gpu{gpu}"


class _Differs(Exception):
    """A checkpoint setting that is not this run's: (the setting, its saved value)."""


def _verdict(d: Mapping) -> gd.Verdict:
    return gd.Verdict(**{f.name: d[f.name] for f in dataclasses.fields(gd.Verdict)})


class Checkpoint:
    """The resumable state of one self-test, read from and written to ``path``; its
    injected ``sides`` (one per slowdown) name the cycles files it keeps."""

    def __init__(
        self,
        path: Path,
        settings: Mapping,
        work: Path,
        sides: Sequence[str] = ("injected",),
        gpu: str | None = None,
    ) -> None:
        missing = [k for k in SETTINGS if k not in settings]
        if missing:
            raise ValueError(f"checkpoint settings: missing {missing}")
        self.path = path
        self.settings = dict(settings)
        self.work = work
        self.sides = tuple(sides)
        self.gpu = gpu  # recorded for ``aa_ratios``'s readers (calibration)
        # gpu key -> whether its cycles were settled (``settle_cycles``); a checkpoint
        # from before settling counts every GPU it holds as settled.
        self.settled: dict[str, bool] = {}
        # benchmark -> launch scale the workers ran at (the calibration's, when it began)
        self.launch_scales: dict[str, int] = {}
        self._lock = threading.Lock()

    def load(self) -> tuple[dict, dict[str, dict[str, records.Injection]]]:
        """``(finished, calibrated)`` from the file, or empty ones where there is none
        yet; each GPU's cycles go back to their files in the work folder. ValueError
        naming the file and the setting that differs, or what is wrong with the file."""
        if not self.path.exists():
            return {}, {}
        try:
            data = json.loads(self.path.read_text())
            version = data["version"]
            if version != VERSION:
                raise ValueError(f"version {version!r}, this reads {VERSION}")
            saved = data["settings"]
            for key in SETTINGS:
                if saved.get(key) != self.settings[key]:
                    raise _Differs(key, saved.get(key))
            finished = {
                (None if key == "all" else int(key)): [
                    tuple([_verdict(v) for v in verdicts] for verdicts in iteration)
                    for iteration in iterations
                ]
                for key, iterations in data["iterations"].items()
            }
            cycles = {
                (None if key == "all" else int(key)): {side: dict(r) for side, r in per.items()}
                for key, per in data.get("cycles", {}).items()
            }
            calibrated = {
                side: {name: records.injection_from(d) for name, d in found.items()}
                for side, found in data.get("calibrated", {}).items()
            }
            held = dict.fromkeys([*data["iterations"], *data.get("cycles", {})], True)
            settled = {str(k): bool(v) for k, v in data.get("settled", held).items()}
            scales = data.get("launch_scales")
            if scales is not None:
                scales = {str(k): int(v) for k, v in scales.items()}
        except _Differs as differs:
            key, theirs = differs.args
            raise ValueError(
                f"--resume {self.path}: {key} was {theirs!r} there, is {self.settings[key]!r} "
                "now; resume with the same settings, or name a new checkpoint file"
            ) from None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"--resume {self.path}: not a self-test checkpoint ({err})") from None
        for gpu, per in cycles.items():
            for side, record in per.items():
                path = cycles_file(self.work, tag_of(gpu), side)
                path.write_text(json.dumps(record, indent=2) + "\n")
        self.settled.update(settled)
        if scales is not None:
            self.launch_scales = scales
        return finished, calibrated

    def resumed_cycles(self, gpu: int | None) -> dict[str, Path]:
        """``{side: cycles file}`` a loaded checkpoint left for ``gpu``."""
        paths = {side: cycles_file(self.work, tag_of(gpu), side) for side in self.sides}
        return {side: path for side, path in paths.items() if path.exists()}

    def save(self, finished: Mapping, calibrated: Mapping[str, Mapping]) -> None:
        """Rewrite the file (atomically) with every finished iteration so far."""
        with self._lock:
            cycles = {}
            for gpu in finished:
                for side, path in self.resumed_cycles(gpu).items():
                    cycles.setdefault(gpu_key(gpu), {})[side] = json.loads(path.read_text())
            data = {
                "version": VERSION,
                "settings": self.settings,
                "gpu": self.gpu,
                "iterations": {
                    gpu_key(gpu): [
                        [[dataclasses.asdict(v) for v in verdicts] for verdicts in iteration]
                        for iteration in list(iterations)
                    ]
                    for gpu, iterations in list(finished.items())
                },
                "calibrated": {
                    side: {name: dataclasses.asdict(r) for name, r in dict(found).items()}
                    for side, found in dict(calibrated).items()
                },
                "cycles": cycles,
                "settled": dict(self.settled),
                "launch_scales": dict(self.launch_scales),
            }
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # One temporary file per process: two runs never write through the same one.
            tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1) + "\n")
            os.replace(tmp, self.path)


def aa_ratios(path: Path) -> tuple[dict, str | None, dict[str, list[float]]]:
    """``(settings, gpu, {benchmark: ratios})`` of the self-test checkpoint at ``path``
    (its settings with ``launch_scales``, the scales its workers ran at: none before the
    checkpoint kept them):
    per benchmark the ratio each finished A/A comparison read (paired: the median of its
    per-trial head/base ratios, what one calibration run gives), one per iteration. Every
    slowdown's A/A comparisons share these samples; the first's are read. ValueError
    naming the file where it is not a checkpoint."""
    try:
        data = json.loads(path.read_text())
        if data["version"] != VERSION:
            raise ValueError(f"version {data['version']!r}, this reads {VERSION}")
        out: dict[str, list[float]] = {}
        for iterations in data["iterations"].values():
            for iteration in iterations:
                for verdict in iteration[0]:
                    if verdict["ratio"] is not None:
                        out.setdefault(verdict["name"], []).append(float(verdict["ratio"]))
        settings = {**data["settings"], "launch_scales": dict(data.get("launch_scales", {}))}
        return settings, data.get("gpu"), out
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        raise ValueError(f"{path}: not a self-test checkpoint ({err})") from None
