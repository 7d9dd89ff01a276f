"""One owned schedules partition: its RocksDB store, restored from the changelog.

Restore reads the changelog `read_committed`, so records of a transaction that did not commit
are never applied. A warm store replays only the changelog records after the offset it
recorded; an empty store replays the whole (compacted) changelog.
"""

from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from kairos.core.errors import KairosError
from kairos.core.firing import Outcome, ScheduleState
from kairos.streams.codec import Codecs
from kairos.streams.records import state_from_records
from kairos.streams.state_store import PartitionStore, StateWrite
from kairos.streams.topics import CHANGELOG_DELETE_RETENTION_MS

logger = logging.getLogger(__name__)

_RESTORE_BATCH = 5_000
_CACHE_LIMIT = 2_000_000
"""Decoded states kept in memory per partition; past it the cache starts over (bounded RSS)."""
PROGRESS_SUFFIX = "#progress"
_WARM_RESTORE_MAX_AGE_MS = CHANGELOG_DELETE_RETENTION_MS // 2
_BE64 = struct.Struct(">q")
DUE_HEADER = "kairos.due_ms"


class RestoreError(KairosError):
    def __init__(self, partition: int, reason: str) -> None:
        super().__init__(f"restoring partition {partition} from the changelog failed: {reason}")
        self.partition = partition
        self.reason = reason


@dataclass(frozen=True)
class RestoreReport:
    partition: int
    mode: str
    """`warm` (delta from the store's offset) or `cold` (whole changelog)."""
    from_offset: int
    records: int
    seconds: float


def due_ms(state: ScheduleState | None) -> int | None:
    if state is None:
        return None
    due = state.due_at
    return None if due is None else int(due.timestamp() * 1000)


def changelog_headers(due: int | None) -> list[tuple[str, str | bytes | None]]:
    """The due instant rides beside each changelog value, so restore never decodes values."""
    return [] if due is None else [(DUE_HEADER, _BE64.pack(due))]


def _due_from_headers(message: Message) -> int | None:
    for header in message.headers() or []:
        value = header[1]
        if header[0] == DUE_HEADER and isinstance(value, bytes):
            return int(_BE64.unpack(value)[0])
    return None


def progress_key(schedule_id: str) -> str:
    # '#' never occurs in a schedule id, so the two keys of a schedule never collide.
    return schedule_id + PROGRESS_SUFFIX


def _restored_write(key: str, message: Message) -> StateWrite:
    value = message.value()
    if key.endswith(PROGRESS_SUFFIX):
        schedule_id = key[: -len(PROGRESS_SUFFIX)]
        if value is None:
            return StateWrite(schedule_id, None, None, None, deleted=True)
        return StateWrite(schedule_id, None, value, _due_from_headers(message))
    if value is None:
        return StateWrite(key, None, None, None, deleted=True)
    # A definition is always followed by its progress in the same transaction, which sets the
    # due entry; until then the schedule is not due.
    return StateWrite(key, value, None, None)


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
        self, partition: int, store: PartitionStore, codecs: Codecs, owned_since: datetime
    ) -> None:
        self.partition = partition
        self.store = store
        self._codecs = codecs
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

    def state(self, schedule_id: str) -> ScheduleState | None:
        """The committed state, decoded once and then served from memory."""
        cached = self._states.get(schedule_id)
        if cached is not None:
            return cached
        stored = self.store.get(schedule_id)
        if stored is None:
            return None
        definition, progress = stored
        state = state_from_records(
            self._codecs.ticker_state.decode(definition),
            None if progress is None else self._codecs.ticker_progress.decode(progress),
        )
        if state is not None:
            if len(self._states) >= _CACHE_LIMIT:
                self._states.clear()
            self._states[schedule_id] = state
        return state

    def decided_ahead(self, state: ScheduleState) -> Ahead | None:
        """What was decided ahead from exactly this state, if anything."""
        ahead = self._ahead.get(state.schedule.id)
        return ahead if ahead is not None and ahead.state is state else None

    def keep_ahead(self, ahead: Ahead) -> None:
        if len(self._ahead) >= _CACHE_LIMIT:
            self._ahead.clear()
        self._ahead[ahead.state.schedule.id] = ahead

    def committed(self, states: dict[str, ScheduleState | None]) -> None:
        """Remember states a committed transaction wrote (never those of an aborted one)."""
        for schedule_id, state in states.items():
            self._ahead.pop(schedule_id, None)
            if state is None:
                self._states.pop(schedule_id, None)
            else:
                self._states[schedule_id] = state

    def restore(self, consumer: Consumer, changelog_topic: str, timeout_s: float) -> RestoreReport:
        """Bring the store up to the changelog's last committed record."""
        started = time.monotonic()
        stored = self.store.changelog_offset
        low, high = consumer.get_watermark_offsets(
            TopicPartition(changelog_topic, self.partition), timeout=timeout_s
        )
        if stored is not None and too_old_for_warm_restore(self.store.written_at_ms, now_ms()):
            # The changelog may have compacted away a deletion this store never saw; replaying
            # only the delta would keep firing a deleted schedule.
            logger.warning(
                "partition %d: store last written more than %.1f h ago; restoring cold",
                self.partition,
                _WARM_RESTORE_MAX_AGE_MS / 3_600_000,
            )
            self.store.destroy()
            self.store = PartitionStore(self.store.path)
            stored = None
        if stored is not None and not low <= stored <= high:
            # The changelog was recreated or truncated under us: the store cannot be trusted.
            logger.warning(
                "partition %d: store offset %d outside changelog [%d, %d]; restoring cold",
                self.partition,
                stored,
                low,
                high,
            )
            self.store.destroy()
            self.store = PartitionStore(self.store.path)
            stored = None
        start = low if stored is None else stored
        mode = "cold" if stored is None else "warm"
        records = 0
        if start < high:
            records = self._replay(consumer, changelog_topic, start, timeout_s)
        elif stored is None:
            self.store.apply([], changelog_offset=start)
        report = RestoreReport(self.partition, mode, start, records, time.monotonic() - started)
        logger.info(
            "partition %d restored %s: %d changelog records from offset %d in %.3fs",
            self.partition,
            mode,
            records,
            start,
            report.seconds,
        )
        return report

    def _replay(self, consumer: Consumer, topic: str, start: int, timeout_s: float) -> int:
        consumer.assign([TopicPartition(topic, self.partition, start)])
        deadline = time.monotonic() + timeout_s
        applied = 0
        try:
            while True:
                if time.monotonic() > deadline:
                    raise RestoreError(self.partition, f"no end of changelog after {timeout_s}s")
                # consume() waits for a full batch or the timeout: keep the timeout short.
                messages = consumer.consume(num_messages=_RESTORE_BATCH, timeout=0.05)
                writes: list[StateWrite] = []
                reached_end = False
                next_offset: int | None = None
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            reached_end = True
                            continue
                        raise RestoreError(self.partition, error.str())
                    key = message.key()
                    assert key is not None, "changelog records are keyed by schedule id"
                    writes.append(_restored_write(key.decode(), message))
                    offset = message.offset()
                    assert offset is not None
                    next_offset = offset + 1
                    applied += 1
                if next_offset is not None:
                    self.store.apply(writes, changelog_offset=next_offset)
                if reached_end:
                    # Past the last record there may be a transaction marker; start there next time.
                    position = consumer.position([TopicPartition(topic, self.partition)])[0].offset
                    if position >= 0:
                        self.store.apply([], changelog_offset=position)
                    return applied
        finally:
            consumer.unassign()
