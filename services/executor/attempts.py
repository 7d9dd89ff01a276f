"""Running leased attempts: the worker that runs one, and the keeper that renews their leases.

An attempt is registered as in flight when the loop hands it to a worker and leaves when its
outcome is recorded (or refused). While it is in flight the `LeaseKeeper` renews its lease; when
the store reports the lease lost or the run replaced, or the lease could not be renewed before it
expired, the keeper asks the attempt to stop, so a run is never left running here while another
executor runs it. A shell job's process group is also watched by the `JobWatchdog` (its own
process) until the lease is surely held, so that a paused executor's job dies before another
executor can retry the run; a lost lease kills the group at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from kairos.services.executor.handlers import Handlers
from kairos.services.executor.jobs import Invocation, JobFailedError, job_params
from kairos.services.executor.kafka_job import JobProducer
from kairos.services.executor.metrics import ExecutorMetrics
from kairos.services.executor.runners import JOB_RUNNERS, JobRun
from kairos.services.executor.settings import ExecutorSettings
from kairos.services.executor.watchdog import JobWatchdog
from kairos.services.log_fields import run_fields
from kairos.streams.dedupe.base import (
    AttemptResult,
    AttemptTransaction,
    DedupeStore,
    DedupeStoreError,
    Lease,
    LeaseLostError,
    LeaseStatus,
)
from kairos.streams.wire.codec import Codec
from kairos.streams.wire.records import job_from_record, read_run_requested

logger = logging.getLogger(__name__)

Clock = Callable[[], datetime]

_REASON_EXTRA = 512
"""Room in a failure reason for its explanation, beside the job's output (`output_limit_bytes`)."""
_WATCHDOG_MARGIN = 0.1
"""The fraction of a lease by which the watchdog kills an unrenewed job before the lease could
expire: room for the clocks of this host and the database to run at slightly different rates."""


class InFlight:
    """One attempt this executor runs, and whether it was asked to stop."""

    def __init__(self, lease: Lease, held_until: float) -> None:
        self.lease = lease
        self.held_until = held_until
        """`time.monotonic()` value before which the lease cannot have expired: taken before the
        database set the expiry, so it errs early, and no clock step can move it."""
        self.stop = threading.Event()
        self.stop_reason: str | None = None
        self.process_group: int | None = None
        """The shell job's process group while it runs."""
        self._ended = False
        self._outcome_lock = threading.Lock()

    def request_stop(self, reason: str) -> None:
        # Under the outcome lock: a renewal that raced with the outcome's commit reports the
        # lease lost, and must not stop an attempt that has already ended.
        with self._outcome_lock:
            if self._ended or self.stop.is_set():
                return
            self.stop_reason = reason
            self.stop.set()
        logger.warning(
            "run=%s attempt=%d stopping: %s", self.lease.run_id, self.lease.attempt, reason
        )

    @contextmanager
    def recording_outcome(self) -> Iterator[None]:
        """Hold while the outcome is recorded; the attempt has ended afterwards, whatever the
        store said."""
        with self._outcome_lock:
            try:
                yield
            finally:
                self._ended = True


class ShellJobGuard:
    """Ties the process groups of shell jobs to their leases, through the watchdog."""

    def __init__(self, watchdog: JobWatchdog, lease: timedelta) -> None:
        self._watchdog = watchdog
        self._margin_s = lease.total_seconds() * _WATCHDOG_MARGIN

    def lease_moved(self, attempt: InFlight) -> None:
        pgid = attempt.process_group
        if pgid is not None:
            self._watchdog.watch(pgid, attempt.held_until - self._margin_s, attempt.lease.run_id)

    def lease_lost(self, attempt: InFlight) -> None:
        """Kill the job now: another executor may already run the run."""
        pgid = attempt.process_group
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            logger.warning(
                "run=%s attempt=%d lease lost: killed the job's process group %d",
                attempt.lease.run_id,
                attempt.lease.attempt,
                pgid,
            )

    def groups_of(self, attempt: InFlight) -> _AttemptGroups:
        return _AttemptGroups(self, attempt)

    def forget(self, pgid: int) -> None:
        self._watchdog.forget(pgid)


class _AttemptGroups:
    """`ProcessGroups` of one attempt: its shell job is watched from start to end."""

    def __init__(self, guard: ShellJobGuard, attempt: InFlight) -> None:
        self._guard = guard
        self._attempt = attempt

    def started(self, pgid: int) -> None:
        self._attempt.process_group = pgid
        self._guard.lease_moved(self._attempt)

    def ended(self, pgid: int) -> None:
        self._attempt.process_group = None
        self._guard.forget(pgid)


class InFlightAttempts:
    """The attempts in flight in this process; shared by the loop, the workers and the keeper."""

    def __init__(self) -> None:
        self._attempts: dict[str, InFlight] = {}
        self._lock = threading.Lock()

    def add(self, lease: Lease, held_until: float) -> InFlight:
        attempt = InFlight(lease, held_until)
        with self._lock:
            self._attempts[lease.run_id] = attempt
        return attempt

    def remove(self, attempt: InFlight) -> None:
        with self._lock:
            self._attempts.pop(attempt.lease.run_id, None)

    def snapshot(self) -> list[InFlight]:
        with self._lock:
            return list(self._attempts.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._attempts)


