"""Restoring one partition's store from the changelog, in slices across turns.

Restore reads the changelog `read_committed`, so records of a transaction that did not commit
are never applied. A warm store replays only the changelog records after the offset it
recorded; an empty store replays the whole (compacted) changelog.

A restore proves it reached the committed state: the offsets every firing transaction commits
carry, in their metadata, the changelog offset just past that transaction's records
(`OwnershipInfo.changelog_offset`), and restore reads until it gets there. Reading
read_committed stops at the last stable offset, which an open transaction (a dead or paused
previous owner's, or anyone else's) holds back; stopping there would lose the last edits and
fire the last fires again, so restore waits for it instead, up to its timeout.

A restore never holds the turn for longer than the slice it is given (`step`): the partitions
already owned keep firing while a large one restores cold (docs/architecture.md, "Take-over").
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import Message, TopicPartition

from kairos.services.ticker.partition import OwnedPartition
from kairos.streams.kafka.passing import BROKER_GONE, LEADER_MOVING, ask_until_answered
from kairos.streams.kafka.ports import PartitionReader
from kairos.streams.kafka.topics import CHANGELOG_DELETE_RETENTION_MS
from kairos.streams.state.changelog import RestoreError, read_changelog
from kairos.streams.state.state_store import PartitionStore

logger = logging.getLogger(__name__)

_BATCH = 1_000
"""Changelog records applied at once: about 15 ms of RocksDB writes, the slice's granularity."""
_POLL_S = 0.01
_HELD_BACK_WAIT_S = 0.5
"""How long a restore waits at a held-back end before it gives the partition back (and retries)."""
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


class PartitionRestore:
    """One partition's restore: planned once (`plan`), then applied a slice at a time (`step`).

    `must_reach` is the changelog offset the last committed transaction's records end at (from
    the committed offset's metadata; `None` when no Kairos owner committed one): the restore
    reads until it is there, waiting out open transactions that hold the last stable offset
    back. `end_offset` is the changelog's end including uncommitted records: a store ahead of
    the last stable offset but within it is kept, never thrown away.
    """

    def __init__(
        self, owned: OwnedPartition, topic: str, timeout_s: float, committed: TopicPartition
    ) -> None:
        self.owned = owned
        self.committed = committed
        """The group's committed offset of the schedules partition, with its metadata."""
        self._topic = topic
        self._timeout_s = timeout_s
        self._started = time.monotonic()
        self._mode = "cold"
        self._from = self._position = self._target = 0
        self._records = 0
        self._reading = False
        self._held_back_since: float | None = None

    @property
    def partition(self) -> int:
        return self.owned.partition

    def plan(self, reader: PartitionReader, *, must_reach: int | None, end_offset: int) -> None:
        """Where to read from and to; a store that cannot be trusted is emptied first."""
        changelog = TopicPartition(self._topic, self.partition)
        low, stable = ask_until_answered(
            lambda attempt_s: reader.get_watermark_offsets(changelog, timeout=attempt_s),
            self._timeout_s,
            LEADER_MOVING | BROKER_GONE,
            refresh=lambda attempt_s: reader.list_topics(self._topic, timeout=attempt_s),
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
        self._mode = "cold" if stored is None else "warm"
        self._from = self._position = low if stored is None else stored
        self._target = stable if must_reach is None else must_reach
        if stored is None and self._position >= self._target:
            self.owned.store.apply([], changelog_offset=self._position)

    def step(self, reader: PartitionReader, until: float) -> RestoreReport | None:
        """Apply the changelog until `until` (`time.monotonic()`) or the committed point.

        Returns the report once restored; `None` while records remain. Raises
        `RestoreHeldBackError` when an open transaction holds the end back (what was applied is
        kept: a later step resumes there) and `RestoreError` past the restore's timeout.
        """
        while self._position < self._target:
            if not self._reading:
                reader.assign([TopicPartition(self._topic, self.partition, self._position)])
                self._reading = True
            # consume() waits for a full batch or the timeout: keep the timeout short.
            messages = reader.consume(num_messages=_BATCH, timeout=_POLL_S)
            reached_end = self._apply(messages)
            # Past the last record there may be a transaction marker; start there next time.
            position = reader.position([TopicPartition(self._topic, self.partition)])[0].offset
            self._position = max(self._position, position)
            if self._position >= self._target:
                break
            self._check_held_back(reader, reached_end, bool(messages))
            if time.monotonic() >= until:
                return None
        self.stop_reading(reader)
        if self._position > (self.owned.store.changelog_offset or 0):
            self.owned.store.apply([], changelog_offset=self._position)
        return self._report()

    def stop_reading(self, reader: PartitionReader) -> None:
        """Give the reader back (a postponed or released restore resumes from `_position`)."""
        if self._reading:
            reader.unassign()
            self._reading = False

    def _check_held_back(self, reader: PartitionReader, reached_end: bool, read: bool) -> None:
        now = time.monotonic()
        if reached_end:
            self._held_back_since = self._held_back_since or now
        elif read:
            self._held_back_since = None
        if self._held_back_since is not None and now - self._held_back_since > _HELD_BACK_WAIT_S:
            self._held_back_since = None
            self.stop_reading(reader)
            raise RestoreHeldBackError(self.partition, self._position, self._target)
        if now > self._started + self._timeout_s:
            self.stop_reading(reader)
            raise RestoreError(
                self.partition,
                f"read only to offset {self._position} of the changelog in {self._timeout_s}s, "
                f"short of the committed point {self._target}: the broker answers too slowly; "
                "the take-over is tried again",
            )

    def _apply(self, messages: list[Message]) -> bool:
        """Apply one batch of changelog records; whether the end of the partition was reached."""
        batch = read_changelog(messages, self.partition)
        if batch.next_offset is not None:
            self.owned.store.apply(
                batch.writes,
                changelog_offset=batch.next_offset,
                schedules_offset=batch.schedules_offset,
            )
            self._records += sum(1 for message in messages if message.error() is None)
        return batch.reached_end

    def _report(self) -> RestoreReport:
        report = RestoreReport(
            self.partition,
            self._mode,
            self._from,
            self._records,
            time.monotonic() - self._started,
        )
        logger.info(
            "partition %d restored %s: %d changelog records from offset %d to %d in %.3fs",
            self.partition,
            report.mode,
            report.records,
            report.from_offset,
            max(report.from_offset, self._target),
            report.seconds,
        )
        return report

    def _trusted_store_offset(self, low: int, end_offset: int) -> int | None:
        """The store's changelog offset, or `None` after discarding a store that cannot be used."""
        store = self.owned.store
        stored = store.changelog_offset
        if stored is None:
            return None
        if too_old_for_warm_restore(store.written_at_ms, now_ms()):
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
        store.destroy()
        self.owned.store = PartitionStore(store.path, store.memory)
        return None
