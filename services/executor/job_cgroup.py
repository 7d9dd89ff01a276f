"""An attempt's own cgroup (v2), when the host lets the executor make one: the backstop that ends
what a shell job started even when its supervisor was killed before it could.

The supervisor (`job_supervisor`) finds the job's processes as its descendants; if it is
SIGKILLed, a daemon the job started with `setsid` is re-parented to init and belongs to no group
anyone kills. Membership of a cgroup is inherited by every fork and cannot be left without write
access to the cgroup tree, so killing the attempt's cgroup ends them all. A cgroup is made below
the executor's own in the unified hierarchy; where there is none, or it is read-only (many
containers), the attempt runs without one and the supervisor alone ends its processes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
import uuid
from pathlib import Path

logger = logging.getLogger(__name__)

_PREFIX = "kairos-job-"
_LEFTOVER_AGE_S = 60.0
"""An empty attempt cgroup this old was left by an executor that died before removing it; a
younger one may be one another executor just made and has not moved its supervisor into yet."""
_EMPTYING_S = 5.0
"""How long a killed cgroup may take to empty before it is left behind (logged)."""


def unified_hierarchy(mounts: str, own_cgroup: str) -> Path | None:
    """The executor's own directory of the cgroup v2 hierarchy, from the text of
    /proc/self/mounts and /proc/self/cgroup; `None` when the host mounts no v2 hierarchy."""
    mount_point = next(
        (line.split()[1] for line in mounts.splitlines() if line.split()[2:3] == ["cgroup2"]),
        None,
    )
    path = next((line[3:] for line in own_cgroup.splitlines() if line.startswith("0::")), None)
    if mount_point is None or path is None:
        return None
    return Path(mount_point) / path.lstrip("/")


class AttemptCgroup:
    """One attempt's cgroup: `create` it, `add` the supervisor before the job starts, `close`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls) -> AttemptCgroup | None:
        """A new cgroup for an attempt, or `None` when this host gives the executor none."""
        try:
            parent = unified_hierarchy(
                Path("/proc/self/mounts").read_text(), Path("/proc/self/cgroup").read_text()
            )
            if parent is None or not os.access(parent, os.W_OK):
                return None
            _remove_leftovers(parent)
            path = parent / f"{_PREFIX}{uuid.uuid4().hex[:16]}"
            path.mkdir()
        except OSError:
            return None
        return cls(path)

    def add(self, pid: int) -> bool:
        """Move `pid` in; False (the cgroup then removed) when the host refuses."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
            return True
        except OSError as error:
            logger.warning(
                "cannot move job supervisor %d into cgroup %s (%s): the attempt runs without one",
                pid,
                self.path,
                error.strerror,
            )
            self._remove()
            return False

    def close(self) -> None:
        """Kill whatever is still in the cgroup, wait for it to empty, and remove it."""
        deadline = time.monotonic() + _EMPTYING_S
        while (members := self._members()) and time.monotonic() < deadline:
            self._kill(members)
            time.sleep(0.02)
        self._remove()

    def _members(self) -> list[int]:
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def _kill(self, members: list[int]) -> None:
        # cgroup.kill (Linux 5.14) kills atomically, new forks included; older kernels get a
        # kill of each member, repeated by `close` until none is left.
        try:
            (self.path / "cgroup.kill").write_text("1")
            return
        except OSError:
            pass
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError as error:
            logger.warning("cgroup %s not removed: %s", self.path, error.strerror)


def _remove_leftovers(parent: Path) -> None:
    """Remove the empty cgroups of attempts whose executor was killed before it removed them."""
    for path in parent.glob(f"{_PREFIX}*"):
        with contextlib.suppress(OSError):
            unpopulated = "populated 0" in (path / "cgroup.events").read_text()
            if unpopulated and time.time() - path.stat().st_mtime > _LEFTOVER_AGE_S:
                # A populated cgroup cannot be removed: rmdir refuses one that filled meanwhile.
                path.rmdir()
