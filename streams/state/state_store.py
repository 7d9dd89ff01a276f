"""The ticker's local state for one schedules partition, in RocksDB.

Keys are bytes with a one-letter family prefix:

- `s<schedule id>` → the definition the ticker holds, exactly the bytes of its changelog value;
- `p<schedule id>` → be64 of the schedule's due instant in ms (-1: not due), then its firing
  progress, exactly the bytes of its changelog value; it outlives the schedule's deletion as its
  floor (never due), so that the id created again continues after its last decided occurrence;
- `m:changelog` → be64 of the next changelog offset the store has not applied;
- `m:schedules` → be64 of the next schedules-topic offset the state reflects (the checkpoint the
  changelog carries): a ticker never applies a schedule change below it again, whatever the
  consumer group's committed offsets say (a new group, expired offsets);
- `m:count` → be64 of the number of schedules held (counting keys would scan them all);
- `m:written_at` → be64 wall-clock ms of the last write (how stale a warm restore would be);
- `m:format` → the layout's version; a store of another layout is discarded at open and
  restored from the changelog.

Every change, including the changelog offset it reflects, is written in one `WriteBatch`, so
after a crash the store and its offset never disagree: restore replays the changelog from that
offset. The store is a cache of the changelog, which is the source of truth.

The due index lives in memory (`DueIndex`), built when the store opens from the due instants
that prefix the progress values. A fire rewrites one key, its progress, and the due instant
moves with it: a separate time-ordered index in RocksDB cost three writes per fire (delete the
old entry, put the progress, put the new entry), and walking it on every transaction stepped over
the tombstones a herd had just left behind (see docs/benchmarks.md, the herd's profile).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    RdictIter,
    WriteBatch,
    WriteBufferManager,
)

from kairos.core.errors import KairosError
from kairos.streams.state.due_index import DueIndex

logger = logging.getLogger(__name__)

_BE64 = struct.Struct(">q")
_STATE = b"s"
_PROGRESS = b"p"
_CHANGELOG_OFFSET = b"m:changelog"
_SCHEDULES_OFFSET = b"m:schedules"
_COUNT = b"m:count"
_WRITTEN_AT = b"m:written_at"
_FORMAT = b"m:format"
_FORMAT_VERSION = b"2"
_NOT_DUE = -1
_DUE_WIDTH = _BE64.size


_NO_SPACE = "No space left on device"
"""How RocksDB's IO errors spell ENOSPC (its Status text carries strerror)."""


