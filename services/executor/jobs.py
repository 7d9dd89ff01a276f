"""How to run the built-in job kinds; their parameters' rules are `kairos.core.job_kinds`'s.

A job is `{"kind": …, …}` in the schedule; `JobSpec` carries the kind and the other fields as its
parameters, which `job_params` validates when a run is admitted, with the rules `kairos apply`
checks before publishing. Each runner raises `JobFailedError` with a reason when the attempt
fails, returns when it succeeds, and stops early when the attempt's `stop` event is set
(replaced, lease lost, shutdown) or its timeout passes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Any, Protocol

from confluent_kafka import KafkaError, Message

from kairos.core.errors import KairosError
from kairos.core.job_kinds import (
    JOB_KINDS,
    HttpJob,
    JobParams,
    JobParamsError,
    KafkaJob,
    NoopJob,
    PythonJob,
    ShellJob,
    job_params,
)
from kairos.streams.ports import Producer

# The parameter models are re-exported: the executor's modules read every job's rules here.
__all__ = [
    "JOB_KINDS",
    "HttpJob",
    "Invocation",
    "JobFailedError",
    "JobParams",
    "JobParamsError",
    "KafkaJob",
    "NoopJob",
    "ProcessGroups",
    "PythonJob",
    "ShellJob",
    "job_params",
    "run_http",
    "run_kafka",
    "run_shell",
]

logger = logging.getLogger(__name__)

_KILL_GRACE_S = 2.0
"""How long a shell job has between SIGTERM and SIGKILL when it must stop."""
_SETPRIV = shutil.which("setpriv")


class JobFailedError(KairosError):
    """An attempt failed; `reason` says why, for the `failed` event and the dead letter."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class ProcessGroups(Protocol):
    """Told of the process group of an attempt's shell job, so that it can be killed from
    outside the worker (the lease lost, the executor paused past it)."""

    def started(self, pgid: int) -> None: ...

    def ended(self, pgid: int) -> None: ...


@dataclass(frozen=True)
class Invocation:
    """One attempt of one run, as a job runner sees it."""

    run_id: str
    schedule_id: str
    attempt: int
    nominal_at: datetime
    timeout: timedelta
    stop: threading.Event
    """Set when the attempt must stop before it ends by itself."""
    deadline: float
    """`time.monotonic()` value at which the attempt times out."""
    process_groups: ProcessGroups | None = None

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def timed_out_reason(self) -> str:
        return f"timed out after {self.timeout.total_seconds():g}s"


def _payload(value: str | dict[str, Any] | list[Any] | None) -> bytes | None:
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else json.dumps(value).encode()


# -- shell -----------------------------------------------------------------------------------


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


# -- http ------------------------------------------------------------------------------------


def run_http(job: HttpJob, invocation: Invocation, output_limit: int) -> None:
    headers = {
        **job.headers,
        # The run id is the idempotency key: a retried or redelivered run sends the same one,
        # so a service that honours it applies the request's effect once.
        "Idempotency-Key": invocation.run_id,
        "X-Kairos-Schedule-Id": invocation.schedule_id,
        "X-Kairos-Attempt": str(invocation.attempt),
    }
    if isinstance(job.body, dict | list):
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(
        job.url, data=_payload(job.body), headers=headers, method=job.method.upper()
    )
    try:
        # The timeout bounds the connection and each read; a stop request cannot interrupt
        # a request in flight, so http jobs stop at the latest when their timeout passes.
        with urllib.request.urlopen(request, timeout=max(0.001, invocation.remaining_s())) as r:
            status, body = r.status, r.read(output_limit)
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read(output_limit)
    except (urllib.error.URLError, OSError) as error:
        if isinstance(error, TimeoutError) or invocation.remaining_s() <= 0:
            raise JobFailedError(invocation.timed_out_reason()) from None
        cause = error.reason if isinstance(error, urllib.error.URLError) else error
        raise JobFailedError(f"request to {job.url} failed: {cause}") from None
    if not 200 <= status < 300:
        text = body.decode(errors="replace").strip()
        raise JobFailedError(f"HTTP {status}" + (f": {text}" if text else ""))


# -- kafka -----------------------------------------------------------------------------------


def run_kafka(job: KafkaJob, invocation: Invocation, producer: Producer) -> None:
    delivered = threading.Event()
    failure: list[str] = []

    def on_delivery(error: KafkaError | None, _: Message) -> None:
        if error is not None:
            failure.append(error.str())
        delivered.set()

    producer.produce(
        job.topic,
        key=invocation.run_id,
        value=_payload(job.payload),
        headers=[*job.headers.items(), ("kairos-run-id", invocation.run_id)],
        on_delivery=on_delivery,
    )
    # Several workers share the producer; whichever polls serves every delivery callback.
    while not delivered.is_set() and invocation.remaining_s() > 0:
        producer.poll(min(0.1, invocation.remaining_s()))
    if not delivered.is_set():
        raise JobFailedError(invocation.timed_out_reason())
    if failure:
        raise JobFailedError(f"producing to {job.topic} failed: {failure[0]}")
