"""Publishing what the executor has to say: run events from the outbox, and dead letters.

Both are produced and flushed before the caller moves on (the outbox rows are deleted, the
consumed offsets committed), so an event or a dead letter is published at least once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from kairos.core.errors import KairosError
from kairos.streams.codec import Codecs
from kairos.streams.dedupe.base import OutboxEvent, SourceRecord
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole


class PublishError(KairosError):
    """Records could not be delivered; `problem` is the first delivery error."""

    def __init__(self, topic: str, problem: str) -> None:
        self.topic = topic
        self.problem = problem
        super().__init__(f"could not publish to {topic}: {problem}")


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
        "reason": event.reason,
        "next_attempt_at": event.next_attempt_at,
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
    return {
        "source_topic": source.topic,
        "source_partition": source.partition,
        "source_offset": source.offset,
        "key": key,
        "value": value,
        "reason": reason,
        "error_class": error_class,
        "dead_lettered_at": at,
        "dead_lettered_by": f"executor:{instance}",
    }


class EventPublisher:
    """Produces run events and dead letters on one producer; `flush` makes them durable."""

    def __init__(
        self, kafka: KafkaSettings, codecs: Codecs, instance: str, flush_timeout_s: float
    ) -> None:
        layout = kafka.layout
        self.run_events_topic = layout.name(TopicRole.RUN_EVENTS)
        self.dead_letters_topic = layout.name(TopicRole.DEAD_LETTERS)
        self._codecs = codecs
        self._instance = instance
        self._flush_timeout_s = flush_timeout_s
        # Idempotent: a retried send keeps each run's events in order, without duplicates.
        self._producer = Producer(
            kafka.client_config(**{"enable.idempotence": True, "linger.ms": 5})
        )
        self._failures: list[tuple[str, str]] = []

    def publish_events(self, events: Sequence[OutboxEvent], at: datetime) -> None:
        """Produce each event (and the dead letter of a dead-lettered run), then flush."""
        for event in events:
            self._produce(
                self.run_events_topic,
                event.run_id.encode(),
                self._codecs.run_event.encode(run_event_record(event)),
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
            self.dead_letters_topic, record["key"], self._codecs.dead_letter.encode(record)
        )

    def flush(self) -> None:
        remaining = self._producer.flush(self._flush_timeout_s)
        failures, self._failures = self._failures, []
        if failures:
            raise PublishError(*failures[0])
        if remaining:
            raise PublishError(
                "kafka", f"{remaining} records not delivered in {self._flush_timeout_s:g}s"
            )

    def close(self) -> None:
        self._producer.flush(self._flush_timeout_s)

    def _produce(self, topic: str, key: bytes | None, value: bytes) -> None:
        def on_delivery(error: KafkaError | None, _: Message) -> None:
            if error is not None:
                self._failures.append((topic, error.str()))

        while True:
            try:
                self._producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                return
            except BufferError:
                # The local queue is full: let deliveries drain, then try again.
                self._producer.poll(0.05)
