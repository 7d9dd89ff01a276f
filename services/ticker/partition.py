"""One owned schedules partition: its RocksDB store and the offsets its state reflects.

The store holds committed state only: it is restored from the changelog (`restore.py`) and then
moved by each committed transaction (`commit.py`). Decoded states are kept in memory, and so is
what was decided ahead of time from them (`Ahead`). The changelog's records, their keys and the
due header are `kairos.streams.state.changelog`'s.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from confluent_kafka import TopicPartition

from kairos.core.calendar_rules import CalendarLookup
from kairos.core.firing import Outcome, ScheduleState
from kairos.core.instants import epoch_ms
from kairos.core.lru import LruCache
from kairos.services.ticker.fairness import (
    FAIR_ORDER_MIN,
    FairOrder,
    Ranked,
    fair_order,
    ranked_due,
)
from kairos.services.ticker.quotas import PartitionUse
from kairos.streams.kafka.ownership import Ownership, OwnershipInfo
from kairos.streams.state.changelog import (
    Floor,
    floor_from_stored,
    state_from_stored,
)
from kairos.streams.state.state_store import PartitionStore, StateWrite
from kairos.streams.wire.codec import Codecs

logger = logging.getLogger(__name__)

_CACHE_LIMIT = 2_000_000
"""Decoded states (and decisions made ahead) kept in memory per partition: past it the least
recently used are forgotten and read again from the store when asked (bounded RSS)."""
DECODED_AHEAD_MS = 120_000
"""How far ahead of its due instant a schedule is held decoded: idle time prepares the fires due
within it, and a committed state due later is dropped from memory (the store holds its bytes) and
decoded again when it comes within it. A decoded state costs about 0.3 KB of Python objects
(its definition and its runs' bytes shared, `kairos.core.definitions`,
`kairos.streams.wire.run_encoder`) beside its stored bytes and due-index entry: most schedules of a
fleet are due hours away."""
_DECODED_AHEAD = timedelta(milliseconds=DECODED_AHEAD_MS)
_BEHIND_CURSOR_LIMIT = 65_536
"""Committed states kept for idle time to prepare behind its cursor, per partition: past it the
oldest are forgotten (decided at their fire instead), so a ticker with no idle time does not
grow the list."""


@dataclass(frozen=True, slots=True)
class Ahead:
    """A schedule's next occurrence decided in idle time, from exactly `state`.

    `outcome` is reused at the fire when `holds_at` says deciding then gives the same; `write`
    is what the store and changelog will hold after it.
    """

    state: ScheduleState
    outcome: Outcome
    write: StateWrite


class OwnedPartition:
    """A schedules partition this ticker owns, with the offsets its state reflects."""

    def __init__(
        self,
        partition: int,
        store: PartitionStore,
        codecs: Codecs,
        owned_since: datetime,
        calendars: CalendarLookup,
    ) -> None:
        self.partition = partition
        self.store = store
        self._codecs = codecs
        self.calendars = calendars
        """The shared calendars every state of this partition is read with."""
        self._states: LruCache[str, ScheduleState] = LruCache(_CACHE_LIMIT)
        self._ahead: LruCache[str, Ahead] = LruCache(_CACHE_LIMIT)
        self._naming: dict[str, set[str]] = {}
        """Calendar id -> the schedules decoded here since it last changed whose `exclude` or
        `blackout` names it (some forgotten since: forgetting them again costs nothing), so a
        calendar change forgets only what it changes."""
        self.fair_orders: dict[int, FairOrder] = {}
        """Instant -> the order its schedules fire in when they fill more than a transaction
        (`fairness.py`), built as they are prepared."""
        self.prepared_cursor: tuple[int, int] = (0, 0)
        """(due instant, position among the schedules due then) where preparing upcoming fires
        resumes (see Ticker.turn)."""
        self.behind_cursor: deque[str] = deque(maxlen=_BEHIND_CURSOR_LIMIT)
        """Schedules committed due before `prepared_cursor`, which the cursor's walk will not
        meet again: idle time prepares them first. The walk stays up to two minutes ahead, so
        without them a schedule firing more often than that (every minute, say) was prepared
        once and then decided at every fire (measured: 1-3% of fires decided ahead)."""
        self.use = PartitionUse(partition, lambda: self.store, codecs)
        """Each team's use of its quota on this partition, counted when first judged."""
        self.owned_since = owned_since
        self.last_fire_at: datetime | None = None
        self.last_fire_lateness_ms: int | None = None
        """Lateness of the fire due at `last_fire_at`, the latest this owner committed."""
        self.committed_offset = -1
        """The schedules-topic offset the last committed transaction recorded (next to read)."""
        self.next_offset = -1
        """The schedules-topic offset after the last message taken into the open work."""
        self.changelog_end: int | None = None
        """The changelog offset past this owner's last committed records on the partition (from
        the restore, then from each commit): what a later owner's restore must reach."""
        self.judged_in: tuple[Ownership, int] | None = None
        """The ownership mode this owner judges changes in, and the first schedules offset
        judged in it without a break (`OwnershipInfo.mode_since`); set as it takes over."""

    def state(self, schedule_id: str) -> ScheduleState | None:
        """The committed state, decoded once and then served from memory.

        Its recency is that of its last commit (`committed` puts every state a transaction
        wrote), not of its last read: a fire reads it, then commits its next state.
        """
        cached = self._states.peek(schedule_id)
        if cached is not None:
            return cached
        stored = self.store.get(schedule_id)
        if stored is None:
            return None
        state = state_from_stored(self._codecs, *stored, self.calendars)
        if state is not None:
            self._keep(schedule_id, state)
        return state

    def _keep(self, schedule_id: str, state: ScheduleState) -> None:
        self._states.put(schedule_id, state)
        schedule = state.schedule
        if schedule.exclude or schedule.blackout:
            for calendar_id in (*schedule.exclude, *schedule.blackout):
                self._naming.setdefault(calendar_id, set()).add(schedule_id)

    @property
    def decoded(self) -> int:
        """How many states are held decoded in memory."""
        return len(self._states)

    def keep_fair_order(self, instant_ms: int, schedule_ids: list[str]) -> None:
        """Order the schedules due at `instant_ms` by rank within their owner, from the states
        held decoded (an undecoded one counts as ownerless)."""
        built = self.fair_orders.get(instant_ms)
        # Built once per instant: preparing looks at every instant in its horizon each idle
        # turn, and a sort each time took the idle time the herd's own preparation needs.
        if len(schedule_ids) < FAIR_ORDER_MIN or (
            built is not None and len(built.members) == len(schedule_ids)
        ):
            return

        def owner_of(schedule_id: str) -> str | None:
            state = self._states.get(schedule_id)
            return None if state is None else state.schedule.owner

        order = self.fair_orders[instant_ms] = fair_order(schedule_ids, owner_of)
        logger.debug(
            "fair order partition=%d instant_ms=%d schedules=%d top_rank=%d",
            self.partition,
            instant_ms,
            len(schedule_ids),
            order.top,
        )

    def due_by_rank(self, from_ms: int, until_ms: int, position: int) -> Iterator[Ranked]:
        """The schedules due in `[from_ms, until_ms]`, each with its rank and this partition's
        `position` among those merged (`fairness.merged_by_rank`), by rank."""
        for instant in [i for i in self.fair_orders if i < from_ms]:
            del self.fair_orders[instant]
        store = self.store
        due = store.due_instants(from_ms, until_ms)
        return ranked_due(due, self.fair_orders, store.due_ms_of, position)

    def floor(self, schedule_id: str) -> Floor | None:
        """What a deletion (or quarantine) of the id left: its last decided occurrence and last
        owner, kept by its progress."""
        progress = self.store.progress(schedule_id)
        if progress is None:
            return None
        return floor_from_stored(self._codecs, progress)

    def decided_ahead(self, state: ScheduleState) -> Ahead | None:
        """What was decided ahead from exactly this state, if anything."""
        ahead = self._ahead.peek(state.schedule_id)  # popped at the commit of its fire
        return ahead if ahead is not None and ahead.state is state else None

    def keep_ahead(self, ahead: Ahead) -> None:
        self._ahead.put(ahead.state.schedule_id, ahead)

    def ownership(self, instance: str, changelog_last: int | None) -> OwnershipInfo:
        """What this owner says of itself in its committed offsets' metadata."""
        next_due = self.store.next_due_ms()
        changelog_end = self.changelog_end if changelog_last is None else changelog_last + 1
        return OwnershipInfo(
            instance=instance,
            host=socket.gethostname(),
            since=self.owned_since,
            schedules=self.store.count,
            next_due=None if next_due is None else datetime.fromtimestamp(next_due / 1000, UTC),
            last_fire_lateness_ms=self.last_fire_lateness_ms,
            changelog_offset=changelog_end,
            mode=None if self.judged_in is None else self.judged_in[0],
            mode_since=None if self.judged_in is None else self.judged_in[1],
        )

    def forget_decoded(self, calendar_ids: Iterable[str]) -> None:
        """Drop the decoded states of the schedules naming these calendars (and what was
        decided ahead from them), so each is read again with the calendars as they are now,
        and index each schedule naming one at the instant it is due with them.

        Every held schedule is looked at, decoded or not: a change may move an occurrence
        earlier (a roll, a deferral, a `business_day` month) than the instant its schedule was
        indexed at. The index moves in memory; the stored due follows at the schedule's next
        write, so a later owner restoring the partition before that indexes it as it was.
        """
        changed = set(calendar_ids)
        for calendar_id in changed:
            for schedule_id in self._naming.pop(calendar_id, ()):
                self._states.pop(schedule_id)
                self._ahead.pop(schedule_id)
        for schedule_id in self.store.mentioning(name.encode() for name in changed):
            self._states.pop(schedule_id)
            self._ahead.pop(schedule_id)
            stored = self.store.get(schedule_id)
            try:
                state = (
                    None
                    if stored is None
                    else state_from_stored(self._codecs, *stored, self.calendars)
                )
            except Exception:  # the planner quarantines it when it meets it
                continue
            if state is None or not changed & {*state.schedule.exclude, *state.schedule.blackout}:
                continue
            due = state.due_at
            self.store.reindex(schedule_id, None if due is None else epoch_ms(due))

    def committed(self, states: dict[str, ScheduleState | None], now: datetime) -> list[str]:
        """Keep decoded the states a committed transaction wrote (never those of an aborted
        one) that fall due within `DECODED_AHEAD_MS` of `now`; the ids of those dropped."""
        keep_until = now + _DECODED_AHEAD
        # One conversion per commit, not one per fire: the states' instants compared as they are.
        cursor_at = datetime.fromtimestamp(self.prepared_cursor[0] / 1000, UTC)
        dropped = []
        for schedule_id, state in states.items():
            self._ahead.pop(schedule_id)
            if state is not None and state.due_at is not None and state.due_at <= keep_until:
                self._keep(schedule_id, state)
                if state.due_at < cursor_at:
                    self.behind_cursor.append(schedule_id)
            else:
                self._states.pop(schedule_id)
                dropped.append(schedule_id)
        return dropped


def consumed_offsets(
    topic: str, owned: dict[int, OwnedPartition], instance: str, changelog_ends: dict[int, int]
) -> list[TopicPartition]:
    """The offsets a transaction commits: a valid one for every owned partition, with who owns
    it (and where its changelog records end) in the metadata."""
    return [
        TopicPartition(
            topic,
            partition,
            one.next_offset,
            metadata=one.ownership(instance, changelog_ends.get(partition)).encode(),
        )
        for partition, one in owned.items()
    ]
