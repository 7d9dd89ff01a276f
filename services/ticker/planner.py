"""The turn planner: the schedule changes consumed, the owned partitions and `now` in, the
transaction's work out.

Nothing here talks to Kafka or reads a clock: the states come from the owned partitions' stores
(and what this turn already changed), the decisions from `kairos.core.firing`. A schedule whose
state cannot be decoded or decided is quarantined, confined to itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import Message

from kairos.core.firing import ScheduleState, decide_due, holds_at
from kairos.core.instants import epoch_ms
from kairos.core.misfire import MISFIRE_GRACE
from kairos.core.reruns import MAX_BACKFILL_RUNS
from kairos.services.ticker.changes import ScheduleChanges
from kairos.services.ticker.fairness import merged_by_rank
from kairos.services.ticker.partition import OwnedPartition
from kairos.services.ticker.quarantine import PoisonedScheduleError, Quarantine
from kairos.services.ticker.work import TransactionWork

logger = logging.getLogger(__name__)

PER_SCHEDULE_LIMIT = 100
"""Occurrences one schedule may decide per transaction; the rest of a backlog waits a turn."""


@dataclass(frozen=True)
class Budgets:
    """How much one transaction may carry."""

    decisions: int
    """Occurrences decided in all (runs and skips)."""
    catchup: int
    """Of them, occurrences due before the misfire grace (a backlog), and those changes settle."""
    reruns: int = MAX_BACKFILL_RUNS
    """Of them, re-runs: a budget of their own, so re-run requests never take the catch-up's.
    Each request is fired whole: the first of each partition in any case (a transaction may then
    carry more), later ones while they fit."""


class TurnPlanner:
    def __init__(self, changes: ScheduleChanges, quarantine: Quarantine, budgets: Budgets) -> None:
        self._changes = changes
        self._quarantine = quarantine
        self._budgets = budgets

    def plan(
        self, messages: Sequence[Message], owned: Mapping[int, OwnedPartition], now: datetime
    ) -> TransactionWork:
        """What one transaction carries: the changes taken in order, then what is due.

        `messages` are the schedule changes consumed this turn, without consumer errors. A
        change below a partition's next offset is in the state already and skipped; a change
        held (`TransactionWork.settle`) holds everything after it on its partition. Each owned
        partition's `next_offset` moves past the changes taken.
        """
        work = TransactionWork(settle_room=self._budgets.catchup, rerun_room=self._budgets.reruns)
        for message in messages:
            self._take_change(message, owned, now, work)
        self._decide_changed(owned, now, work)
        self._decide_due(owned, now, work)
        return work

    def _take_change(
        self,
        message: Message,
        owned: Mapping[int, OwnedPartition],
        now: datetime,
        work: TransactionWork,
    ) -> None:
        partition = message.partition()
        offset = message.offset()
        assert partition is not None and offset is not None
        one = owned.get(partition)
        if one is None or offset < one.next_offset or partition in work.held:
            # Not ours, or already in the state: the restored store reflects everything before
            # the committed offset, whichever offset the consumer starts from; or a change is held.
            return
        if self._changes.take(one, message, offset, now, work):
            one.next_offset = offset + 1
            work.consumed += 1

    def _decide_changed(
        self, owned: Mapping[int, OwnedPartition], now: datetime, work: TransactionWork
    ) -> None:
        """A change takes effect now: a changed schedule already due is decided at once, a late
        one within the catch-up budget (the index has it for the next turns)."""
        on_time_from = now - MISFIRE_GRACE
        for one in list(owned.values()):
            for changed in work.changed_due_by(one.partition, now):
                late = changed.due_at is not None and changed.due_at < on_time_from
                try:
                    self._decide(one, changed, now, work, late=late)
                except PoisonedScheduleError as poisoned:
                    self._quarantine.take(work, poisoned, one, changed.version, now)

    def _decide_due(
        self, owned: Mapping[int, OwnedPartition], now: datetime, work: TransactionWork
    ) -> None:
        """On-time occurrences first; then a bounded slice of the backlog, so a catch-up after
        downtime never delays the fires that are due right now."""
        now_ms = epoch_ms(now)
        on_time_from = now_ms - int(MISFIRE_GRACE.total_seconds() * 1000)
        partitions = list(owned.values())
        for lane_from, late in ((on_time_from, False), (0, True)):
            for one, schedule_id in self._lane(partitions, lane_from, now_ms, work, late=late):
                if self._room(work, late=late) <= 0:
                    break
                try:
                    self._decide_indexed(one, schedule_id, now, work, late=late)
                except PoisonedScheduleError as poisoned:
                    self._quarantine.take(work, poisoned, one, -1, now)

    def _lane(
        self,
        partitions: list[OwnedPartition],
        from_ms: int,
        until_ms: int,
        work: TransactionWork,
        *,
        late: bool,
    ) -> Iterator[tuple[OwnedPartition, str]]:
        """The schedules due in `[from_ms, until_ms]`: partition by partition in index order,
        or, when more is due on time than this transaction has room for, every owner's first
        fires first (`fairness.py`)."""
        room = self._room(work, late=late)
        due = 0 if late else sum(one.store.due_count(from_ms, until_ms) for one in partitions)
        if due > room:
            streams = [
                one.due_by_rank(from_ms, until_ms, position)
                for position, one in enumerate(partitions)
            ]
            yield from merged_by_rank(partitions, streams)
            return
        for one in partitions:
            room = self._room(work, late=late)
            if room <= 0:
                return
            for _, schedule_id in one.store.due(from_ms, until_ms, room):
                yield one, schedule_id

    def _room(self, work: TransactionWork, *, late: bool) -> int:
        """How many more occurrences this transaction may decide; late ones share the catch-up
        budget with the changes' settlements (`TransactionWork.settle_room`)."""
        room = self._budgets.decisions - work.decisions
        return min(room, work.settle_room) if late else room

    def _decide_indexed(
        self,
        owned: OwnedPartition,
        schedule_id: str,
        now: datetime,
        work: TransactionWork,
        *,
        late: bool,
    ) -> None:
        """Decide one schedule found due in the index; its failure is confined to it."""
        in_this_work = work.states.get(owned.partition, {})
        if schedule_id in in_this_work:
            pending = in_this_work[schedule_id]
            if pending is None or pending.due_at is None or pending.due_at > now:
                return
        else:
            # Committed and in the due index up to now: due, no need to ask.
            try:
                pending = owned.state(schedule_id)
            except Exception as failure:
                raise PoisonedScheduleError(
                    owned.partition, schedule_id, "decode", failure
                ) from failure
            if pending is None:
                return
        self._decide(owned, pending, now, work, late=late)

    def _decide(
        self,
        owned: OwnedPartition,
        state: ScheduleState,
        now: datetime,
        work: TransactionWork,
        *,
        late: bool,
    ) -> None:
        # On time, the index walk already stopped at the budget; late, each schedule counts.
        limit, decided_before = PER_SCHEDULE_LIMIT, 0
        if late:
            limit = min(limit, self._room(work, late=True))
            if limit <= 0:
                return
            decided_before = work.decisions
        try:
            ahead = owned.decided_ahead(state)
            if ahead is not None and holds_at(ahead.outcome, now):
                work.record(
                    owned.partition,
                    state.schedule_id,
                    ahead.outcome,
                    state,
                    written_ahead=ahead.write,
                )
            else:
                outcome = decide_due(state, until=now, now=now, limit=limit)
                work.record(owned.partition, state.schedule_id, outcome, state)
        except Exception as failure:
            raise PoisonedScheduleError(
                owned.partition, state.schedule_id, "decide", failure
            ) from failure
        if late:
            work.settle_room -= work.decisions - decided_before
