"""Schedule events into the open transaction: a new state per change, or a dead letter.

A record that cannot be applied (undecodable, keyed wrongly, an invalid definition) is
dead-lettered with the reason inside the same transaction as the offset that passes it, so it
is dead-lettered exactly once and the ticker keeps running.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Message

from kairos.core.errors import KairosError
from kairos.core.firing import deleted, upserted
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.work import TransactionWork
from kairos.streams.codec import Codecs, DecodeError
from kairos.streams.records import schedule_from_definition

logger = logging.getLogger(__name__)


class SchedulePayloadError(KairosError):
    """A schedule event that cannot be applied; it is dead-lettered with this reason."""


class ScheduleChanges:
    def __init__(self, codecs: Codecs, dead_lettered_by: str) -> None:
        self.codecs = codecs
        self.dead_lettered_by = dead_lettered_by

    def take(
        self,
        owned: OwnedPartition,
        message: Message,
        offset: int,
        now: datetime,
        work: TransactionWork,
    ) -> None:
        try:
            self._apply(owned, message, offset, now, work)
        except (DecodeError, SchedulePayloadError) as problem:
            self._dead_letter(message, problem, now, work)
        except Exception as failure:
            # Confined: whatever else goes wrong applying one event (deciding what the change
            # owes, reading the stored state) must not stop the partition for everyone.
            logger.exception(
                "schedule event partition=%s offset=%s could not be applied",
                message.partition(),
                offset,
            )
            unappliable = SchedulePayloadError(
                f"cannot be applied ({type(failure).__name__}: {failure}); publish a "
                "corrected definition"
            )
            self._dead_letter(message, unappliable, now, work)

    def _apply(
        self,
        owned: OwnedPartition,
        message: Message,
        offset: int,
        now: datetime,
        work: TransactionWork,
    ) -> None:
        raw_key = message.key()
        if raw_key is None:
            raise SchedulePayloadError("a schedule event must be keyed by its schedule id")
        schedule_id = raw_key.decode("utf-8", errors="replace")
        value = message.value()
        state = work.current(owned, schedule_id)
        if value is None:
            # A tombstone: compaction's delete marker, published after a ScheduleDeleted event.
            if state is not None:
                _, timestamp = message.timestamp()
                changed_at = datetime.fromtimestamp(timestamp / 1000, UTC)
                outcome = deleted(state, changed_at, now)
                work.record(owned.partition, schedule_id, outcome, state, redefined=True)
            return
        event = self.codecs.schedule_event.decode(value)
        if event["schedule_id"] != schedule_id:
            raise SchedulePayloadError(
                f"key {schedule_id!r} does not match the event's schedule_id "
                f"{event['schedule_id']!r}; key each event by its schedule id"
            )
        changed_at = event["changed_at"]
        definition = event["definition"]
        if definition is None:
            # Only a delete carries no definition (docs/wire-format.md); anything else without
            # one breaks the contract and must not silently delete the schedule.
            if event["change"] != "deleted":
                raise SchedulePayloadError(
                    f"a {event['change']!r} event must carry the whole definition; "
                    "publish the schedule's full definition with every change but a delete"
                )
            if state is None:
                return
            outcome = deleted(state, changed_at, now)
        else:
            try:
                schedule = schedule_from_definition(definition)
            except (ValueError, TypeError, KeyError) as invalid:
                raise SchedulePayloadError(f"invalid definition: {invalid}") from invalid
            if schedule.id != schedule_id:
                raise SchedulePayloadError(
                    f"definition id {schedule.id!r} differs from the key {schedule_id!r}"
                )
            # Created, edited, paused or resumed: the definition says which.
            outcome = upserted(state, schedule, offset, changed_at, now)
        work.record(owned.partition, schedule_id, outcome, state, redefined=True)

    def _dead_letter(
        self, message: Message, problem: KairosError, now: datetime, work: TransactionWork
    ) -> None:
        partition, offset = message.partition(), message.offset()
        logger.warning(
            "dead-lettering schedules partition=%s offset=%s: %s", partition, offset, problem
        )
        record: dict[str, Any] = {
            "source_topic": message.topic(),
            "source_partition": partition,
            "source_offset": offset,
            "key": message.key(),
            "value": message.value(),
            "reason": str(problem),
            "error_class": type(problem).__name__,
            "dead_lettered_at": now,
            "dead_lettered_by": self.dead_lettered_by,
        }
        work.dead_letters.append(self.codecs.dead_letter.encode(record))
