"""Admitting a consumed batch of the runs topic into the dedupe store.

Each record is checked (`admission`): bad ones are dead-lettered, valid ones claimed in the
store in one transaction; only then are their offsets marked for commit, so a crash before the
claim redelivers the record and a crash after it redelivers a duplicate, which is suppressed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import Message

from kairos.core.errors import KairosError
from kairos.services.executor.admission import PassedOver, Rejected, ServedJobs, read_request
from kairos.services.executor.attempts import Clock
from kairos.services.executor.events import dead_letter_record
from kairos.services.executor.metrics import ExecutorMetrics
from kairos.services.executor.offsets import OffsetMarks
from kairos.services.executor.session import ExecutorSession
from kairos.services.executor.settings import ExecutorSettings
from kairos.streams.dedupe.base import Admitted, RunRequest, SourceRecord
from kairos.streams.kafka.authorization import RoleAccess
from kairos.streams.kafka.failures import is_retryable
from kairos.streams.wire.codec import Codec

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TurnParts:
    """What the executor's turn works with, and the intake it admits batches through."""

    session: ExecutorSession
    marks: OffsetMarks
    served: ServedJobs
    codec: Codec
    """The runs topic's `RunRequested` codec."""
    settings: ExecutorSettings
    metrics: ExecutorMetrics
    access: RoleAccess
    clock: Clock


def raise_unless_retryable(access: RoleAccess, error: KairosError) -> None:
    """Raise what trying again cannot mend: the cluster refusing the role (as the error naming
    the missing grant), or `error` itself when it is not retryable."""
    access.raise_if_refused(error, getattr(error, "topic", None))
    if not is_retryable(error):
        raise error


class Intake:
    def __init__(self, parts: TurnParts) -> None:
        self._parts = parts

    def admit(self, messages: list[Message]) -> None:
        """Claim the batch's runs; after a failure worth retrying, consume the batch again."""
        parts = self._parts
        session = parts.session
        now = parts.clock()
        records = [m for m in messages if not self._consumer_error(m)]
        try:
            accepted = self._check(records, now)
            session.publisher.flush()  # the dead letters, before their offsets can be committed
            admissions = (
                session.store.admit(accepted, now, parts.settings.instance) if accepted else []
            )
            # Before the offsets are marked: a crash in between redelivers, and writes it then.
            session.store.track_deadlines(accepted)
        except KairosError as error:
            raise_unless_retryable(parts.access, error)
            self._consume_again(records, error)
            return
        for admission in admissions:
            parts.metrics.admitted.labels(admission.admitted.value).inc()
            if admission.admitted is Admitted.DUPLICATE:
                parts.metrics.duplicates.inc()
                logger.info(
                    "run=%s duplicate delivery %d suppressed",
                    admission.run_id,
                    admission.deliveries,
                )
        parts.marks.mark((_partition(m), _offset(m)) for m in records)

    def _consume_again(self, records: list[Message], error: Exception) -> None:
        """Nothing of this batch is marked: seek back to each partition's first record."""
        self._parts.metrics.store_errors.inc()
        logger.error("executor admission failed, will retry the batch: %s", error)
        firsts: dict[int, int] = {}
        for message in records:
            firsts.setdefault(_partition(message), _offset(message))
        for partition, offset in firsts.items():
            self._parts.session.seek(partition, offset)
        time.sleep(self._parts.settings.poll_interval.total_seconds())

    def _consumer_error(self, message: Message) -> bool:
        error = message.error()
        if error is not None:
            self._parts.access.raise_if_refused(error, message.topic())
            logger.warning("executor consumer error: %s", error.str())
        return error is not None

    def _check(self, records: list[Message], now: datetime) -> list[RunRequest]:
        """The runs to claim; bad records are dead-lettered (durable after a flush)."""
        accepted = []
        runs_topic = self._parts.session.runs_topic
        for message in records:
            source = SourceRecord(runs_topic, _partition(message), _offset(message))
            verdict = read_request(
                message.key(), message.value(), source, self._parts.codec, self._parts.served
            )
            if isinstance(verdict, RunRequest):
                accepted.append(verdict)
            elif isinstance(verdict, PassedOver):
                self._parts.metrics.passed_over.labels(verdict.kind).inc()
                logger.debug(
                    "run=%s kind %s not run here: passed over", verdict.run_id, verdict.kind
                )
            else:
                self._dead_letter(message, source, verdict, now)
        return accepted

    def _dead_letter(
        self, message: Message, source: SourceRecord, verdict: Rejected, now: datetime
    ) -> None:
        logger.warning(
            "dead-lettering runs partition=%d offset=%d: %s",
            source.partition,
            source.offset,
            verdict.reason,
        )
        self._parts.metrics.dead_letters.labels(verdict.error_class).inc()
        self._parts.session.publisher.dead_letter(
            dead_letter_record(
                source,
                message.key(),
                message.value(),
                reason=verdict.reason,
                error_class=verdict.error_class,
                at=now,
                instance=self._parts.settings.instance,
            )
        )


def _partition(message: Message) -> int:
    partition = message.partition()
    assert partition is not None, "consumed records have a partition"
    return partition


def _offset(message: Message) -> int:
    offset = message.offset()
    assert offset is not None, "consumed records have an offset"
    return offset
