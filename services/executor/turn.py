"""One turn of the executor's loop.

1. consume a batch of the runs topic, raise what a rebalance callback failed with;
2. admit it (`intake`);
3. commit marked offsets (at most every `offset_commit_interval`);
4. end attempts whose lease expired (any executor's), so their runs are retried; judge the runs
   held for their upstream periods (`upstream_gate`);
5. acquire ready, due runs (new ones, and retries whose backoff has passed) for the free
   workers: retries come from the store, never from Kafka;
6. publish the outbox's lifecycle events (the ticker follows them to apply `pause_on_failure`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from kairos.core.errors import KairosError
from kairos.services.executor.intake import Intake, TurnParts, raise_unless_retryable
from kairos.services.executor.rebalance import CallbackFailures
from kairos.services.executor.upstream_gate import UpstreamGate
from kairos.services.executor.workers import AttemptWorkers
from kairos.services.log_fields import run_fields
from kairos.streams.dedupe.base import DedupeStoreError, OutboxEvent

logger = logging.getLogger(__name__)

BATCH = 500
"""Records consumed, and outbox events published, per call."""
_REAP_EVERY = timedelta(seconds=1)
_PRUNE_EVERY = timedelta(minutes=10)
_PRUNE_LIMIT = 10_000


class ExecutorTurn:
    def __init__(
        self, parts: TurnParts, workers: AttemptWorkers, callback_failures: CallbackFailures
    ) -> None:
        self._parts = parts
        self._workers = workers
        self._callback_failures = callback_failures
        self._intake = Intake(parts)
        self._gate = UpstreamGate(parts.session.store, parts.codec, parts.settings.instance)
        self._next_reap = self._next_prune = datetime.min.replace(tzinfo=UTC)

    def run_once(self) -> None:
        """Consume, admit, commit, reap, acquire, publish: one pass of the loop."""
        parts = self._parts
        session = parts.session
        messages = session.consumer.consume(
            num_messages=BATCH, timeout=parts.settings.poll_interval.total_seconds()
        )
        self._callback_failures.raise_kept()
        if messages:
            self._intake.admit(messages)
        parts.marks.commit(session.consumer)
        now = parts.clock()
        try:
            if now >= self._next_reap:
                self._next_reap = now + _REAP_EVERY
                self._reap(now)
                # At the reaping's pace: a released run starts within a second of its upstream.
                self._gate.sweep(now)
            # Before dispatch: a run taken now, past its start deadline, is reported first.
            self._report_missed_deadlines(now)
            self._dispatch(now)
            if now >= self._next_prune:
                self._next_prune = now + _PRUNE_EVERY
                session.store.prune_finished(now - parts.settings.retention, _PRUNE_LIMIT)
                session.store.prune_deadlines(_PRUNE_LIMIT)
        except DedupeStoreError as error:
            parts.metrics.store_errors.inc()
            logger.error(
                "executor instance=%s store unavailable: %s", parts.settings.instance, error
            )
        self.publish_events()

    def publish_events(self) -> None:
        """Publish the outbox: a full batch means more may wait."""
        try:
            while self._parts.session.store.publish_events(self._publish_batch, BATCH) == BATCH:
                continue
        except KairosError as error:
            raise_unless_retryable(self._parts.access, error)
            logger.error(
                "executor could not publish run events (they stay in the outbox): %s", error
            )

    def _publish_batch(self, events: Sequence[OutboxEvent]) -> None:
        self._parts.session.publisher.publish_events(events, self._parts.clock())

    def _reap(self, now: datetime) -> None:
        parts = self._parts
        # Beside the reaping, at its pace: the groups' counts are a few indexed reads.
        parts.metrics.show_groups(parts.session.store.concurrency(now))
        reaped = parts.session.store.reap_expired(now, parts.settings.instance)
        parts.metrics.reaped.inc(len(reaped))

    def _report_missed_deadlines(self, now: datetime) -> None:
        parts = self._parts
        for missed in parts.session.store.report_missed_deadlines(now, parts.settings.instance):
            owner = parts.codec.decode(missed.value)["owner"] or ""
            parts.metrics.deadlines_missed.labels(owner, missed.deadline.value).inc()
            fields = run_fields(missed.run_id, missed.schedule_id, owner or None)
            logger.warning("run=%s %s", missed.run_id, missed.reason, extra=fields)

    def _dispatch(self, now: datetime) -> None:
        settings = self._parts.settings
        free = settings.concurrency - len(self._workers.attempts)
        held_until = time.monotonic() + settings.lease.total_seconds()
        for lease in self._parts.session.store.acquire(
            settings.instance,
            self._parts.served.runners,
            now,
            settings.lease,
            free,
            owner_share=settings.owner_share,
        ):
            logger.info(
                "run=%s attempt=%d started",
                lease.run_id,
                lease.attempt,
                extra=run_fields(
                    lease.run_id, lease.schedule_id, self._parts.codec.decode(lease.value)["owner"]
                ),
            )
            self._workers.start(lease, held_until)
        self._parts.metrics.in_flight.set(len(self._workers.attempts))
