"""The ticker's local state for one schedules partition, in RocksDB.

Keys are bytes with a one-letter family prefix:

- `s<schedule id>` → the schedule's state record, exactly the bytes of its changelog value;
- `x<schedule id>` → its due instant (be64 ms), so an update finds the index entry to replace;
- `d<be64 due ms><schedule id>` → empty: the due index, which RocksDB keeps in time order
  because the instant is fixed-width big-endian;
- `m:changelog` → be64 of the next changelog offset the store has not applied;
- `m:count` → be64 of the number of schedules held (counting keys would scan them all).

Every change, including the changelog offset it reflects, is written in one `WriteBatch`, so
after a crash the store and its offset never disagree: restore replays the changelog from that
offset. The store is a cache of the changelog, which is the source of truth.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from kairos.core.errors import KairosError

_BE64 = struct.Struct(">q")
_STATE = b"s"
_DUE_OF = b"x"
_DUE = b"d"
_CHANGELOG_OFFSET = b"m:changelog"
_COUNT = b"m:count"


class StateStoreError(KairosError):
    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"state store {path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class StateWrite:
    """Set (`value` not None) or remove one schedule's state and its due-index entry."""

    schedule_id: str
    value: bytes | None
    due_ms: int | None


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

    def get(self, schedule_id: str) -> bytes | None:
        value: bytes | None = self._db.get(_STATE + schedule_id.encode())
        return value

    def apply(self, writes: Iterable[StateWrite], changelog_offset: int) -> None:
        """Apply `writes` and record `changelog_offset`, atomically."""
        batch = WriteBatch(raw_mode=True)
        count = self.count
        for write in writes:
            key = write.schedule_id.encode()
            existed = self._db.get(_STATE + key) is not None
            old_due = self._db.get(_DUE_OF + key)
            if old_due is not None:
                batch.delete(_DUE + old_due + key)
            if write.value is None:
                count -= existed
                batch.delete(_STATE + key)
                batch.delete(_DUE_OF + key)
                continue
            count += not existed
            batch.put(_STATE + key, write.value)
            if write.due_ms is None:
                batch.delete(_DUE_OF + key)
            else:
                due = _BE64.pack(write.due_ms)
                batch.put(_DUE_OF + key, due)
                batch.put(_DUE + due + key, b"")
        batch.put(_CHANGELOG_OFFSET, _BE64.pack(changelog_offset))
        batch.put(_COUNT, _BE64.pack(count))
        self._db.write(batch)

    @property
    def count(self) -> int:
        """How many schedules the store holds."""
        raw = self._db.get(_COUNT)
        return 0 if raw is None else int(_BE64.unpack(raw)[0])

    def due(self, from_ms: int, until_ms: int, limit: int) -> list[tuple[int, str]]:
        """Up to `limit` (due ms, schedule id) with `from_ms <= due <= until_ms`, oldest first."""
        found: list[tuple[int, str]] = []
        it = self._db.iter()
        it.seek(_DUE + _BE64.pack(max(from_ms, 0)))
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
