"""A process beside the executor that kills a shell job once its lease may have expired.

A shell job runs in its own process group, outside the executor. When the executor is paused
(SIGSTOP, a stall of the host's memory, a debugger), its threads stop renewing the lease and
cannot stop the job; once the lease expires another executor retries the run, and the job would
still run beside the retry. The watchdog is a process of its own, in a session of its own, so it
is not paused with the executor: for each running shell job the executor tells it until when
the lease is surely held, on the monotonic clock that every process of the host shares, and
moves that instant at each renewal. When it passes, the watchdog kills the job's process group,
before another executor can reap the lease (reaping waits for the expiry on the database's
clock, which comes later). When the executor dies, the pipe closes and the watchdog kills every
job it still watches, with whatever they started in the background, then exits.

The protocol, one line each on the watchdog's stdin: `watch <pgid> <monotonic deadline> <run
id>` (again, to move the deadline), `forget <pgid>`. This file imports only the standard library:
the watchdog runs it as a script, without loading Kairos.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time

logger = logging.getLogger(__name__)


class JobWatchdog:
    """The executor's side: starts the watchdog process and tells it what to watch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[float, str]] = {}
        self._process = self._start()

    def watch(self, pgid: int, held_until: float, run_id: str) -> None:
        """Kill process group `pgid` at `held_until` (`time.monotonic()`) unless moved again."""
        with self._lock:
            self._watched[pgid] = (held_until, run_id)
            self._send(f"watch {pgid} {held_until:.6f} {run_id}\n")

    def forget(self, pgid: int) -> None:
        with self._lock:
            if self._watched.pop(pgid, None) is not None:
                self._send(f"forget {pgid}\n")

    def close(self) -> None:
        """End the watchdog; it kills what is still watched (nothing, after a clean stop)."""
        with self._lock:
            stdin = self._process.stdin
            if stdin is not None:
                with contextlib.suppress(OSError):
                    stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()

    def _start(self) -> subprocess.Popen[bytes]:
        # A session of its own: a SIGSTOP sent to the executor's process group spares it.
        return subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            start_new_session=True,
        )

    def _send(self, line: str) -> None:
        try:
            self._write(line)
        except OSError as error:
            # It died: a new one takes over every job watched, so none goes unwatched.
            logger.error("job watchdog gone (%s); starting another", error)
            self._process = self._start()
            state = "".join(
                f"watch {pgid} {held_until:.6f} {run_id}\n"
                for pgid, (held_until, run_id) in self._watched.items()
            )
            try:
                self._write(state)
            except OSError as again:
                logger.error("job watchdog cannot be started again: %s", again)

    def _write(self, text: str) -> None:
        stdin = self._process.stdin
        assert stdin is not None, "the watchdog is started with a pipe"
        stdin.write(text.encode())
        stdin.flush()


def _kill(pgid: int, run_id: str, why: str) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
        print(
            f"kairos job watchdog: run={run_id} killed process group {pgid}: {why}",
            file=sys.stderr,
            flush=True,
        )


def _apply(line: bytes, watched: dict[int, tuple[float, str]]) -> None:
    command, *fields = line.decode().split()
    if command == "watch":
        watched[int(fields[0])] = (float(fields[1]), fields[2])
    elif command == "forget":
        watched.pop(int(fields[0]), None)


def main() -> None:
    watched: dict[int, tuple[float, str]] = {}
    stdin = sys.stdin.fileno()
    pending = b""
    while True:
        soonest = min((deadline for deadline, _ in watched.values()), default=None)
        timeout = None if soonest is None else max(0.0, soonest - time.monotonic())
        readable, _, _ = select.select([stdin], [], [], timeout)
        if readable:
            chunk = os.read(stdin, 65536)
            if not chunk:
                for pgid, (_, run_id) in watched.items():
                    _kill(pgid, run_id, "its executor exited")
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                _apply(line, watched)
        now = time.monotonic()
        for pgid, (deadline, run_id) in list(watched.items()):
            if deadline <= now:
                del watched[pgid]
                _kill(pgid, run_id, "its lease was not renewed in time (executor paused?)")


if __name__ == "__main__":
    main()
