"""The shared calendars a ticker reads its schedules with: the calendars topic, followed.

Read to its end before the ticker joins its group, so no occurrence is decided with calendars
still unread; then each turn takes what arrived. The lookup always answers with the latest
version read. A change reaches the occurrences not yet decided: the ticker drops the states it
decoded with the old version, and the next decision reads the new one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition

from kairos.core.business_calendar import CalendarChange, CalendarVersion
from kairos.core.calendar_rules import CalendarLookup, latest
from kairos.streams.calendar_events import read_calendar_message
from kairos.streams.calendar_reader import CalendarReadError
from kairos.streams.codec import Codecs
from kairos.streams.settings import CALENDAR_READERS_GROUP, KafkaSettings
from kairos.streams.topics import TopicRole

logger = logging.getLogger(__name__)

_READ_TO_END_S = 60.0


class Forgetful(Protocol):
    def forget_decoded(self) -> None: ...


class CalendarFeed:
    def __init__(self, settings: KafkaSettings, codecs: Codecs) -> None:
        self._settings = settings
        self._codec = codecs.calendar_event
        self._topic = settings.layout.name(TopicRole.CALENDARS)
        self._versions: dict[str, CalendarVersion] = {}
        self._consumer: Consumer | None = None
        self.lookup: CalendarLookup = latest(self._versions)
        """Shared by every state the ticker decodes; it sees each change as it is taken."""

    def start(self) -> None:
        """Read the topic to its end (raises `CalendarReadError` when it cannot)."""
        consumer = Consumer(
            self._settings.consumer_config(
                **{
                    # Assigned, never subscribed or committed: every ticker reads all of it.
                    "group.id": self._settings.deployment_id(CALENDAR_READERS_GROUP),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    "enable.partition.eof": True,
                    "fetch.wait.max.ms": 10,
                }
            )
        )
        consumer.assign([TopicPartition(self._topic, 0, OFFSET_BEGINNING)])
        self._consumer = consumer
        deadline = time.monotonic() + _READ_TO_END_S
        while not self._take(consumer.consume(num_messages=1000, timeout=0.05)):
            if time.monotonic() > deadline:
                raise CalendarReadError(self._topic, f"not read to its end in {_READ_TO_END_S:g}s")
        logger.info("calendars read: %d from %s", len(self._versions), self._topic)

    def follow(self, partitions: Iterable[Forgetful]) -> None:
        """Take what arrived; when a calendar changed, the partitions read their states again,
        so the occurrences not yet decided follow the new version."""
        changed = self.poll()
        if changed:
            for partition in partitions:
                partition.forget_decoded()
            logger.info("calendars changed: %s", ", ".join(sorted(changed)))

    def poll(self) -> set[str]:
        """Take what arrived since the last call; the ids of the calendars that changed."""
        if self._consumer is None:
            return set()
        before = dict(self._versions)
        self._take(self._consumer.consume(num_messages=1000, timeout=0))
        return {
            calendar_id
            for calendar_id in before.keys() | self._versions.keys()
            if before.get(calendar_id) is not self._versions.get(calendar_id)
        }

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _take(self, messages: list[Message]) -> bool:
        """Apply the messages; whether the end of the topic was reached among them."""
        at_end = False
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end = True
                elif error.fatal() or error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise CalendarReadError(self._topic, error.str(), error)
                else:
                    logger.warning("reading %s: %s", self._topic, error.str())
                continue
            record = read_calendar_message(self._codec, message)
            if isinstance(record, CalendarChange):
                self._apply(record)
            else:
                logger.warning(
                    "calendar record skipped offset=%d: %s", record.version, record.reason
                )
        return at_end

    def _apply(self, change: CalendarChange) -> None:
        if change.calendar is None:
            self._versions.pop(change.calendar_id, None)
        else:
            self._versions[change.calendar_id] = CalendarVersion(
                change.calendar,
                change.version,
                change.changed_at,
                change.changed_by or "",
                change.reason,
            )
        logger.info("calendar %s %s version=%d", change.calendar_id, change.change, change.version)
