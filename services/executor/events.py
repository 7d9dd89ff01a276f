"""Publishing what the executor has to say: run events from the outbox, and dead letters.

Both are produced and flushed before the caller moves on (the outbox rows are deleted, the
consumed offsets committed), so an event or a dead letter is published at least once.

No record may stop the executor: one the broker refuses for good would otherwise be produced
again after every restart, and hold every later event behind it in the outbox. So reasons and
copied records are bounded before they are encoded (`REASON_LIMIT`, `COPY_LIMIT`), and a record
the broker still refuses as too large or invalid (a topic whose `max.message.bytes` is lower) is
sent, when the batch is published again, as a smaller copy: the event without its reason, the
dead letter without the copied value, each saying what was dropped and why.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from kairos.core.errors import KairosError
from kairos.core.lru import LruCache
from kairos.streams.dedupe.base import OutboxEvent, SourceRecord
from kairos.streams.kafka.delivery import produce_when_room
from kairos.streams.kafka.ports import Producer
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.dead_letters import KEY_COPY_LIMIT, VALUE_COPY_LIMIT
from kairos.streams.wire.dead_letters import dead_letter_record as bounded_dead_letter

logger = logging.getLogger(__name__)

REASON_LIMIT = 16 * 1024
"""Characters of a reason kept in a run event or a dead letter."""
COPY_LIMIT = VALUE_COPY_LIMIT
"""Bytes of a refused record's value a dead letter copies (`kairos.streams.wire.dead_letters`)."""
_REFUSALS = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD, KafkaError.RECORD_LIST_TOO_LARGE}
)
"""Delivery errors about the record itself: producing it again fails the same way."""
_REMEMBERED_REFUSALS = 1024
_SMALLER_KEY = 256
_SMALLER_REASON = 1024
"""Bytes of the key and characters of the reason in the smaller copy of a refused dead letter."""

Shrink = Callable[[dict[str, Any], str], dict[str, Any]]
"""A smaller copy of a refused record, given the broker's error."""


class RunEventsPublishError(KairosError):
    """Records could not be delivered; `problem` is the first delivery error."""

    retryable = True
    """The records stay in the outbox or unconsumed, and go again (a refused one smaller)."""

    def __init__(self, topic: str, problem: str, kafka_error: KafkaError | None = None) -> None:
        self.topic = topic
        self.problem = problem
        self.kafka_error = kafka_error
        super().__init__(f"could not publish to {topic}: {problem}")


def bounded(reason: str, limit: int = REASON_LIMIT) -> str:
    """The reason, cut to `limit` characters with a note of how much was dropped."""
    if len(reason) <= limit:
        return reason
    note = f" [{len(reason) - limit} more characters dropped]"
    return reason[: limit - len(note)] + note


def run_event_record(event: OutboxEvent) -> dict[str, Any]:
    return {
        "run_id": event.run_id,
        "schedule_id": event.schedule_id,
        "kind": event.kind.value,
        "attempt": event.attempt,
        "executor_instance": event.executor_instance,
        "nominal_at": event.nominal_at,
        "fired_at": event.fired_at,
        "started_at": event.started_at,
        "finished_at": event.finished_at,
        "reason": None if event.reason is None else bounded(event.reason),
        "next_attempt_at": event.next_attempt_at,
        "owner": event.owner,
    }


def _without_reason(record: dict[str, Any], refusal: str) -> dict[str, Any]:
    dropped = len(record["reason"] or "")
    return {**record, "reason": f"[reason of {dropped} characters dropped: {refusal}]"}


def _without_copy(record: dict[str, Any], refusal: str) -> dict[str, Any]:
    size = len(record["value"] or b"")
    note = f"[copied value of {size} bytes dropped: {refusal}]"
    return {
        **record,
        "key": _prefix(record["key"], _SMALLER_KEY),
        "value": None,
        "reason": bounded(f"{note} {record['reason']}", _SMALLER_REASON),
    }


def dead_letter_record(
    source: SourceRecord,
    key: bytes | None,
    value: bytes | None,
    *,
    reason: str,
    error_class: str,
    at: datetime,
    instance: str,
) -> dict[str, Any]:
    """A `DeadLetter` of the record at `source`, bounded by `kairos.streams.wire.dead_letters`;
    a cut key or value is also said in the reason (the copy then cannot replay the record)."""
    cut = [
        f"{name} cut to its first {limit} of {len(data)} bytes"
        for name, data, limit in (("key", key, KEY_COPY_LIMIT), ("value", value, COPY_LIMIT))
        if data is not None and len(data) > limit
    ]
    if cut:
        reason = f"[{', '.join(cut)}: not replayable from this copy] {reason}"
    return bounded_dead_letter(
        source_topic=source.topic,
        source_partition=source.partition,
        source_offset=source.offset,
        key=key,
        value=value,
        reason=bounded(reason),
        error_class=error_class,
        dead_lettered_at=at,
        dead_lettered_by=f"executor:{instance}",
    )


