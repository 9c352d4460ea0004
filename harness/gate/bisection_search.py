"""Bisect's search, pure: where a binary search over a first-parent range stands, given
the outcomes (good, bad, skip) probed so far, and the search itself over an oracle that
probes one commit (``harness.gate.bisection`` probes with the gate's comparison)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from harness.policy import BAD, GOOD, SKIP

OUTCOMES = (GOOD, BAD, SKIP)


@dataclass(frozen=True, slots=True)
class Search:
    """Where a search over ``commits`` stands, given the outcomes probed so far.

    ``commits`` are the commits after GOOD, oldest first, ending with BAD; GOOD is known
    good and BAD known bad, so neither is probed. The first bad commit lies in
    ``commits[lo + 1 : hi + 1]`` (``lo == -1``: GOOD is the last good commit).
    """

    commits: tuple[str, ...]
    outcomes: Mapping[str, str]
    lo: int
    hi: int

    @property
    def candidates(self) -> tuple[str, ...]:
        """The commits that may be the first bad one, oldest first (the last is bad)."""
        return self.commits[self.lo + 1 : self.hi + 1]

    @property
    def culprit(self) -> str | None:
        """The first bad commit, when the search pinned it to one."""
        return self.candidates[0] if len(self.candidates) == 1 else None

    @property
    def probes(self) -> list[tuple[str, str]]:
        """(sha, outcome) of every probe, in the order they were made."""
        return list(self.outcomes.items())

    def next_probe(self) -> str | None:
        """The untried commit nearest the middle of the open range, or None when every
        commit between the last good and the first bad one was probed (or skipped)."""
        mid = (self.lo + self.hi) // 2
        open_ = [i for i in range(self.lo + 1, self.hi) if self.commits[i] not in self.outcomes]
        if not open_:
            return None
        return self.commits[min(open_, key=lambda i: (abs(i - mid), i))]


def settle(commits: Iterable[str], outcomes: Mapping[str, str]) -> Search:
    """The search state that ``outcomes`` (sha -> good/bad/skip) leave on ``commits``."""
    commits = tuple(commits)
    if not commits:
        raise ValueError("commits: empty; BAD itself must be the last one")
    unknown = {o for o in outcomes.values() if o not in OUTCOMES}
    if unknown:
        raise ValueError(f"outcomes: {sorted(unknown)} not among {OUTCOMES}")
    index = {sha: i for i, sha in enumerate(commits)}
    bad = [index[sha] for sha, o in outcomes.items() if o == BAD and sha in index]
    hi = min(bad, default=len(commits) - 1)
    good = [index[sha] for sha, o in outcomes.items() if o == GOOD and index.get(sha, hi) < hi]
    return Search(commits, dict(outcomes), max(good, default=-1), hi)


def first_bad(
    commits: Iterable[str],
    probe: Callable[[str], str],
    log: Callable[[str], None] = lambda line: None,
    outcomes: dict[str, str] | None = None,
) -> Search:
    """Binary-search ``commits`` (after GOOD, oldest first, ending with BAD) for the first
    bad one; ``probe(sha)`` says ``"good"``, ``"bad"`` or ``"skip"``. Without skips it
    probes at most ceil(log2(len(commits))) commits. ``outcomes`` is filled as probes
    finish, so a caller that is interrupted keeps them."""
    outcomes = {} if outcomes is None else outcomes
    state = settle(commits, outcomes)
    while (sha := state.next_probe()) is not None:
        left = len(state.candidates)
        step = len(outcomes) + 1
        log(
            f"bisect: step {step}/~{step - 1 + math.ceil(math.log2(left))}: probing {sha[:7]} "
            f"({left} commits left)"
        )
        outcome = probe(sha)
        if outcome not in OUTCOMES:
            raise ValueError(f"probe({sha[:7]}) returned {outcome!r}, not one of {OUTCOMES}")
        outcomes[sha] = outcome
        state = settle(commits, outcomes)
    return state
