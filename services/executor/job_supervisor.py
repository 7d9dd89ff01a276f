"""The per-attempt supervisor of a shell job: everything the job starts ends with the attempt.

`shell_job` starts one per attempt, as the executor's user, in a session of its own. It makes
itself a child subreaper, so every process the job daemonises (`setsid`, a double fork) is
re-parented to it rather than to init and stays findable as its descendant, then starts
`/bin/sh -c command` as the team's uid and gid (no supplementary groups) in a new process group:
the group the watchdog kills from outside. The supervisor is not in that group, so it outlives
a kill of the group and ends what left it. When the shell ends it SIGKILLs every remaining
descendant; on SIGTERM (a stop, a timeout, the executor's death through PR_SET_PDEATHSIG) it
sends SIGTERM to all of them, then SIGKILL after the grace. It exits once none is left.

Its stdin carries the job as JSON (never argv: every user of the host reads a command line), its
stdout is the job's output, and its stderr is the report to `shell_job`, one line each:
`pgid N` once the shell runs, then `exit N` or `signal N` (the shell's status), or `error TEXT`
when the shell could not start. It imports only the standard library and runs as a script.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_WAKE_UP_ON = {signal.SIGCHLD, signal.SIGTERM}
_LONGEST_SLEEP_S = 60.0
"""Waits are cut into pieces of this length: sigtimedwait takes no infinite timeout."""


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _report(line: str) -> None:
    os.write(2, f"{line}\n".encode())


def _descendants() -> set[int]:
    """Every live process below this one: with the subreaper set, an orphan of the job is
    re-parented here, so this is everything the job started that still runs."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                # The command name may hold spaces and parentheses: the fields follow the last ')'.
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    pending = [os.getpid()]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _signal_all(signum: int, shell_group: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(shell_group, signum)
    for pid in _descendants():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


class _Children:
    """Reaps every child, the job's orphans included, and keeps the shell's wait status."""

    def __init__(self, shell: int) -> None:
        self.shell = shell
        self.shell_status: int | None = None

    def reap(self) -> bool:
        """Collect every ended child; True while any child remains."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.shell:
                self.shell_status = status

    def wait(self, until: float, *, shell_only: bool) -> bool:
        """Wait for the shell (or for every child) to end until `until`; True when it did."""
        while True:
            remaining = self.reap()
            if (self.shell_status is not None if shell_only else not remaining) or (
                time.monotonic() >= until
            ):
                return self.shell_status is not None if shell_only else not remaining
            timeout = min(max(0.0, until - time.monotonic()), _LONGEST_SLEEP_S)
            signum = signal.sigtimedwait(_WAKE_UP_ON, timeout)
            if shell_only and signum is not None and signum.si_signo == signal.SIGTERM:
                return False


def _end_everything(children: _Children, grace_s: float, *, gently: bool) -> None:
    if gently:
        _signal_all(signal.SIGTERM, children.shell)
        if children.wait(time.monotonic() + grace_s, shell_only=False):
            return
    # A process may fork while it is being killed; its child is re-parented here and found by
    # the next pass, so this converges once nothing below is left to fork.
    while True:
        _signal_all(signal.SIGKILL, children.shell)
        if children.wait(time.monotonic() + 0.2, shell_only=False):
            return


def _start_shell(job: dict[str, Any]) -> subprocess.Popen[bytes]:
    user = job.get("user")
    as_user: dict[str, Any] = {}
    if user is not None:
        as_user = {"user": user[0], "group": user[1], "extra_groups": []}

    def in_the_child() -> None:
        # After the uid change (which clears it), so the shell dies with this supervisor.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _WAKE_UP_ON)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return subprocess.Popen(
        ["/bin/sh", "-c", job["command"]],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        env=job["env"],
        cwd=job["cwd"],
        process_group=0,
        # Safe here: the supervisor has a single thread, which is what the rule guards.
        preexec_fn=in_the_child,  # noqa: PLW1509
        **as_user,
    )


def _status_line(wait_status: int | None) -> str:
    if wait_status is None:
        return "signal 9"
    if os.WIFSIGNALED(wait_status):
        return f"signal {os.WTERMSIG(wait_status)}"
    return f"exit {os.waitstatus_to_exitcode(wait_status)}"


def main(executor_pid: int) -> int:
    # Blocked, these two are read by sigtimedwait instead of interrupting anything.
    signal.pthread_sigmask(signal.SIG_BLOCK, _WAKE_UP_ON)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != executor_pid:
        return 1  # the executor died before the death signal was armed
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    with os.fdopen(0, "rb") as stdin:
        job = json.loads(stdin.read())
    try:
        shell = _start_shell(job)
    except (OSError, subprocess.SubprocessError) as error:
        _report(f"error cannot start /bin/sh{_as_whom(job)}: {error}")
        return 1
    _report(f"pgid {shell.pid}")
    children = _Children(shell.pid)
    ended = children.wait(float("inf"), shell_only=True)
    _end_everything(children, float(job["grace_s"]), gently=not ended)
    _report(_status_line(children.shell_status))
    return 0


def _as_whom(job: dict[str, Any]) -> str:
    user = job.get("user")
    return "" if user is None else f" as {user[0]}:{user[1]}"


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
