"""Publishing schedule changes: validated before sending, acknowledged before returning.

A producer app needs three lines:

    client = SchedulesClient(KafkaSettings(bootstrap_servers="broker:9092"), changed_by="billing")
    client.upsert(Schedule(id="settlement-report", cron="0 2 * * *", timezone="America/New_York"))
    client.close()
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kairos.core.errors import KairosError
from kairos.core.schedule import Schedule, parse_schedule
from kairos.streams.codec import Codecs, make_codecs
from kairos.streams.records import definition_record
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole


class PublishError(KairosError):
    """The broker did not acknowledge a schedule change; nothing may be assumed published."""

    def __init__(self, schedule_id: str, reason: str, kafka_error: KafkaError | None = None):
        super().__init__(f"schedule {schedule_id!r} was not published: {reason}")
        self.schedule_id = schedule_id
        self.reason = reason
        self.kafka_error = kafka_error


class SchedulesClient:
    """Publishes schedule events to the compacted schedules topic.

    Every call returns only once the broker acknowledged the event (acks=all, idempotent
    producer), and raises `PublishError` otherwise.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        changed_by: str,
        codecs: Codecs | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        if not changed_by.strip():
            raise ValueError("changed_by must name who publishes, for the audit trail")
        self.changed_by = changed_by
        self.topic = settings.layout.name(TopicRole.SCHEDULES)
        self._codecs = codecs or make_codecs()
        self._timeout_s = timeout_s
        self._producer = Producer(
            settings.client_config(
                **{
                    "enable.idempotence": True,
                    "acks": "all",
                    "message.timeout.ms": int(timeout_s * 1000),
                }
            )
        )

    def upsert(self, schedule: Schedule | dict[str, Any], reason: str | None = None) -> None:
        """Create or replace a schedule (a dict is validated as a `Schedule` first)."""
        valid = schedule if isinstance(schedule, Schedule) else parse_schedule(schedule)
        self._send(valid.id, "upserted", definition_record(valid), reason)

    def pause(self, schedule_id: str, reason: str | None = None) -> None:
        self._send(schedule_id, "paused", None, reason)

    def resume(self, schedule_id: str, reason: str | None = None) -> None:
        self._send(schedule_id, "resumed", None, reason)

    def delete(self, schedule_id: str, reason: str | None = None) -> None:
        """Delete the schedule: a `deleted` event for the audit trail, then a tombstone."""
        self._send(schedule_id, "deleted", None, reason)
        self._deliver(schedule_id, None)

    def close(self) -> None:
        self._producer.flush(self._timeout_s)

    def __enter__(self) -> SchedulesClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _send(
        self,
        schedule_id: str,
        change: str,
        definition: dict[str, Any] | None,
        reason: str | None,
    ) -> None:
        event = {
            "schedule_id": schedule_id,
            "event_id": str(uuid.uuid4()),
            "change": change,
            "definition": definition,
            "revision": 0,
            "changed_by": self.changed_by,
            "changed_at": datetime.now(UTC),
            "reason": reason,
        }
        self._deliver(schedule_id, self._codecs.schedule_event.encode(event))

    def _deliver(self, schedule_id: str, value: bytes | None) -> None:
        outcome: list[KafkaError | None] = []

        def delivered(error: KafkaError | None, _: Message) -> None:
            outcome.append(error)

        try:
            self._producer.produce(self.topic, key=schedule_id, value=value, on_delivery=delivered)
        except (BufferError, KafkaException) as error:
            raise PublishError(schedule_id, str(error)) from error
        self._producer.flush(self._timeout_s)
        if not outcome:
            raise PublishError(schedule_id, f"no acknowledgement within {self._timeout_s}s")
        if outcome[0] is not None:
            raise PublishError(schedule_id, outcome[0].str(), outcome[0])
