"""Schedule events into the open transaction: a new state per change, or a dead letter.

What each record means is `kairos.streams.schedule_events`'s to say. A record it rejects
(undecodable, keyed wrongly, on the wrong partition, an invalid definition) is dead-lettered
with the reason inside the same transaction as the offset that passes it, so it is
dead-lettered exactly once and the ticker keeps running. The ticker is the only consumer of the
schedules topic that dead-letters.
"""

from __future__ import annotations

import logging
from datetime import datetime

from confluent_kafka import Consumer, Message

from kairos.core.errors import KairosError
from kairos.core.firing import deleted, upserted
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.work import TransactionWork
from kairos.streams.codec import Codecs
from kairos.streams.dead_letters import dead_letter_record
from kairos.streams.schedule_events import (
    RejectedEvent,
    ScheduleChange,
    ScheduleDeleted,
    read_schedule_message,
)

logger = logging.getLogger(__name__)


class SchedulesTopicUnknownError(KairosError):
    """The broker has no schedules topic: the ticker cannot tell where each schedule belongs."""

    def __init__(self, topic: str, reason: str) -> None:
        self.topic = topic
        self.reason = reason
        super().__init__(f"cannot learn the partition count of {topic}: {reason}")


class ScheduleChanges:
    def __init__(self, codecs: Codecs, dead_lettered_by: str) -> None:
        self.codecs = codecs
        self.dead_lettered_by = dead_lettered_by
        self.partitions: int | None = None
        """The schedules topic's partition count, which decides each record's rightful place."""

    def learn_partitions(self, consumer: Consumer, topic: str, timeout_s: float = 30) -> None:
        """Ask the broker for the schedules topic's partition count, which is fixed
        (docs/operations.md): once per connection, never inside a rebalance callback, where
        confluent-kafka's metadata call aborts the process (CallState_get assertion)."""
        # A broker that does not answer raises KafkaException: the ticker retries its connection.
        found = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise SchedulesTopicUnknownError(
                topic, "the broker does not know the topic; create it with `kairos topics create`"
            )
        self.partitions = len(found.partitions)

    def take(
        self,
        owned: OwnedPartition,
        message: Message,
        offset: int,
        now: datetime,
        work: TransactionWork,
    ) -> bool:
        """Apply the change; `False` when it is held, to be taken again (see `work.settle`)."""
        assert self.partitions is not None, "learn_partitions comes with every connection"
        try:
            change = read_schedule_message(self.codecs.schedule_event, message, self.partitions)
            if isinstance(change, RejectedEvent):
                self._dead_letter(str(message.topic()), change, now, work)
                return True
            return self._apply(owned, change, offset, now, work)
        except Exception as failure:
            # Confined: whatever else goes wrong applying one event (deciding what the change
            # owes, reading the stored state) must not stop the partition for everyone.
            logger.exception(
                "schedule event partition=%s offset=%s could not be applied",
                owned.partition,
                offset,
            )
            reason = (
                f"cannot be applied ({type(failure).__name__}: {failure}); publish a corrected "
                "definition"
            )
            unappliable = RejectedEvent(
                owned.partition,
                offset,
                message.key(),
                message.value(),
                reason,
                type(failure).__name__,
            )
            self._dead_letter(str(message.topic()), unappliable, now, work)
            return True

    def _apply(
        self,
        owned: OwnedPartition,
        change: ScheduleChange,
        offset: int,
        now: datetime,
        work: TransactionWork,
    ) -> bool:
        schedule_id = change.schedule_id
        state = work.current(owned, schedule_id)
        if isinstance(change, ScheduleDeleted):
            if state is None:
                return True
            outcome = deleted(state, change.changed_at, now, limit=work.settle_room)
        else:
            # Created, edited, paused or resumed: the definition says which.
            floor = work.floor(owned, schedule_id) if state is None else None
            outcome = upserted(
                state,
                change.schedule,
                offset,
                change.changed_at,
                now,
                limit=work.settle_room,
                floor=floor,
            )
        return work.settle(owned, schedule_id, outcome, state)

    def _dead_letter(
        self, topic: str, rejected: RejectedEvent, now: datetime, work: TransactionWork
    ) -> None:
        logger.warning(
            "dead-lettering schedules partition=%s offset=%s: %s",
            rejected.partition,
            rejected.offset,
            rejected.reason,
        )
        record = dead_letter_record(
            source_topic=topic,
            source_partition=rejected.partition,
            source_offset=rejected.offset,
            key=rejected.key,
            value=rejected.value,
            reason=rejected.reason,
            error_class=rejected.error_class,
            dead_lettered_at=now,
            dead_lettered_by=self.dead_lettered_by,
        )
        work.dead_letters.append((record["key"], self.codecs.dead_letter.encode(record)))
