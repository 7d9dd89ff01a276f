"""`shell` jobs: a command run by `/bin/sh -c` in a process group of its own."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import threading
from collections import deque
from typing import IO

from kairos.services.executor.jobs import Invocation, JobFailedError, ShellJob

logger = logging.getLogger(__name__)

_KILL_GRACE_S = 2.0
"""How long a shell job has between SIGTERM and SIGKILL when it must stop."""
_SETPRIV = shutil.which("setpriv")


class _OutputTail:
    """Keeps the last `limit` bytes of a stream read on its own thread, so a chatty job can
    neither fill the pipe (and block) nor the executor's memory."""

    def __init__(self, stream: IO[bytes], limit: int) -> None:
        self._chunks: deque[bytes] = deque()
        self._kept = 0
        self._total = 0
        self._limit = limit
        # A process the job left in the background may keep the pipe open after the shell
        # ended: the tail is then read while the reader still appends.
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[bytes]) -> None:
        with stream:
            while chunk := os.read(stream.fileno(), 65536):
                with self._lock:
                    self._total += len(chunk)
                    self._chunks.append(chunk)
                    self._kept += len(chunk)
                    while self._kept - len(self._chunks[0]) >= self._limit:
                        self._kept -= len(self._chunks.popleft())

    def text(self, wait_s: float) -> str:
        self._thread.join(wait_s)
        with self._lock:
            tail = b"".join(self._chunks)[-self._limit :]
            total = self._total
        text = tail.decode(errors="replace").strip()
        if total > len(tail):
            return f"[{total - len(tail)} earlier bytes dropped] {text}"
        return text


def run_shell(job: ShellJob, invocation: Invocation, output_limit: int) -> None:
    env = {
        **os.environ,
        **job.env,
        "KAIROS_RUN_ID": invocation.run_id,
        "KAIROS_SCHEDULE_ID": invocation.schedule_id,
        "KAIROS_ATTEMPT": str(invocation.attempt),
        "KAIROS_NOMINAL_AT": invocation.nominal_at.isoformat(),
    }
    command = ["/bin/sh", "-c", job.command]
    if _SETPRIV is not None:
        # The shell dies with the executor (even by SIGKILL): after its lease expires, another
        # executor retries the run, and the orphan must not still be running beside it.
        command = [_SETPRIV, "--pdeathsig", "KILL", "--", *command]
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        # Its own process group, so that stopping it stops everything it started.
        start_new_session=True,
    )
    assert process.stdout is not None
    output = _OutputTail(process.stdout, output_limit)
    if invocation.process_groups is not None:
        invocation.process_groups.started(process.pid)
    try:
        stopped_because = _wait(process, invocation)
    finally:
        # The attempt ends with its shell: what the shell left running in the background would
        # otherwise still run when the next attempt, or the next run, starts.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        if invocation.process_groups is not None:
            invocation.process_groups.ended(process.pid)
    code = process.returncode
    text = output.text(wait_s=_KILL_GRACE_S)
    logger.debug(
        "run=%s attempt=%d shell exit=%s output=%r",
        invocation.run_id,
        invocation.attempt,
        code,
        text,
    )
    if stopped_because is not None:
        raise JobFailedError(f"{stopped_because}; output: {text}" if text else stopped_because)
    if code != 0:
        status = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        raise JobFailedError(f"{status}; output: {text}" if text else status)


def _wait(process: subprocess.Popen[bytes], invocation: Invocation) -> str | None:
    """Wait for the shell; stop it on timeout or request. Returns why it was stopped, if so."""
    while True:
        try:
            process.wait(timeout=min(0.1, invocation.remaining_s()) or 0.001)
            return None
        except subprocess.TimeoutExpired:
            pass
        if invocation.stop.is_set():
            reason = "stopped before it ended"
        elif invocation.remaining_s() <= 0:
            reason = invocation.timed_out_reason()
        else:
            continue
        _stop_group(process)
        return reason


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=_KILL_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue
