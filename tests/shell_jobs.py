"""Running shell jobs for real in the test process, which plays the executor."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kairos.services.executor.jobs import Invocation, JobFailedError, ShellJob
from kairos.services.executor.runtime_policy import TeamRuntime
from kairos.services.executor.shell_job import run_shell

TEAM_A = "64001:64001"
TEAM_B = "64002:64002"
"""Two uids no account of the host uses: two teams' jobs on one executor."""


class RecordedGroups:
    """The executor's `ProcessGroups`: keeps the process group the attempt reported."""

    def __init__(self) -> None:
        self.started_groups: list[int] = []
        self.ended_groups: list[int] = []

    def started(self, pgid: int) -> None:
        self.started_groups.append(pgid)

    def ended(self, pgid: int) -> None:
        self.ended_groups.append(pgid)


def invocation(
    owner: str | None = "payments",
    user: str | None = None,
    secrets_root: Path | None = None,
    timeout_s: float = 30.0,
    groups: RecordedGroups | None = None,
) -> Invocation:
    return Invocation(
        run_id=f"job@{owner}",
        schedule_id="job",
        owner=owner,
        attempt=1,
        nominal_at=datetime(2027, 3, 14, 7, tzinfo=UTC),
        timeout=timedelta(seconds=timeout_s),
        stop=threading.Event(),
        deadline=time.monotonic() + timeout_s,
        process_groups=groups,
        runtime=TeamRuntime(user=user),
        secrets_root=secrets_root,
    )


def failure_of(job: ShellJob, attempt: Invocation, output_limit: int = 4096) -> str:
    """The reason the attempt failed; fails the test if it succeeded."""
    try:
        run_shell(job, attempt, output_limit)
    except JobFailedError as failed:
        return failed.reason
    raise AssertionError(f"{job.command!r} succeeded")


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for its parent has ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def descendants(pid: int) -> list[int]:
    """Every process below `pid` now (children, theirs, ...), read from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int(
                (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
            )
        except (FileNotFoundError, ProcessLookupError):
            continue
    found: list[int] = []
    frontier = [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent == frontier[-1]]
        frontier.pop()
        found += children
        frontier += children
    return found


def wait_for_pid(path: Path, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.02)
    return int(path.read_text())


@contextmanager
def shared_directory() -> Iterator[Path]:
    """A directory every uid may write (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="kairos-test-"))
    path.chmod(0o1777)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def kill_if_alive(pids: list[int]) -> None:
    """A test that failed must not leave its job's processes behind."""
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
