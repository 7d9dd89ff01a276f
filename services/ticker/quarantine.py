"""One schedule that cannot be decoded, decided or encoded never stops a ticker.

Whatever goes wrong with one schedule's state (a changelog value this release cannot read, a
definition whose calendar arithmetic fails, a run that cannot be encoded) is confined to it:
the schedule is removed from the ticker's state in the open transaction and dead-lettered with
the reason, so everything else keeps firing and no restart meets it again. It fires no more
until a corrected definition is published; the dead letter says so. Removing it is the one
outcome that cannot fail in turn: a deletion encodes without reading the definition.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from kairos.core.errors import KairosError
from kairos.core.firing import Outcome
from kairos.services.ticker.work import TransactionWork
from kairos.streams.codec import Codecs
from kairos.streams.dead_letters import dead_letter_record

logger = logging.getLogger(__name__)


class PoisonedScheduleError(KairosError):
    """A schedule whose state failed at `stage` (decode, decide, encode); `cause` says why."""

    def __init__(self, partition: int, schedule_id: str, stage: str, cause: BaseException) -> None:
        self.partition = partition
        self.schedule_id = schedule_id
        self.stage = stage
        self.cause = cause
        super().__init__(
            f"schedule {schedule_id!r} (partition {partition}) could not be {_VERB[stage]}: "
            f"{type(cause).__name__}: {cause}; it is quarantined and fires no more until a "
            "corrected definition is published"
        )


_VERB = {"decode": "decoded", "decide": "decided", "encode": "encoded"}


@dataclass(frozen=True)
class Quarantine:
    """Removes poisoned schedules from the open work and dead-letters them."""

    codecs: Codecs
    schedules_topic: str
    dead_lettered_by: str

    def take(
        self, work: TransactionWork, poisoned: PoisonedScheduleError, version: int, now: datetime
    ) -> None:
        """Drop what `work` holds of the schedule, delete its state, dead-letter the reason.

        `version` is the schedules-topic offset of the definition that was in force (-1 when
        unknown): the dead letter points at it.
        """
        logger.error("quarantining %s", poisoned)
        work.forget(poisoned.partition, poisoned.schedule_id)
        work.record(
            poisoned.partition, poisoned.schedule_id, Outcome(None, []), None, redefined=True
        )
        record = dead_letter_record(
            source_topic=self.schedules_topic,
            source_partition=poisoned.partition,
            source_offset=version,
            key=poisoned.schedule_id.encode(),
            value=None,
            # Bounded by the builder: an exception's message may quote a huge value.
            reason=str(poisoned),
            error_class=type(poisoned.cause).__name__,
            dead_lettered_at=now,
            dead_lettered_by=self.dead_lettered_by,
        )
        work.dead_letters.append(self.codecs.dead_letter.encode(record))
        work.quarantined += 1
