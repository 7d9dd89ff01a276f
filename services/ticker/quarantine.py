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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from kairos.core.errors import KairosError
from kairos.core.firing import Outcome
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.work import TransactionWork
from kairos.streams.state.changelog import Floor, owner_from_stored
from kairos.streams.state.state_store import StateWrite
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.dead_letters import dead_letter_record

if TYPE_CHECKING:
    # The transactions raise this module's error: a runtime import would be circular.
    from kairos.services.ticker.transaction import FiringTransactions

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
        self,
        work: TransactionWork,
        poisoned: PoisonedScheduleError,
        owned: OwnedPartition,
        version: int,
        now: datetime,
    ) -> None:
        """Drop what `work` holds of the schedule, delete its state, dead-letter the reason.

        `version` is the schedules-topic offset of the definition that was in force (-1 when
        unknown): the dead letter points at it. The schedule's floor is kept: its last committed
        decision (read from its progress, which decodes apart from the definition), so a
        corrected re-creation never fires an occurrence already decided, and its owner, so only
        that team (or an administrators') re-creates the id.
        """
        logger.error("quarantining %s", poisoned)
        schedule_id = poisoned.schedule_id
        committed = self._committed_floor(owned, schedule_id)
        try:
            held = work.current(owned, schedule_id)
        except Exception:
            held = None  # undecodable: counted again from the store after the commit
        owner = held.schedule.owner if held is not None else self._stored_owner(owned, schedule_id)
        floor = Floor(version, None if committed is None else committed.last_decided, owner)
        # Later verdicts of this transaction no longer count it; the commit counts again.
        work.count_use(poisoned.partition, held, None)
        work.forget(poisoned.partition, schedule_id)
        work.recount_use.add(poisoned.partition)
        work.record(poisoned.partition, schedule_id, Outcome(None, []), None, redefined=True)
        if floor.keeps_anything:
            work.floors.setdefault(poisoned.partition, {})[schedule_id] = floor
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
        work.dead_letters.append((record["key"], self.codecs.dead_letter.encode(record)))
        work.quarantined += 1

    def encode(
        self,
        transactions: FiringTransactions,
        work: TransactionWork,
        owned: Mapping[int, OwnedPartition],
        fired_at: datetime,
    ) -> tuple[dict[int, list[StateWrite]], list[tuple[bytes, str]]]:
        """The state writes and runs of `work`, encoded; a schedule that cannot be is taken."""
        while True:
            try:
                return transactions.state_writes(work), transactions.encode_runs(work, fired_at)
            except PoisonedScheduleError as poisoned:
                self.take(work, poisoned, owned[poisoned.partition], -1, fired_at)

    @staticmethod
    def _committed_floor(owned: OwnedPartition, schedule_id: str) -> Floor | None:
        try:
            return owned.floor(schedule_id)
        except Exception:
            # The progress is unreadable too: nothing is known to keep.
            logger.warning("schedule %s: no readable floor to keep", schedule_id, exc_info=True)
            return None

    def _stored_owner(self, owned: OwnedPartition, schedule_id: str) -> str | None:
        """The owner the stored definition names, when the schedule itself cannot be built."""
        try:
            stored = owned.store.get(schedule_id)
            return None if stored is None else owner_from_stored(self.codecs, stored[0])
        except Exception:
            # Not even the record decodes: the id keeps no owner (any team may create it).
            logger.warning("schedule %s: no readable owner to keep", schedule_id, exc_info=True)
            return None