class StateStoreError(KairosError):
    retryable = True
    """The ticker drops its stores and rebuilds them from the changelog."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"state store {path}: {reason}")
        self.path = path
        self.reason = reason


class StateWrite(NamedTuple):
    """One schedule's change: new definition and/or progress bytes, or its removal.

    `None` for `definition` or `progress` leaves that part as it is; `deleted` removes the
    schedule, keeping only `progress` when given (the floor a deleted schedule leaves). `due_ms`
    replaces the due-index entry (`None`: nothing due).

    A named tuple, not a frozen dataclass: as immutable, and built in a fraction of the time
    (a frozen dataclass's `__init__` was 13% of a cold restore, one or two per record).
    """

    schedule_id: str
    definition: bytes | None
    progress: bytes | None
    due_ms: int | None
    deleted: bool = False


class StoreMemory:
    """The memory RocksDB may use for every partition store of one process, under one limit.

    By default each RocksDB instance has its own memtables (64 MB each before a flush) and its
    own block cache: a ticker holding a million schedules over twelve partitions kept its whole
    store in unflushed memtables, about 300 bytes a schedule. One block cache shared by every
    store, with the memtables charged to it through a write buffer manager, and the index and
    filter blocks cached in it too, caps what RocksDB holds at `megabytes` however many
    schedules and partitions there are (Kafka Streams bounds its RocksDB stores the same way).
    The store's bytes beyond it live in SST files and the page cache.
    """

    def __init__(self, megabytes: int) -> None:
        self.megabytes = megabytes
        self._cache = Cache(megabytes << 20)
        # Half of it for memtables: past it, the store written to flushes its memtable.
        self._write_buffers = WriteBufferManager.new_write_buffer_manager_with_cache(
            (megabytes << 20) // 2, False, self._cache
        )

    @property
    def usage_bytes(self) -> int:
        """What the block cache holds now, the memtables charged to it included."""
        return int(self._cache.get_usage())

    def options(self) -> Options:
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_manager(self._write_buffers)
        table = BlockBasedOptions()
        table.set_block_cache(self._cache)
        table.set_cache_index_and_filter_blocks(True)
        options.set_block_based_table_factory(table)
        return options


class StoreScan(Iterator[bytes]):
    """The values under one key prefix, in key order, as the store was when the scan began.

    A RocksDB iterator reads the snapshot implicitly taken when it was created, so a scan may be
    walked a slice at a time across commits and still see one store. It also keeps the database
    open: a scan left running would hold RocksDB's lock on the directory after `close`, and the
    partition's next owner could not open it (a scan dropped inside a reference cycle, as a
    partition's quota count is, lives until the cyclic collector runs, which the ticker holds
    off: `services/ticker/garbage.py`). So the store ends the scans still running when it
    closes, and an ended scan raises `StateStoreError` rather than stop: no caller takes part of
    a store for the whole of it.
    """

    def __init__(self, path: Path, db: Rdict, prefix: bytes) -> None:
        self._path = path
        self._prefix = prefix
        self._it: RdictIter | None = db.iter()
        self._it.seek(prefix)
        self._ended = False

    def __iter__(self) -> StoreScan:
        return self

    def __next__(self) -> bytes:
        it = self._it
        if it is None:
            if self._ended:
                raise StateStoreError(self._path, "closed during a scan; open it again to scan")
            raise StopIteration
        if not it.valid():
            self._it = None
            it.status()  # an IO error raises here, rather than end the scan short
            raise StopIteration
        if not it.key().startswith(self._prefix):
            self._it = None
            raise StopIteration
        value: bytes = it.value()
        it.next()
        return value

    @property
    def running(self) -> bool:
        """Whether the scan still holds its iterator (neither finished nor ended)."""
        return self._it is not None

    def end(self) -> None:
        """Let go of the iterator (and the database it keeps open); the scan raises after."""
        if self._it is not None:
            self._it = None
            self._ended = True


DEFAULT_STORE_MEMORY_MB = 64


class PartitionStore:
    """One partition's schedules, due index and changelog position."""

    def __init__(self, path: Path, memory: StoreMemory) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.memory = memory
        self._db = self._open()
        if self._db.get(_FORMAT) != _FORMAT_VERSION:
            if self._db.get(_CHANGELOG_OFFSET) is not None:
                # Another release's layout: the store is a cache of the changelog, start over.
                logger.warning("state store %s has another layout; restoring it cold", path)
                self._db.close()
                Rdict.destroy(str(path))
                self._db = self._open()
            self._db.put(_FORMAT, _FORMAT_VERSION)
        raw_count = self._db.get(_COUNT)
        self._count = 0 if raw_count is None else int(_BE64.unpack(raw_count)[0])
        self._index = self._load_due_index()
        self._scans: list[StoreScan] = []
        """Scans handed out (`definitions`) that `close` ends if they still run."""

    def _open(self) -> Rdict:
        try:
            return Rdict(str(self.path), self.memory.options())
        except Exception as error:
            if _NO_SPACE in str(error):
                raise StateStoreError(
                    self.path, f"cannot open: its file system is full ({error}); free space"
                ) from error
            # RocksDB refuses a second opener of the same directory; say which directory.
            raise StateStoreError(
                self.path,
                f"cannot open ({error}); is another ticker using this --state-dir?",
            ) from error

    def _load_due_index(self) -> DueIndex:
        index = DueIndex()
        for key, value in self._scan(_PROGRESS):
            due = int(_BE64.unpack_from(value)[0])
            if due != _NOT_DUE:
                index.move(key[1:].decode(), due)
        return index

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) whose key starts with `prefix`, in key order, for a walk that ends
        within the call (one left running must be a `StoreScan`)."""
        it = self._db.iter()
        it.seek(prefix)
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(prefix):
                return
            yield key, it.value()
            it.next()

    def close(self) -> None:
        """Close; a close that cannot flush (a full disk) is logged, not raised: every write
        applied is in RocksDB's write-ahead log, replayed at the next open, and whatever the
        store lacks then, the restore reads from the changelog."""
        self._end_scans()
        try:
            self._db.close()
        except Exception as error:
            logger.warning("state store %s did not close cleanly: %s", self.path, error)

    @property
    def changelog_offset(self) -> int | None:
        """The next changelog offset to apply; `None` for a store that never applied any."""
        raw = self._db.get(_CHANGELOG_OFFSET)
        return None if raw is None else int(_BE64.unpack(raw)[0])

    @property
    def schedules_offset(self) -> int | None:
        """The next schedules-topic offset the state reflects; `None` before any checkpoint."""
        raw = self._db.get(_SCHEDULES_OFFSET)
        return None if raw is None else int(_BE64.unpack(raw)[0])

    def get(self, schedule_id: str) -> tuple[bytes, bytes | None] | None:
        """The schedule's (definition, progress) bytes; `None` when the store does not hold it."""
        key = schedule_id.encode()
        definition: bytes | None = self._db.get(_STATE + key)
        if definition is None:
            return None
        return definition, self._stored_progress(key)

    def progress(self, schedule_id: str) -> bytes | None:
        """The schedule's progress bytes, also kept once it is deleted (its floor)."""
        return self._stored_progress(schedule_id.encode())

    def apply(
        self,
        writes: Iterable[StateWrite],
        changelog_offset: int,
        schedules_offset: int | None = None,
    ) -> None:
        """Apply `writes` in order and record `changelog_offset`, atomically.

        `schedules_offset`, when given, is the schedules-topic checkpoint the writes bring the
        state to; it is recorded in the same batch.

        One batch may hold several writes of the same schedule (a restore replays its history),
        so what earlier writes of this batch did is tracked here: neither the database nor the
        memory index sees any of it until the batch is written.
        """
        batch = WriteBatch(raw_mode=True)
        count = self._count
        present: dict[str, bool] = {}
        progress_of: dict[str, bytes | None] = {}
        moved: dict[str, int | None] = {}
        pack = _BE64.pack
        for write in writes:
            schedule_id = write.schedule_id
            key = schedule_id.encode()
            if (write.deleted or write.definition is not None) and schedule_id not in present:
                # Only a (re)definition or a deletion can change the count.
                present[schedule_id] = self._db.get(_STATE + key) is not None
            if write.deleted:
                count -= present[schedule_id]
                present[schedule_id] = False
                moved[schedule_id] = None
                progress_of[schedule_id] = write.progress
                _delete(batch, key, write.progress)
                continue
            if write.definition is not None:
                count += not present[schedule_id]
                present[schedule_id] = True
                batch.put(_STATE + key, write.definition)
            progress = write.progress
            due = write.due_ms
            if progress is None:
                # A definition whose progress has not followed yet (a restore batch may end
                # between the two): not due until it does, keeping the progress it had.
                due = None
                progress = (
                    progress_of[schedule_id]
                    if schedule_id in progress_of
                    else self._stored_progress(key)
                )
            moved[schedule_id] = due
            if progress is not None:
                progress_of[schedule_id] = progress
                batch.put(_PROGRESS + key, pack(_NOT_DUE if due is None else due) + progress)
        _record_position(batch, changelog_offset, schedules_offset, count)
        self._db.write(batch)
        self._count = count
        index = self._index
        for schedule_id, due_ms in moved.items():
            index.move(schedule_id, due_ms)

    def _stored_progress(self, key: bytes) -> bytes | None:
        stored: bytes | None = self._db.get(_PROGRESS + key)
        return None if stored is None else stored[_DUE_WIDTH:]

    @property
    def written_at_ms(self) -> int | None:
        """Wall-clock ms of the last write; `None` for a store never written."""
        raw = self._db.get(_WRITTEN_AT)
        return None if raw is None else int(_BE64.unpack(raw)[0])

    @property
    def memtable_bytes(self) -> int:
        """What the store's memtables hold now (written, not yet flushed to its files)."""
        return int(self._db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0)

    @property
    def count(self) -> int:
        """How many schedules the store holds."""
        return self._count

    def due(self, from_ms: int, until_ms: int, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` (due ms, schedule id) with `from_ms <= due <= until_ms`, oldest first."""
        found: list[tuple[int, str]] = []
        for instant, schedule_ids in self._index.instants(from_ms, until_ms):
            room = limit - len(found)
            found.extend((instant, schedule_id) for schedule_id in schedule_ids[:room])
            if len(found) >= limit:
                break
        return found

    def due_count(self, from_ms: int, until_ms: int) -> int:
        """How many schedules are due in `[from_ms, until_ms]`."""
        return self._index.count(from_ms, until_ms)

    @property
    def due_ms_of(self) -> Callable[[str], int | None]:
        """When a schedule is due, as the index says (`None`: not due)."""
        return self._index.due_of

    def due_instants(self, from_ms: int, until_ms: int) -> Iterator[tuple[int, list[str]]]:
        """Each instant in `[from_ms, until_ms]` with the schedules due then, oldest first."""
        return self._index.instants(from_ms, until_ms)

    def next_due_ms(self) -> int | None:
        """The earliest due instant in the index, if any."""
        return self._index.first()

    def definitions(self) -> StoreScan:
        """Every held schedule's definition bytes, in id order, as the store is now: the scan
        may be walked in slices while commits move the store (`StoreScan`)."""
        self._scans = [scan for scan in self._scans if scan.running]
        scan = StoreScan(self.path, self._db, _STATE)
        self._scans.append(scan)
        return scan

    def mentioning(self, words: Iterable[bytes]) -> list[str]:
        """The ids of the held schedules whose definition bytes hold one of `words` (a quick
        filter before decoding: a word may also occur elsewhere in a definition)."""
        wanted = tuple(words)
        return [
            key[1:].decode()
            for key, definition in self._scan(_STATE)
            if any(word in definition for word in wanted)
        ]

    def reindex(self, schedule_id: str, due_ms: int | None) -> None:
        """Make a held schedule due at `due_ms` (`None`: not due) until its next write, which
        indexes it again as it stores it (the stored due header is left as it is)."""
        self._index.move(schedule_id, due_ms)

    def schedule_ids(self) -> list[str]:
        return [key[1:].decode() for key, _ in self._scan(_STATE)]

    def destroy(self) -> None:
        """Close and delete the store (a cold restore from the changelog follows)."""
        self._end_scans()
        self._db.close()
        Rdict.destroy(str(self.path))

    def _end_scans(self) -> None:
        for scan in self._scans:
            scan.end()
        self._scans.clear()


def _delete(batch: WriteBatch, key: bytes, floor: bytes | None) -> None:
    """Delete a schedule's state; its progress stays as the floor of its id (see `progress`)."""
    batch.delete(_STATE + key)
    if floor is None:
        batch.delete(_PROGRESS + key)
    else:
        batch.put(_PROGRESS + key, _BE64.pack(_NOT_DUE) + floor)


def _record_position(
    batch: WriteBatch, changelog_offset: int, schedules_offset: int | None, count: int
) -> None:
    """What the batch brings the store to: offsets, schedule count, when it was written."""
    batch.put(_CHANGELOG_OFFSET, _BE64.pack(changelog_offset))
    if schedules_offset is not None:
        batch.put(_SCHEDULES_OFFSET, _BE64.pack(schedules_offset))
    batch.put(_COUNT, _BE64.pack(count))
    batch.put(_WRITTEN_AT, _BE64.pack(int(time.time() * 1000)))
