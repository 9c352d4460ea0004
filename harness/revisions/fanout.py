"""The work of several GPUs at once: the combinations placed on GPUs
(``placement.plan``), each GPU's share written to a file its workers read (``--only``),
and one thread per GPU; the one fan-out of the gate, calibration and the self-test. Also
the process gate's rounds (both sides in turn, one fresh worker each) and merging the
records of several GPUs' shares.

    from harness.revisions import fanout
    run = fanout.paired_gpus(trees, bench, out, gpus=[0, 1], names=names)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from harness.revisions import launch, records
from harness.revisions.placement import plan

SIDES = ("base", "head")


def fan_out(
    names: list[str], gpus: list[int], work: Path, tag: str, task: Callable[[int, Path], object]
) -> dict[int, object]:
    """``{gpu: task(gpu, only_file)}`` for every GPU the plan gives some of ``names`` (each
    combination on its own at about equal cost), all GPUs at once. A benchmark's every
    side and run shares its GPU. The threads are daemons joined with a timeout, so Ctrl-C
    reaches the caller at once (a task keeps what it finished where it was told to); the
    first task that raised re-raises here."""
    shards = {g: s for g, s in plan(dict.fromkeys(names, 1.0), gpus).items() if s}
    files = {}
    for gpu, shard in shards.items():
        files[gpu] = work / f"shard-{tag}-gpu{gpu}.json"
        files[gpu].write_text(json.dumps(shard))
    got: dict[int, object] = {}
    errors: list[BaseException] = []

    def one(gpu: int) -> None:
        try:
            got[gpu] = task(gpu, files[gpu])
        except Exception as err:  # re-raised in the caller's thread
            errors.append(err)

    threads = [threading.Thread(target=one, args=(g,), daemon=True) for g in shards]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(timeout=0.5)
    if errors:
        raise errors[0]
    return {g: got[g] for g in shards}


def paired_gpus(
    trees: Mapping[str, Path],
    bench: str,
    out: Path,
    gpus: list[int],
    names: list[str],
    tag: str = "pair",
    **kwargs,
) -> records.PairedRun | records.Fatal:
    """``launch.run_paired`` with the combinations ``names`` over ``gpus`` (``fan_out``),
    merged into one record."""
    parts = fan_out(
        names,
        gpus,
        out,
        tag,
        lambda g, only: launch.run_paired(
            trees, bench, out / f"{tag}-gpu{g}.json", gpu=g, only=only, **kwargs
        ),
    )
    return merge(list(parts.values()), tuple(trees))


def timer_of(runs: list[records.Record]) -> str | None:
    """The timer the paired workers of ``runs`` used (``cupti``, or ``event`` with why
    CUPTI was not), the distinct ones joined; None where none said (process mode)."""
    seen = dict.fromkeys(r.timer for r in runs if isinstance(r, records.PairedRun) and r.timer)
    return "; ".join(seen) or None


def merge(runs: list[records.Record], sides: tuple[str, ...] = ()) -> records.Record:
    """One record from several GPUs' shares of one run: the ``Fatal`` ones joined where
    any failed (naming the side when they all name the same one), else every share's
    results (paired: of ``sides``)."""
    fatal = [r for r in runs if isinstance(r, records.Fatal)]
    if fatal:
        named = {r.side for r in fatal}
        side = named.pop() if len(named) == 1 and None not in named else None
        return records.Fatal("; ".join(dict.fromkeys(r.fatal for r in fatal)), side=side)
    results: dict = {}
    for r in runs:
        results.update(r.results)
    tilelang = next((r.tilelang for r in runs), None)
    if sides or any(isinstance(r, records.PairedRun) for r in runs):
        return records.PairedRun(sides, results, timer_of(runs), tilelang)
    return records.ProcessRun(results, tilelang)


def interleave(
    trees: Mapping[str, Path],
    bench: str,
    rounds: int,
    out: Path,
    inject_head: float = 0.0,
    log: Callable[[str], None] = print,
    gpu: int | None = None,
    only: Path | None = None,
    options: Mapping[str, Mapping] | None = None,
) -> list[dict[str, records.Record]]:
    """Run both sides ``rounds`` times, alternating which goes first; one fresh worker
    process per side per round, on ``gpu`` (all visible when None). ``options[side]``
    holds ``launch.run_worker``'s ``site``/``python``/``env`` for that side (the
    dependency A/B runs one tree in two environments)."""
    runs = []
    tag = "" if gpu is None else f"-gpu{gpu}"
    for r in range(rounds):
        order = SIDES if r % 2 == 0 else SIDES[::-1]
        got = {}
        for side in order:
            log(f"gate{tag}: round {r + 1}/{rounds}: {side}")
            inject = inject_head if side == "head" else 0.0
            got[side] = launch.run_worker(
                trees[side],
                bench,
                out / f"{side}{tag}-{r}.json",
                inject,
                gpu,
                only,
                **(options or {}).get(side, {}),
            )
        runs.append(got)
    return runs


def interleave_gpus(
    trees: Mapping[str, Path],
    bench: str,
    rounds: int,
    out: Path,
    gpus: list[int],
    log: Callable[[str], None] = print,
) -> list[dict[str, records.Record]]:
    """``interleave`` with the benchmarks (the union of both sides' names) over ``gpus``
    (``fan_out``), each round's records merged across GPUs."""
    names = launch.list_names(trees, bench, out)
    parts = fan_out(
        names,
        gpus,
        out,
        "process",
        lambda g, only: interleave(trees, bench, rounds, out, log=log, gpu=g, only=only),
    )
    return [
        {side: merge([part[r][side] for part in parts.values()]) for side in SIDES}
        for r in range(rounds)
    ]
