"""What the suite runner measures and where: a ``Target`` (one commit's checkout and the
asv configuration that stores its results), the lanes its ``asv run``s go to (a GPU of the
host, the visible device, or a CPU lane with no GPU visible), the environment of a process
in a lane, and the listing of the target's suite (``discovery.listing``, in a child
process for another revision's tree). ``harness.suite.run`` runs it;
``harness.suite.history`` measures older commits in their own worktrees through it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.measure.gpu_state import visible_entry
from harness.suite import discovery

ROOT = Path(__file__).resolve().parent.parent.parent
# asv reads and rewrites ``~/.asv-machine.json`` in place (not atomically) as every ``asv
# machine`` and ``asv run`` starts (``asv.machine.MachineCollection``), so lanes that start
# at once would read each other's half-written file. Each lane's asv gets a file of its
# own instead: this program (stdlib and asv only, so it runs under any revision's tree)
# points asv's machine file at its first argument and runs asv on the rest.
_ASV_WITH_MACHINE_FILE = """\
import sys
from asv.machine import MachineCollection
path = sys.argv.pop(1)
MachineCollection.get_machine_file_path = staticmethod(lambda: path)
sys.argv[0] = "asv"
from asv.main import main
main()
"""


@dataclass(frozen=True)
class Target:
    """One commit to measure: the checkout holding its suite and code, and where asv
    stores the results."""

    tree: Path  # the checkout measured (this one, or a worktree of an older commit)
    sha: str
    machine: str  # asv machine name (a GPU index is appended under --gpus)
    python: str = sys.executable
    config: Path | None = None  # asv.conf.json to run with; default tree/asv.conf.json
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment

    def asv(self, *args: str, machine_file: Path | None = None) -> list[str]:
        """The command of ``asv ARGS`` under this target's configuration; with
        ``machine_file``, asv keeps its machine information there, not in the home."""
        conf = ["--config", str(self.config)] if self.config else []
        start = ["-c", _ASV_WITH_MACHINE_FILE, str(machine_file)] if machine_file else ["-m", "asv"]
        return [self.python, *start, args[0], *conf, *args[1:]]

    def machine_file(self, machine: str) -> Path:
        """The asv machine file of one lane's machine (``asv`` with ``machine_file``)."""
        return (self.tree / ".asv" / "machines" / f"{machine}.json").resolve()

    def results_dir(self) -> Path:
        path = discovery.conf_path(self.config or self.tree)
        conf = discovery.read_asv_conf(path)
        return (path.parent / conf.get("results_dir", "results")).resolve()


class SuiteError(RuntimeError):
    """The target's suite cannot be listed (it does not import: a syntax error in its
    kernels, say); the message is the error's one line."""


def suite_listing(target: Target) -> dict[str, dict]:
    """``discovery.listing`` of the target's suite: in this process for this checkout;
    for another revision's tree in a child process with that tree on the path, since its
    suite imports that revision's harness and kernels. SuiteError when it fails."""
    if target.tree.resolve() == ROOT:
        try:
            return discovery.listing(ROOT)
        except Exception as err:  # anything the suite's import raises
            raise SuiteError(f"{type(err).__name__}: {err}") from err
    script = Path(discovery.__file__).resolve()
    out = subprocess.run(
        [target.python, str(script), "--list", str(target.tree)],
        cwd=target.tree,
        env=environment(target, None),
        check=False,
        capture_output=True,
        text=True,
    )
    lines = [line.strip() for line in out.stderr.splitlines() if line.strip()]
    if out.returncode:
        raise SuiteError(lines[-1] if lines else f"listing exited {out.returncode}")
    try:
        listed = json.loads(out.stdout)
    except ValueError as err:
        raise SuiteError(f"the listing is not JSON ({err})") from None
    if not isinstance(listed, dict):
        raise SuiteError(f"the listing is a JSON {type(listed).__name__}, not an object")
    return listed


def machine_name(stem: str, gpu: int | None) -> str:
    """asv machine of one GPU of a host (``h200-gpu1``), or the host's with one device."""
    return stem if gpu is None else f"{stem}-gpu{gpu}"


@dataclass(frozen=True, slots=True)
class Lane:
    """Where units run one after another: one GPU of the host (``gpu``), the visible
    device (neither set), or one of the host's CPU lanes with no GPU visible (``cpu``,
    numbered by ``slot``)."""

    gpu: int | None = None
    cpu: bool = False
    slot: int = 0

    def __post_init__(self):
        if self.cpu and self.gpu is not None:
            raise ValueError(f"Lane(gpu={self.gpu}, cpu=True): a CPU lane has no GPU")
        if self.slot < 0 or (self.slot and not self.cpu):
            raise ValueError(f"Lane(slot={self.slot}): only a CPU lane has a slot, >= 0")

    def machine(self, stem: str) -> str:
        """``<stem>-cpu``, ``<stem>-cpu1``, ... or the GPU's (``machine_name``)."""
        return f"{stem}-{self.tag}" if self.cpu else machine_name(stem, self.gpu)

    @property
    def tag(self) -> str:
        """``gpu0``, ``cpu`` (``cpu1``, ...), or ``gpu`` for the visible device."""
        if self.cpu:
            return f"cpu{self.slot or ''}"
        return "gpu" if self.gpu is None else f"gpu{self.gpu}"


CPU_LANE = Lane(cpu=True)


def environment(target: Target, lane: Lane | None) -> dict[str, str]:
    """The environment of a process that runs ``target``'s suite in ``lane`` (None: no
    lane, the visible devices as they are)."""
    env = {**os.environ, **target.env}
    if lane is not None and lane.cpu:
        # Nothing in the CPU lane may open a CUDA context on a GPU another lane times.
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif lane is not None and lane.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_entry(lane.gpu)
    return env