def _prefix(data: bytes | None, limit: int) -> bytes | None:
    return data if data is None or len(data) <= limit else data[:limit]


@dataclass(frozen=True, slots=True)
class _Failure:
    topic: str
    error: KafkaError
    identity: bytes
    """Of the record as it was produced (`_identity`): the next copy of it is made smaller."""


def _identity(topic: str, value: bytes) -> bytes:
    return hashlib.blake2b(value, digest_size=16, person=topic.encode()[-16:]).digest()


class EventPublisher:
    """Produces run events and dead letters on one producer; `flush` makes them durable."""

    def __init__(
        self,
        kafka: KafkaSettings,
        codecs: Codecs,
        instance: str,
        flush_timeout_s: float,
        producer: Producer,
    ) -> None:
        layout = kafka.layout
        self.run_events_topic = layout.name(TopicRole.RUN_EVENTS)
        self.dead_letters_topic = layout.name(TopicRole.DEAD_LETTERS)
        self._codecs = codecs
        self._instance = instance
        self._flush_timeout_s = flush_timeout_s
        self._producer = producer
        self._failures: list[_Failure] = []
        self._refused: LruCache[bytes, str] = LruCache(_REMEMBERED_REFUSALS)
        """Records the broker refused (by identity), with its error: sent smaller next time."""

    def publish_events(self, events: Sequence[OutboxEvent], at: datetime) -> None:
        """Produce each event (and the dead letter of a dead-lettered run), then flush."""
        for event in events:
            self._produce(
                self.run_events_topic,
                event.run_id.encode(),
                run_event_record(event),
                self._codecs.run_event.encode,
                _without_reason,
            )
            if event.dead_letter is not None:
                record = dead_letter_record(
                    event.dead_letter.source,
                    event.run_id.encode(),
                    event.dead_letter.value,
                    reason=event.reason or "attempts exhausted",
                    error_class="RunAttemptsExhaustedError",
                    at=at,
                    instance=self._instance,
                )
                self.dead_letter(record)
        self.flush()

    def dead_letter(self, record: dict[str, Any]) -> None:
        """Produce a dead letter (keyed like its source record); durable after `flush`."""
        self._produce(
            self.dead_letters_topic,
            record["key"],
            record,
            self._codecs.dead_letter.encode,
            _without_copy,
        )

    def flush(self) -> None:
        remaining = self._producer.flush(self._flush_timeout_s)
        failures, self._failures = self._failures, []
        for failure in failures:
            if failure.error.code() in _REFUSALS:
                self._refused.put(failure.identity, failure.error.str())
        if failures:
            first = failures[0]
            raise RunEventsPublishError(first.topic, first.error.str(), first.error)
        if remaining:
            raise RunEventsPublishError(
                "kafka", f"{remaining} records not delivered in {self._flush_timeout_s:g}s"
            )

    def close(self) -> None:
        self._producer.flush(self._flush_timeout_s)

    def _produce(
        self,
        topic: str,
        key: bytes | None,
        record: dict[str, Any],
        encode: Callable[[dict[str, Any]], bytes],
        shrink: Shrink,
    ) -> None:
        """Produce the record, or its smaller copy if the broker refused it before."""
        value = encode(record)
        identity = _identity(topic, value)
        refusal = self._refused.get(identity)
        if refusal is None:
            try:
                self._send(topic, key, value, identity)
                return
            except KafkaException as failure:
                error: KafkaError = failure.args[0]
                if error.code() not in _REFUSALS:
                    raise RunEventsPublishError(topic, error.str(), error) from None
                refusal = error.str()
        smaller = shrink(record, f"refused by Kafka: {refusal}")
        logger.warning(
            "%s key=%r: record of %d bytes refused (%s); publishing a smaller copy",
            topic,
            key[:100] if key else key,
            len(value),
            refusal,
        )
        try:
            self._send(topic, smaller.get("key", key), encode(smaller), identity)
        except KafkaException as failure:
            raise RunEventsPublishError(topic, failure.args[0].str(), failure.args[0]) from None

    def _send(self, topic: str, key: bytes | None, value: bytes, identity: bytes) -> None:
        def on_delivery(error: KafkaError | None, _: Message) -> None:
            if error is not None:
                self._failures.append(_Failure(topic, error, identity))

        produce = partial(
            self._producer.produce, topic, key=key, value=value, on_delivery=on_delivery
        )
        produce_when_room(self._producer, produce, poll_s=0.05)
