"""The ticker's local state for one schedules partition, in RocksDB.

Keys are bytes with a one-letter family prefix:

- `s<schedule id>` → the definition the ticker holds, exactly the bytes of its changelog value;
- `p<schedule id>` → the schedule's firing progress, likewise the bytes of its changelog value;
- `x<schedule id>` → its due instant (be64 ms), so an update finds the index entry to replace;
- `d<be64 due ms><schedule id>` → empty: the due index, which RocksDB keeps in time order
  because the instant is fixed-width big-endian;
- `m:changelog` → be64 of the next changelog offset the store has not applied;
- `m:count` → be64 of the number of schedules held (counting keys would scan them all);
- `m:written_at` → be64 wall-clock ms of the last write (how stale a warm restore would be).

Every change, including the changelog offset it reflects, is written in one `WriteBatch`, so
after a crash the store and its offset never disagree: restore replays the changelog from that
offset. The store is a cache of the changelog, which is the source of truth.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from kairos.core.errors import KairosError

_BE64 = struct.Struct(">q")
_STATE = b"s"
_PROGRESS = b"p"
_DUE_OF = b"x"
_DUE = b"d"
_CHANGELOG_OFFSET = b"m:changelog"
_COUNT = b"m:count"
_WRITTEN_AT = b"m:written_at"


class StateStoreError(KairosError):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"state store {path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class StateWrite:
    """One schedule's change: new definition and/or progress bytes, or its removal.

    `None` for `definition` or `progress` leaves that part as it is; `deleted` removes the
    schedule entirely. `due_ms` replaces the due-index entry (`None`: nothing due).
    """

    schedule_id: str
    definition: bytes | None
    progress: bytes | None
    due_ms: int | None
    deleted: bool = False


class PartitionStore:
    """One partition's schedules, due index and changelog position."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        try:
            self._db = Rdict(str(path), options)
        except Exception as error:
            # RocksDB refuses a second opener of the same directory; say which directory.
            raise StateStoreError(
                path,
                f"cannot open ({error}); is another ticker using this --state-dir?",
            ) from error

    def close(self) -> None:
        self._db.close()

    @property
    def changelog_offset(self) -> int | None:
        """The next changelog offset to apply; `None` for a store that never applied any."""
        raw = self._db.get(_CHANGELOG_OFFSET)
        return None if raw is None else int(_BE64.unpack(raw)[0])

    def get(self, schedule_id: str) -> tuple[bytes, bytes | None] | None:
        """The schedule's (definition, progress) bytes; `None` when the store does not hold it."""
        key = schedule_id.encode()
        definition: bytes | None = self._db.get(_STATE + key)
        if definition is None:
            return None
        progress: bytes | None = self._db.get(_PROGRESS + key)
        return definition, progress

    def apply(self, writes: Iterable[StateWrite], changelog_offset: int) -> None:
        """Apply `writes` in order and record `changelog_offset`, atomically.

        One batch may hold several writes of the same schedule (a restore replays its history),
        so what earlier writes of this batch did is tracked here: the database sees none of it
        until the batch is written.
        """
        batch = WriteBatch(raw_mode=True)
        count = self.count
        present: dict[bytes, bool] = {}
        due_of: dict[bytes, bytes | None] = {}
        for write in writes:
            key = write.schedule_id.encode()
            if key not in due_of:
                due_of[key] = self._db.get(_DUE_OF + key)
            if (write.deleted or write.definition is not None) and key not in present:
                # Only a (re)definition or a deletion can change the count.
                present[key] = self._db.get(_STATE + key) is not None
            old_due = due_of[key]
            if old_due is not None:
                batch.delete(_DUE + old_due + key)
            due_of[key] = None
            if write.deleted:
                count -= present[key]
                present[key] = False
                batch.delete(_STATE + key)
                batch.delete(_PROGRESS + key)
                batch.delete(_DUE_OF + key)
                continue
            if write.definition is not None:
                count += not present[key]
                present[key] = True
                batch.put(_STATE + key, write.definition)
            if write.progress is not None:
                batch.put(_PROGRESS + key, write.progress)
            if write.due_ms is None:
                batch.delete(_DUE_OF + key)
            else:
                due = _BE64.pack(write.due_ms)
                due_of[key] = due
                batch.put(_DUE_OF + key, due)
                batch.put(_DUE + due + key, b"")
        batch.put(_CHANGELOG_OFFSET, _BE64.pack(changelog_offset))
        batch.put(_COUNT, _BE64.pack(count))
        batch.put(_WRITTEN_AT, _BE64.pack(int(time.time() * 1000)))
        self._db.write(batch)

    @property
    def written_at_ms(self) -> int | None:
        """Wall-clock ms of the last write; `None` for a store never written."""
        raw = self._db.get(_WRITTEN_AT)
        return None if raw is None else int(_BE64.unpack(raw)[0])

    @property
    def count(self) -> int:
        """How many schedules the store holds."""
        raw = self._db.get(_COUNT)
        return 0 if raw is None else int(_BE64.unpack(raw)[0])

    def due(
        self, from_ms: int, until_ms: int, limit: int, after_id: str | None = None
    ) -> list[tuple[int, str]]:
        """Up to `limit` (due ms, schedule id) with `from_ms <= due <= until_ms`, oldest first.

        With `after_id`, the entries at `from_ms` start after that schedule: a cursor, for
        walking a herd that shares one instant in slices.
        """
        found: list[tuple[int, str]] = []
        it = self._db.iter()
        start = _DUE + _BE64.pack(max(from_ms, 0))
        if after_id is not None:
            # Ids never contain NUL, so id + NUL sorts right after the id itself.
            start += after_id.encode() + b"\x00"
        it.seek(start)
        while it.valid() and len(found) < limit:
            key: bytes = it.key()
            if not key.startswith(_DUE):
                break
            due_ms = int(_BE64.unpack_from(key, 1)[0])
            if due_ms > until_ms:
                break
            found.append((due_ms, key[9:].decode()))
            it.next()
        return found

    def next_due_ms(self) -> int | None:
        """The earliest due instant in the index, if any."""
        earliest = self.due(0, 2**62, 1)
        return earliest[0][0] if earliest else None

    def schedule_ids(self) -> list[str]:
        ids = []
        it = self._db.iter()
        it.seek(_STATE)
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(_STATE):
                break
            ids.append(key[1:].decode())
            it.next()
        return ids

    def destroy(self) -> None:
        """Close and delete the store (a cold restore from the changelog follows)."""
        self._db.close()
        Rdict.destroy(str(self.path))
