"""From a consumed record to a run the store can claim, or the reason it cannot be one.

Every check a `RunRequested` must pass happens here, before the claim: a record that fails one
is dead-lettered with the reason (and never claimed), so a retry never meets a request it cannot
run. A valid run is passed over, for the executors (in another consumer group) that run it, when
its pool is not one this executor serves, its owner not one of the teams it is bound to, or its
kind or handler not run here. A run naming a handler registered here for other teams than its
owner is dead-lettered: handlers are the teams' code, and that refusal is final.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property

from pydantic import ValidationError

from kairos.core.concurrency import run_groups
from kairos.core.errors import KairosError
from kairos.core.pools import DEFAULT_POOL
from kairos.core.run_id import RunIdError, parse_run_id
from kairos.core.schedule import OverlapPolicy
from kairos.core.schedule_dependencies import LONGEST_UPSTREAM_WAIT, UpstreamTimeout
from kairos.core.upstream_wait import Resolution
from kairos.services.executor.handlers import Handlers
from kairos.services.executor.jobs import JobParams, JobParamsError, PythonJob, job_params
from kairos.streams.dedupe.base import RunRequest, SourceRecord
from kairos.streams.wire.codec import Codec, DecodeError
from kairos.streams.wire.records import (
    JobParamsRecordError,
    RunRequestedRecord,
    job_from_record,
    read_run_requested,
    upstream_periods_of,
)

_MS = timedelta(milliseconds=1)


class RunRequestInvalidError(KairosError):
    """A decodable `RunRequested` that cannot be run; `run_id` is `None` when it has none."""

    def __init__(self, run_id: str | None, problem: str) -> None:
        self.run_id = run_id
        self.problem = problem
        super().__init__(f"run {run_id or '(no run id)'}: {problem}")


class HandlerNotPermittedError(KairosError):
    """A `python` run names a handler registered here, but not for the run's owner."""

    def __init__(self, run_id: str, problem: str) -> None:
        self.run_id = run_id
        self.problem = problem
        super().__init__(f"run {run_id}: {problem}")


@dataclass(frozen=True, slots=True)
class Rejected:
    """Dead-letter the record: `reason` and `error_class` go into the `DeadLetter`."""

    reason: str
    error_class: str


@dataclass(frozen=True, slots=True)
class PassedOver:
    """A valid run that other executors run (its pool, team, kind or handler is not served
    here)."""

    run_id: str
    kind: str


Admissible = RunRequest | Rejected | PassedOver
"""A run to claim, a record to dead-letter, or a run for other executors."""


@dataclass(frozen=True)
class ServedJobs:
    """What this executor runs: job kinds, the handlers of `python` jobs, the pools whose runs it
    takes and the teams it is bound to (empty: every team's)."""

    kinds: frozenset[str]
    handlers: Handlers
    pools: frozenset[str] = frozenset({DEFAULT_POOL})
    teams: frozenset[str] = frozenset()
    passed_over_pool: Callable[[str], None] = field(default=lambda pool: None, repr=False)
    """Told the pool of each run passed over for its pool (`pool_watch`)."""

    @cached_property
    def runners(self) -> frozenset[str]:
        """The runner of every run this executor can run (see `runner_of`)."""
        plain = {kind for kind in self.kinds if kind != "python"}
        handled = (
            {f"python:{name}" for name in self.handlers.names} if "python" in self.kinds else set()
        )
        return frozenset(plain | handled)


def runner_of(kind: str, params: JobParams) -> str:
    """What a run needs to be run: its job kind, or for `python` jobs the handler."""
    return f"python:{params.handler}" if isinstance(params, PythonJob) else kind


def read_request(
    key: bytes | None, value: bytes | None, source: SourceRecord, codec: Codec, served: ServedJobs
) -> Admissible:
    """Check one record of the runs topic.

    Never raises for bad input.
    """
    if value is None:
        return _rejected(RunRequestInvalidError(None, "a tombstone is not a RunRequested"))
    try:
        record = codec.decode(value)
    except DecodeError as error:
        return _rejected(error)
    request_record = read_run_requested(record)
    try:
        request, kind, handler = _valid_request(key, value, request_record, source)
    except (RunRequestInvalidError, JobParamsError) as error:
        return _rejected(error)
    pool, owner = request_record.pool, request_record.owner
    if pool not in served.pools:
        served.passed_over_pool(pool)
        return PassedOver(request.run_id, kind)
    if (served.teams and owner not in served.teams) or request.runner not in served.runners:
        return PassedOver(request.run_id, kind)
    refusal = None if handler is None else served.handlers.refusal(handler, owner)
    if refusal is not None:
        return _rejected(HandlerNotPermittedError(request.run_id, refusal))
    return request


