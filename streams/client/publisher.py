"""What the schedule and calendar publishers share: one topic's producer, idempotent with
acks=all (`KafkaSettings.producer_config`), that returns only once the broker acknowledged every
record, each signed right before it is produced when the settings hold a signing key.

What each says of a failure stays its own: a publisher turns an `Undelivered` into its own
error, in its own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Self

from confluent_kafka import Message, Producer

from kairos.streams.kafka.delivery import Failed, Outgoing, deliver_acknowledged
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codecs, make_codecs
from kairos.streams.wire.signing import load_signer


class AcknowledgedPublisher:
    """Publishes the changes of one topic, `role`'s, made by `changed_by`."""

    role: ClassVar[TopicRole]

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
        self.topic = settings.layout.name(self.role)
        self._codecs = codecs or make_codecs()
        self._timeout_s = timeout_s
        self._signer = None if settings.signing_key is None else load_signer(settings.signing_key)
        self._producer = Producer(
            settings.producer_config(**{"message.timeout.ms": int(timeout_s * 1000)})
        )

    def close(self) -> None:
        self._producer.flush(self._timeout_s)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _deliver(self, records: Sequence[Outgoing], failed: Failed) -> list[Message]:
        """The records' messages once every one is acknowledged; `failed`'s error otherwise."""
        return deliver_acknowledged(
            self._producer,
            self.topic,
            records,
            failed,
            flush_timeout_s=self._timeout_s,
            poll_s=0.1,
            stamp=None if self._signer is None else self._signer.headers,
        )
