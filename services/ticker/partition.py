"""One owned schedules partition: its RocksDB store, restored from the changelog.

Restore reads the changelog `read_committed`, so records of a transaction that did not commit
are never applied. A warm store replays only the changelog records after the offset it
recorded; an empty store replays the whole (compacted) changelog.

A restore proves it reached the committed state: the offsets every firing transaction commits
carry, in their metadata, the changelog offset just past that transaction's records
(`OwnershipInfo.changelog_offset`), and restore reads until it gets there. Reading
read_committed stops at the last stable offset, which an open transaction (a dead or paused
previous owner's, or anyone else's) holds back; stopping there would lose the last edits and
fire the last fires again, so restore waits for it instead, up to its timeout.

Each transaction also writes a checkpoint record with the schedules-topic offset the partition's
state reflects, so the state knows how far it applied the schedules topic even on a fresh host or
under a consumer group without committed offsets. The changelog's records, their keys and the
due header are `kairos.streams.changelog`'s.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Message, TopicPartition

from kairos.core.calendar_rules import CalendarLookup
from kairos.core.firing import Outcome, ScheduleState
from kairos.streams.changelog import (
    RestoreError,
    floor_from_stored,
    read_changelog,
    state_from_stored,
)
from kairos.streams.codec import Codecs
from kairos.streams.ownership import OwnershipInfo
from kairos.streams.passing import BROKER_GONE, LEADER_MOVING, ask_until_answered
from kairos.streams.ports import PartitionReader
from kairos.streams.state_store import PartitionStore, StateWrite
from kairos.streams.topics import CHANGELOG_DELETE_RETENTION_MS

# RestoreError moved to the changelog's module; it stays importable from here for take-over.
__all__ = [
    "Ahead",
    "OwnedPartition",
    "RestoreError",
    "RestoreHeldBackError",
    "RestoreReport",
    "consumed_offsets",
    "now_ms",
    "to_ms",
    "too_old_for_warm_restore",
]

logger = logging.getLogger(__name__)

_RESTORE_BATCH = 5_000
_HELD_BACK_WAIT_S = 0.5
"""How long a restore waits at a held-back end before it gives the turn back (and retries)."""
_CACHE_LIMIT = 2_000_000
"""Decoded states kept in memory per partition; past it the cache starts over (bounded RSS)."""
_WARM_RESTORE_MAX_AGE_MS = CHANGELOG_DELETE_RETENTION_MS // 2


class RestoreHeldBackError(RestoreError):
    """The changelog's last stable offset is below the committed point: an open transaction
    (a dead or paused owner's, or anybody else's) holds it back. What was restored is kept."""

    def __init__(self, partition: int, position: int, target: int) -> None:
        super().__init__(
            partition,
            f"the changelog's last stable offset {position} is below the committed point "
            f"{target}: an open transaction holds it back (kairos audit verify names it); the "
            "take-over waits for it to commit, abort or time out rather than restore short",
        )
        self.position = position
        self.target = target


@dataclass(frozen=True)
class RestoreReport:
    partition: int
    mode: str
    """`warm` (delta from the store's offset) or `cold` (whole changelog)."""
    from_offset: int
    records: int
    seconds: float


def now_ms() -> int:
    return int(time.time() * 1000)


def too_old_for_warm_restore(written_at_ms: int | None, at_ms: int) -> bool:
    """A store older than half the changelog's deletion retention may have missed a deletion."""
    return written_at_ms is None or at_ms - written_at_ms > _WARM_RESTORE_MAX_AGE_MS


def to_ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


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
        self._states: dict[str, ScheduleState] = {}
        self._ahead: dict[str, Ahead] = {}
        self.prepared_cursor: tuple[int, int] = (0, 0)
        """(due instant, position among the schedules due then) where preparing upcoming fires
        resumes (see Ticker.turn)."""
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

    def state(self, schedule_id: str) -> ScheduleState | None:
        """The committed state, decoded once and then served from memory."""
        cached = self._states.get(schedule_id)
        if cached is not None:
            return cached
        stored = self.store.get(schedule_id)
        if stored is None:
            return None
        state = state_from_stored(self._codecs, *stored, self.calendars)
        if state is not None:
            if len(self._states) >= _CACHE_LIMIT:
                self._states.clear()
            self._states[schedule_id] = state
        return state

    def floor(self, schedule_id: str) -> datetime | None:
        """The last occurrence decided under the id, kept by the progress a deletion leaves."""
        progress = self.store.progress(schedule_id)
        if progress is None:
            return None
        return floor_from_stored(self._codecs, progress)

    def decided_ahead(self, state: ScheduleState) -> Ahead | None:
        """What was decided ahead from exactly this state, if anything."""
        ahead = self._ahead.get(state.schedule.id)
        return ahead if ahead is not None and ahead.state is state else None

    def keep_ahead(self, ahead: Ahead) -> None:
        if len(self._ahead) >= _CACHE_LIMIT:
            self._ahead.clear()
        self._ahead[ahead.state.schedule.id] = ahead

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
        )

    def forget_decoded(self) -> None:
        """Drop the states decoded so far (and what was decided ahead from them), so each is
        read again with the calendars as they are now."""
        self._states.clear()
        self._ahead.clear()

    def committed(self, states: dict[str, ScheduleState | None]) -> None:
        """Remember states a committed transaction wrote (never those of an aborted one)."""
        for schedule_id, state in states.items():
            self._ahead.pop(schedule_id, None)
            if state is None:
                self._states.pop(schedule_id, None)
            else:
                self._states[schedule_id] = state

    def restore(
        self,
        consumer: PartitionReader,
        changelog_topic: str,
        timeout_s: float,
        *,
        must_reach: int | None,
        end_offset: int,
    ) -> RestoreReport:
        """Bring the store up to the committed state of the partition.

        `must_reach` is the changelog offset the last committed transaction's records end at
        (from the committed offset's metadata; `None` when no Kairos owner committed one): the
        restore reads until it is there, waiting out open transactions that hold the last
        stable offset back. `end_offset` is the changelog's end including uncommitted records:
        a store ahead of the last stable offset but within it is kept, never thrown away.
        """
        started = time.monotonic()
        changelog = TopicPartition(changelog_topic, self.partition)
        low, stable = ask_until_answered(
            lambda attempt_s: consumer.get_watermark_offsets(changelog, timeout=attempt_s),
            timeout_s,
            LEADER_MOVING | BROKER_GONE,
            refresh=lambda attempt_s: consumer.list_topics(changelog_topic, timeout=attempt_s),
        )
        if must_reach is not None and must_reach > end_offset:
            raise RestoreError(
                self.partition,
                f"the committed offsets say the changelog reached offset {must_reach}, but its "
                f"leader says it ends at {end_offset}: a leader that has just taken over and "
                "not caught up yet (this passes within seconds), or the changelog topic was "
                "deleted or recreated (this never passes: the fires it recorded are gone; "
                "restore the topic, or start a new deployment, a topic prefix, whose schedules "
                "are published again)",
            )
        stored = self._trusted_store_offset(low, end_offset)
        start = low if stored is None else stored
        target = stable if must_reach is None else must_reach
        records = 0
        if start < target:
            records = self._replay(consumer, changelog_topic, start, target, timeout_s)
        elif stored is None:
            self.store.apply([], changelog_offset=start)
        mode = "cold" if stored is None else "warm"
        report = RestoreReport(self.partition, mode, start, records, time.monotonic() - started)
        logger.info(
            "partition %d restored %s: %d changelog records from offset %d to %d in %.3fs",
            self.partition,
            mode,
            records,
            start,
            max(start, target),
            report.seconds,
        )
        return report

    def _trusted_store_offset(self, low: int, end_offset: int) -> int | None:
        """The store's changelog offset, or `None` after discarding a store that cannot be used."""
        stored = self.store.changelog_offset
        if stored is None:
            return None
        if too_old_for_warm_restore(self.store.written_at_ms, now_ms()):
            # The changelog may have compacted away a deletion this store never saw; replaying
            # only the delta would keep firing a deleted schedule.
            logger.warning(
                "partition %d: store last written more than %.1f h ago; restoring cold",
                self.partition,
                _WARM_RESTORE_MAX_AGE_MS / 3_600_000,
            )
        elif not low <= stored <= end_offset:
            # The changelog was recreated or truncated under us: the store cannot be trusted.
            logger.warning(
                "partition %d: store offset %d outside changelog [%d, %d]; restoring cold",
                self.partition,
                stored,
                low,
                end_offset,
            )
        else:
            return stored
        self.store.destroy()
        self.store = PartitionStore(self.store.path)
        return None

    def _replay(
        self, consumer: PartitionReader, topic: str, start: int, target: int, timeout_s: float
    ) -> int:
        """Apply the changelog from `start` until the consumer's position reaches `target`."""
        assigned = TopicPartition(topic, self.partition)
        consumer.assign([TopicPartition(topic, self.partition, start)])
        deadline = time.monotonic() + timeout_s
        applied = 0
        held_back_since: float | None = None
        try:
            while True:
                # consume() waits for a full batch or the timeout: keep the timeout short.
                messages = consumer.consume(num_messages=_RESTORE_BATCH, timeout=0.05)
                reached_end = self._apply_restored(messages)
                applied += sum(1 for message in messages if message.error() is None)
                # Past the last record there may be a transaction marker; start there next time.
                position = consumer.position([assigned])[0].offset
                if position >= target:
                    if position > (self.store.changelog_offset or 0):
                        self.store.apply([], changelog_offset=position)
                    return applied
                if reached_end:
                    held_back_since = held_back_since or time.monotonic()
                elif messages:
                    held_back_since = None
                if (
                    held_back_since is not None
                    and time.monotonic() - held_back_since > _HELD_BACK_WAIT_S
                ):
                    raise RestoreHeldBackError(self.partition, position, target)
                if time.monotonic() > deadline:
                    raise RestoreError(
                        self.partition,
                        f"read only to offset {position} of the changelog in {timeout_s}s, "
                        f"short of the committed point {target}: the broker answers too slowly; "
                        "the take-over is tried again",
                    )
        finally:
            consumer.unassign()

    def _apply_restored(self, messages: list[Message]) -> bool:
        """Apply one batch of changelog records; whether the end of the partition was reached."""
        batch = read_changelog(messages, self.partition)
        if batch.next_offset is not None:
            self.store.apply(
                batch.writes,
                changelog_offset=batch.next_offset,
                schedules_offset=batch.schedules_offset,
            )
        return batch.reached_end


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
