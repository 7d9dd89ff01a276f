"""The runner of each job kind: the one table a new kind joins (`JOB_RUNNERS`).

A runner gets its job's parameters, validated for its kind (`kairos.core.job_kinds`), and the
`JobRun` of the attempt; it returns when the job succeeded and raises `JobFailedError` with the
reason when it did not (a python handler's own exception is its failure too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kairos.services.executor.handlers import Handlers, RunContext
from kairos.services.executor.http_job import run_http
from kairos.services.executor.jobs import (
    HttpJob,
    Invocation,
    JobFailedError,
    KafkaJob,
    NoopJob,
    PythonJob,
    ShellJob,
)
from kairos.services.executor.kafka_job import JobProducer, run_kafka
from kairos.services.executor.shell_job import run_shell
from kairos.streams.dedupe.base import AttemptTransaction
from kairos.streams.wire.records import RunRequestedRecord


@dataclass(frozen=True, slots=True)
class JobRun:
    """One attempt as its runner sees it, besides the job's parameters."""

    invocation: Invocation
    request: RunRequestedRecord
    transaction: AttemptTransaction
    output_limit_bytes: int
    job_producer: JobProducer
    """The executor's producer, for `kafka` jobs."""
    handlers: Handlers
    """This executor's python handlers, for `python` jobs."""
    executor_instance: str


def _run_noop(_params: NoopJob, _run: JobRun) -> None:
    return


def _run_shell(params: ShellJob, run: JobRun) -> None:
    run_shell(params, run.invocation, run.output_limit_bytes)


def _run_http(params: HttpJob, run: JobRun) -> None:
    run_http(params, run.invocation, run.output_limit_bytes)


def _run_kafka(params: KafkaJob, run: JobRun) -> None:
    run_kafka(params, run.invocation, run.job_producer)


def _run_python(params: PythonJob, run: JobRun) -> None:
    handler = run.handlers.get(params.handler)
    if handler is None:  # acquire hands out only runs of this executor's handlers
        raise JobFailedError(f"no handler {params.handler!r} in executor {run.executor_instance}")
    invocation = run.invocation
    # A thread cannot be killed: at the timeout the handler is asked to stop, and the attempt
    # fails when it returns.
    timer = threading.Timer(invocation.remaining_s(), invocation.stop.set)
    timer.daemon = True
    timer.start()
    try:
        handler(
            RunContext(
                run_id=invocation.run_id,
                schedule_id=invocation.schedule_id,
                owner=invocation.owner,
                attempt=invocation.attempt,
                max_attempts=run.request.max_attempts,
                nominal_at=invocation.nominal_at,
                fired_at=run.request.fired_at,
                args=params.args,
                stop_requested=invocation.stop,
                _transaction=run.transaction,
                interval_start=invocation.interval_start,
                timezone=invocation.timezone,
            )
        )
    finally:
        timer.cancel()
    if invocation.remaining_s() <= 0:
        raise JobFailedError(invocation.timed_out_reason())


# Each runner takes its own kind's parameters; the table is read only with the parameters
# `job_params` validated for the same kind, so `Any` here loses nothing.
JOB_RUNNERS: dict[str, Callable[[Any, JobRun], None]] = {
    "noop": _run_noop,
    "shell": _run_shell,
    "http": _run_http,
    "kafka": _run_kafka,
    "python": _run_python,
}
"""The runner of each job kind, by the kind's name in `kairos.core.job_kinds.JOB_KINDS`."""
