"""Which GPU runs which combination: a stable placement by rendezvous hashing, and the
``--gpus`` option read against the GPUs this process sees. Pure; the suite's whole-suite
plan (``harness.suite.shard``) ranks its lanes by the same ``rank``."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

# Room over the even share: a little keeps a unit on its own GPU when another unit is
# added (fewer moves, comparable histories) at a small cost in balance. ``plan`` only.
SLACK = 0.1


def rank(name: str, gpu: int) -> int:
    """Rendezvous score: each name ranks the GPUs in its own stable order."""
    return int.from_bytes(hashlib.sha256(f"{gpu}:{name}".encode()).digest()[:8], "big")


def plan(weights: Mapping[str, float], gpus: list[int]) -> dict[int, list[str]]:
    """Assign each unit to one GPU: its highest-ranked GPU with room for it, else the
    least-loaded GPU. Units are placed heaviest first (ties by name), a fixed order
    whatever the input order, so the plan depends on names and weights alone. A GPU has room
    while its load stays within the even share plus ``SLACK`` of it, the slack never more
    than the heaviest unit: so no shard exceeds its share by more than one unit."""
    if not gpus:
        raise ValueError("gpus: need at least one GPU index")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"gpus={gpus}: indices must be distinct")
    bad = {name: w for name, w in weights.items() if not 0 <= w < math.inf}
    if bad:
        raise ValueError(f"weights={bad}: must be finite and >= 0")
    share = sum(weights.values()) / len(gpus)
    capacity = share + min(SLACK * share, max(weights.values(), default=0.0))
    shards: dict[int, list[str]] = {g: [] for g in gpus}
    load = dict.fromkeys(gpus, 0.0)
    for name in sorted(weights, key=lambda n: (-weights[n], n)):
        ranked = sorted(gpus, key=lambda g: rank(name, g), reverse=True)
        # A relative tolerance: loads are sums of floats.
        room = [g for g in ranked if load[g] + weights[name] <= capacity * (1 + 1e-9)]
        gpu = room[0] if room else min(ranked, key=lambda g: load[g])
        shards[gpu].append(name)
        load[gpu] += weights[name]
    return shards


def parse_gpus(text: str, visible: int) -> list[int]:
    """``all`` or a comma list of indices, checked against the ``visible`` count."""
    if text == "all":
        if visible < 1:
            raise ValueError("--gpus all: no CUDA device is visible")
        return list(range(visible))
    try:
        gpus = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--gpus={text!r}: must be 'all' or indices like 0,1") from None
    bad = [g for g in gpus if not 0 <= g < visible]
    if not gpus or bad:
        raise ValueError(f"--gpus={text!r}: indices must be in 0..{visible - 1}")
    return gpus


def gpus_for(spec: str | None) -> list[int] | None:
    """The GPUs a measuring command may use: None (the visible device) without ``spec``,
    else the indices ``spec`` names. ValueError, saying why, where there is no CUDA GPU
    or ``spec`` names GPUs that are not there."""
    from harness.measure import device

    reason = device.no_gpu_reason()
    if reason:
        raise ValueError(f"needs a CUDA GPU: {reason}")
    if spec is None:
        return None
    import torch

    return parse_gpus(spec, torch.cuda.device_count())


def probe_gpus(spec: str) -> str:
    """One line for a parent process that must not start CUDA itself: ``ok:`` and the
    ``CUDA_VISIBLE_DEVICES`` entries that pin a child to each GPU of ``spec``
    (comma-separated), or ``error:`` and why those GPUs cannot be used."""
    import torch

    from harness.measure.device import no_gpu_reason
    from harness.measure.gpu_state import visible_entry

    reason = no_gpu_reason()
    if reason:
        return f"error: needs a CUDA GPU and found none: {reason}"
    try:
        gpus = parse_gpus(spec, torch.cuda.device_count())
    except ValueError as err:
        return f"error: {err}"
    return "ok:" + ",".join(visible_entry(g) for g in gpus)