class LeaseKeeper(threading.Thread):
    """Renews the leases of the attempts in flight every third of the lease."""

    def __init__(
        self,
        store: DedupeStore,
        attempts: InFlightAttempts,
        lease: timedelta,
        clock: Clock,
        shell_jobs: ShellJobGuard,
    ) -> None:
        super().__init__(name="lease-keeper", daemon=True)
        self._store = store
        self._attempts = attempts
        self._lease = lease
        self._clock = clock
        self._shell_jobs = shell_jobs
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        self.join(timeout=self._lease.total_seconds())

    def run(self) -> None:
        while not self._closed.wait(self._lease.total_seconds() / 3):
            self.renew()

    def renew(self) -> None:
        attempts = self._attempts.snapshot()
        if not attempts:
            return
        asked = time.monotonic()
        try:
            statuses = self._store.renew([a.lease for a in attempts], self._clock(), self._lease)
        except DedupeStoreError as error:
            logger.warning("lease renewal failed: %s", error)
            statuses = {}
        for attempt in attempts:
            status = statuses.get(attempt.lease.run_id)
            if status in (LeaseStatus.HELD, LeaseStatus.STOP_REQUESTED):
                attempt.held_until = asked + self._lease.total_seconds()
                self._shell_jobs.lease_moved(attempt)
            if status is LeaseStatus.STOP_REQUESTED:
                attempt.request_stop("replaced by a newer run of the schedule (overlap replace)")
            elif status is LeaseStatus.LOST:
                attempt.request_stop("the lease was lost: another executor took the run over")
                self._shell_jobs.lease_lost(attempt)
            elif status is None and time.monotonic() >= attempt.held_until:
                # Unrenewed, the lease may be reaped any moment: stop before a retry starts.
                attempt.request_stop("the lease could not be renewed before it expired")


class AttemptRunner:
    """Runs one leased attempt on a worker thread and records its outcome in the store."""

    def __init__(
        self,
        *,
        store: DedupeStore,
        settings: ExecutorSettings,
        codec: Codec,
        handlers: Handlers,
        metrics: ExecutorMetrics,
        attempts: InFlightAttempts,
        job_producer: JobProducer,
        clock: Clock,
        shell_jobs: ShellJobGuard,
    ) -> None:
        self._shell_jobs = shell_jobs
        self._store = store
        self._settings = settings
        self._codec = codec
        self._handlers = handlers
        self._metrics = metrics
        self._attempts = attempts
        self._job_producer = job_producer
        self._clock = clock

    def run(self, attempt: InFlight) -> None:
        lease = attempt.lease
        try:
            if lease.attempt == 1:
                lateness = (lease.started_at - lease.due_at).total_seconds()
                self._metrics.start_lateness.observe(max(0.0, lateness))
            with self._store.attempt_transaction() as transaction:
                result = self._attempt(attempt, transaction)
                if not result.succeeded:
                    # A failed attempt's own writes never commit; only its outcome does.
                    transaction.rollback()
                with attempt.recording_outcome():
                    end = self._store.finish(lease, result, self._clock(), transaction)
            self._metrics.outcomes.labels(end.value).inc()
            logger.info(
                "run=%s attempt=%d %s%s",
                lease.run_id,
                lease.attempt,
                end.value,
                "" if result.succeeded else f": {result.reason}",
                extra=run_fields(lease.run_id, lease.schedule_id, self._owner(lease)),
            )
        except LeaseLostError as lost:
            self._metrics.outcomes.labels("lease_lost").inc()
            logger.warning("%s", lost)
        except DedupeStoreError as error:
            # The lease runs out and the run is retried; nothing else can be done from here.
            self._metrics.store_errors.inc()
            logger.error(
                "run=%s attempt=%d outcome not recorded: %s", lease.run_id, lease.attempt, error
            )
        except Exception:
            logger.exception("run=%s attempt=%d crashed the worker", lease.run_id, lease.attempt)
        finally:
            self._attempts.remove(attempt)
            self._metrics.in_flight.set(len(self._attempts))

    def _owner(self, lease: Lease) -> str | None:
        owner: str | None = self._codec.decode(lease.value)["owner"]
        return owner

    def _attempt(self, attempt: InFlight, transaction: AttemptTransaction) -> AttemptResult:
        lease = attempt.lease
        request = read_run_requested(self._codec.decode(lease.value))
        params = job_params(job_from_record(request.job))
        invocation = Invocation(
            run_id=lease.run_id,
            schedule_id=lease.schedule_id,
            owner=request.owner,
            attempt=lease.attempt,
            nominal_at=request.nominal_at,
            timeout=timedelta(milliseconds=request.timeout_ms),
            stop=attempt.stop,
            deadline=time.monotonic() + request.timeout_ms / 1000,
            process_groups=self._shell_jobs.groups_of(attempt),
            runtime=self._settings.runtime_policy.of(request.owner),
            secrets_root=self._settings.secrets_root,
            executor_instance=self._settings.instance,
            interval_start=request.interval_start,
            timezone=request.timezone or "UTC",
        )
        started = time.monotonic()
        kind = request.job_kind
        run = JobRun(
            invocation,
            request,
            transaction,
            self._settings.output_limit_bytes,
            self._job_producer,
            self._handlers,
            self._settings.instance,
        )
        try:
            JOB_RUNNERS[kind](params, run)
            result = AttemptResult(succeeded=True)
        except JobFailedError as failed:
            result = AttemptResult(False, self._limited(failed.reason))
        except Exception as error:
            # A python handler's exception, whatever its type, is that attempt's failure.
            result = AttemptResult(False, self._limited(f"{type(error).__name__}: {error}"))
        if attempt.stop_reason is not None and not result.succeeded:
            result = AttemptResult(False, self._limited(f"{attempt.stop_reason}; {result.reason}"))
        self._metrics.attempt_duration.labels(
            kind, "succeeded" if result.succeeded else "failed"
        ).observe(time.monotonic() - started)
        return result

    def _limited(self, reason: str | None) -> str | None:
        limit = self._settings.output_limit_bytes + _REASON_EXTRA
        if reason is None or len(reason) <= limit:
            return reason
        return reason[: limit - 3] + "..."