def _rejected(error: KairosError) -> Rejected:
    return Rejected(str(error), type(error).__name__)


def _valid_request(
    key: bytes | None, value: bytes, record: RunRequestedRecord, source: SourceRecord
) -> tuple[RunRequest, str, str | None]:
    """The run a decoded record asks for, its job kind and its handler (`python` jobs); raises
    what is wrong with it."""
    run_id = record.run_id

    def invalid(problem: str) -> RunRequestInvalidError:
        return RunRequestInvalidError(run_id, problem)

    if key is None or key.decode("utf-8", errors="replace") != run_id:
        raise invalid(f"the record's key {key!r} is not its run id; key runs by run id")
    try:
        schedule_id, nominal = parse_run_id(run_id)
    except RunIdError as error:
        raise invalid(error.problem) from None
    if (schedule_id, nominal) != (record.schedule_id, record.nominal_at):
        raise invalid(
            f"the run id does not match schedule_id {record.schedule_id!r} and "
            f"nominal_at {record.nominal_at.isoformat()}"
        )
    if record.overlap == "unknown":
        raise invalid(
            "its overlap policy is newer than this executor knows; upgrade executors "
            "before producers (docs/wire-format.md)"
        )
    if record.max_attempts < 1 or record.timeout_ms <= 0 or record.retry_backoff_ms < 0:
        raise invalid(
            "max_attempts must be at least 1, timeout_ms above 0 and retry_backoff_ms at least 0"
        )
    try:
        job = job_from_record(record.job)
    except (JobParamsRecordError, ValidationError) as error:
        raise invalid(f"its job is not valid: {error}") from None
    params = job_params(job)
    waits_until, awaits = _upstream_wait(record, nominal)
    request = RunRequest(
        run_id=run_id,
        schedule_id=schedule_id,
        nominal_at=nominal,
        due_at=record.due_at,
        fired_at=record.fired_at,
        overlap=OverlapPolicy(record.overlap),
        max_attempts=record.max_attempts,
        retry_backoff=timedelta(milliseconds=record.retry_backoff_ms),
        runner=runner_of(job.kind, params),
        value=value,
        source=source,
        start_by=_after(nominal, record.deadline_start_by_ms),
        finish_by=_after(nominal, record.deadline_finish_by_ms),
        groups=run_groups(record.owner, record.labels),
        waits_until=waits_until,
        awaits=awaits,
    )
    return request, job.kind, params.handler if isinstance(params, PythonJob) else None


def _upstream_wait(
    record: RunRequestedRecord, nominal: datetime
) -> tuple[datetime | None, tuple[tuple[str, datetime], ...]]:
    """The end of the run's wait for its upstream periods (`None` if it waits for none), and
    the (schedule id, instant) of each period matched for it."""
    if not record.upstream:
        return None, ()
    try:
        periods = upstream_periods_of(record)
        UpstreamTimeout(record.upstream_timeout)
    except ValueError:
        raise RunRequestInvalidError(
            record.run_id,
            "it waits by a period rule, resolution or timeout newer than this executor knows; "
            "upgrade executors before tickers (docs/wire-format.md)",
        ) from None
    wait = record.upstream_wait_ms
    if wait is None or not 0 < wait <= LONGEST_UPSTREAM_WAIT // _MS:
        raise RunRequestInvalidError(
            record.run_id,
            f"it waits for upstream periods, but its upstream_wait_ms ({wait}) is not between "
            f"1 and {LONGEST_UPSTREAM_WAIT // _MS}",
        )
    awaits = tuple(
        (period.schedule_id, period.period_at)
        for period in periods
        if period.resolution is Resolution.MATCHED and period.period_at is not None
    )
    return nominal + timedelta(milliseconds=wait), awaits


def _after(nominal: datetime, milliseconds: int | None) -> datetime | None:
    """The instant a deadline falls on; one beyond any instant is no deadline at all."""
    if milliseconds is None:
        return None
    try:
        return nominal + timedelta(milliseconds=milliseconds)
    except OverflowError:
        return None
