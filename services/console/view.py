"""The console's own view of the topics, in SQLite: what its pages read instead of the topics.

The follower (`kairos.services.console.follower`) applies each batch it consumed in one
transaction together with the offsets it reached, so after a restart the view resumes exactly
where its last committed batch ended: no record is applied twice or skipped. The view is a
cache of the topics, never a source of truth: deleting its file rebuilds it from the topics.

Instants are integer milliseconds since the epoch (UTC), so that ranges and orders are index
scans. Runs are aggregated per UTC minute as they arrive (`minutes`), so the activity plots read
one row a minute whatever the fire rate.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from kairos.core.audit import FiredRun, HistoryEvent, RunEventRecord
from kairos.services.console.lateness import LATENESS_BOUNDS_MS, bucket_of

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS offsets (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS schedules (
    schedule_id TEXT PRIMARY KEY, owner TEXT, paused INTEGER NOT NULL, trigger_kind TEXT NOT NULL,
    trigger TEXT NOT NULL, timezone TEXT NOT NULL, partition INTEGER NOT NULL,
    offset INTEGER NOT NULL, revision INTEGER NOT NULL, changed_at INTEGER NOT NULL,
    changed_by TEXT, definition TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS schedules_by_owner ON schedules (owner, schedule_id);
CREATE INDEX IF NOT EXISTS schedules_by_kind ON schedules (trigger_kind, schedule_id);
CREATE INDEX IF NOT EXISTS schedules_by_paused ON schedules (paused, schedule_id);
-- Counted as rows come and go: a page never counts a million rows.
CREATE TABLE IF NOT EXISTS partition_counts (
    partition INTEGER PRIMARY KEY, schedules INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS schedule_added AFTER INSERT ON schedules BEGIN
    INSERT INTO partition_counts VALUES (new.partition, 1)
    ON CONFLICT (partition) DO UPDATE SET schedules = schedules + 1;
END;
CREATE TRIGGER IF NOT EXISTS schedule_removed AFTER DELETE ON schedules BEGIN
    UPDATE partition_counts SET schedules = schedules - 1 WHERE partition = old.partition;
END;
CREATE TABLE IF NOT EXISTS labels (
    key TEXT NOT NULL, value TEXT NOT NULL, schedule_id TEXT NOT NULL,
    PRIMARY KEY (key, value, schedule_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS labels_by_schedule ON labels (schedule_id);
CREATE TABLE IF NOT EXISTS changes (
    schedule_id TEXT NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL,
    change TEXT NOT NULL, revision INTEGER NOT NULL, changed_at INTEGER NOT NULL,
    changed_by TEXT, reason TEXT, definition TEXT,
    PRIMARY KEY (schedule_id, partition, offset)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, schedule_id TEXT NOT NULL, nominal_at INTEGER NOT NULL,
    fired_at INTEGER, lateness_ms INTEGER, ticker TEXT, status TEXT NOT NULL,
    attempts INTEGER NOT NULL, executor TEXT, reason TEXT, finished_at INTEGER) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS runs_by_schedule ON runs (schedule_id, nominal_at);
CREATE TABLE IF NOT EXISTS minutes (
    minute INTEGER PRIMARY KEY, fires INTEGER NOT NULL, lateness TEXT NOT NULL,
    skipped INTEGER NOT NULL, failed INTEGER NOT NULL, dead_lettered INTEGER NOT NULL,
    deadline_missed INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS dead_letters (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL,
    source_topic TEXT NOT NULL, source_partition INTEGER NOT NULL, source_offset INTEGER NOT NULL,
    error_class TEXT NOT NULL, reason TEXT NOT NULL, dead_lettered_at INTEGER NOT NULL,
    schedule_id TEXT, PRIMARY KEY (topic, partition, offset)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dead_letters_by_time ON dead_letters (dead_lettered_at);
CREATE TABLE IF NOT EXISTS audits (
    audit_id INTEGER PRIMARY KEY, requested_at INTEGER NOT NULL, window_from INTEGER NOT NULL,
    window_to INTEGER NOT NULL, state TEXT NOT NULL, verdict TEXT, report TEXT);
"""

# The order of a run's states: a later event never moves a run back to an earlier state, so
# events read out of order (two partitions, a republished outbox event) settle the same way.
STATUS_RANK = {
    "requested": 0,
    "unknown": 0,
    "started": 1,
    "retrying": 2,
    "failed": 2,
    "deadline_missed": 2,
    "skipped": 3,
    "dead_lettered": 3,
    "succeeded": 3,
}
_MINUTE_EVENTS = ("skipped", "failed", "dead_lettered", "deadline_missed")


def epoch_ms(instant: datetime) -> int:
    return int(instant.timestamp() * 1000)


class ViewSchemaError(Exception):
    """The view file was written by a newer console; the message says what to do."""


@dataclass(frozen=True)
class ScheduleRow:
    """One schedule as the view stores it; `definition` is the schedule's JSON."""

    schedule_id: str
    owner: str | None
    paused: bool
    trigger_kind: str
    trigger: str
    timezone: str
    partition: int
    offset: int
    revision: int
    changed_at: int
    changed_by: str | None
    definition: str
    labels: dict[str, str]


@dataclass(frozen=True)
class DeadLetterRow:
    topic: str
    partition: int
    offset: int
    source_topic: str
    source_partition: int
    source_offset: int
    error_class: str
    reason: str
    dead_lettered_at: int
    schedule_id: str | None


@dataclass
class ViewBatch:
    """What one poll of the topics brought, applied at once by `ConsoleView.apply`."""

    upserted: list[ScheduleRow] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    changes: list[HistoryEvent] = field(default_factory=list)
    fired: list[FiredRun] = field(default_factory=list)
    events: list[RunEventRecord] = field(default_factory=list)
    dead_letters: list[DeadLetterRow] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    """(topic, partition) -> the next offset to read once this batch is applied."""


class ConsoleView:
    """The SQLite file behind the console: one writer (the follower), many readers (pages)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self.connection() as db:
            db.executescript(_SCHEMA)
            self._check_version(db)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection; WAL lets pages read while the follower writes."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA cache_size=-65536")
            self._local.db = db
        yield db

    def _check_version(self, db: sqlite3.Connection) -> None:
        found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if found is None:
            db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(found[0]) > SCHEMA_VERSION:
            raise ViewSchemaError(
                f"{self.path} holds a view of schema {found[0]}, newer than this console's "
                f"{SCHEMA_VERSION}; upgrade the console, or delete the file to rebuild the view "
                "from the topics"
            )

    def offsets(self) -> dict[tuple[str, int], int]:
        with self.connection() as db:
            rows = db.execute("SELECT topic, partition, next_offset FROM offsets").fetchall()
        return {(topic, partition): offset for topic, partition, offset in rows}

    def apply(self, batch: ViewBatch) -> None:
        """Write the batch and the offsets it reached in one transaction: all or nothing."""
        with self.connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                _write_schedules(db, batch)
                _write_changes(db, batch.changes)
                _write_runs(db, batch.fired, batch.events)
                _write_dead_letters(db, batch.dead_letters)
                db.executemany(
                    "INSERT INTO offsets VALUES (?, ?, ?) ON CONFLICT (topic, partition) "
                    "DO UPDATE SET next_offset = excluded.next_offset",
                    [(topic, p, offset) for (topic, p), offset in batch.offsets.items()],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise


def _write_schedules(db: sqlite3.Connection, batch: ViewBatch) -> None:
    gone = [(schedule_id,) for schedule_id in batch.deleted]
    rewritten = [(row.schedule_id,) for row in batch.upserted]
    db.executemany("DELETE FROM labels WHERE schedule_id = ?", gone + rewritten)
    db.executemany("DELETE FROM schedules WHERE schedule_id = ?", gone)
    # An upsert, not INSERT OR REPLACE: a replace would add to the counts without taking away.
    db.executemany(
        "INSERT INTO schedules VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (schedule_id) DO UPDATE SET owner = excluded.owner, "
        "paused = excluded.paused, trigger_kind = excluded.trigger_kind, "
        "trigger = excluded.trigger, timezone = excluded.timezone, offset = excluded.offset, "
        "revision = excluded.revision, changed_at = excluded.changed_at, "
        "changed_by = excluded.changed_by, definition = excluded.definition",
        [
            (
                r.schedule_id,
                r.owner,
                int(r.paused),
                r.trigger_kind,
                r.trigger,
                r.timezone,
                r.partition,
                r.offset,
                r.revision,
                r.changed_at,
                r.changed_by,
                r.definition,
            )
            for r in batch.upserted
        ],
    )
    db.executemany(
        "INSERT OR IGNORE INTO labels VALUES (?, ?, ?)",
        [(key, value, r.schedule_id) for r in batch.upserted for key, value in r.labels.items()],
    )


def _write_changes(db: sqlite3.Connection, changes: Iterable[HistoryEvent]) -> None:
    db.executemany(
        "INSERT OR IGNORE INTO changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                e.schedule_id,
                e.partition,
                e.offset,
                e.change,
                e.revision,
                epoch_ms(e.changed_at),
                e.changed_by,
                e.reason,
                None if e.definition is None else e.definition.model_dump_json(),
            )
            for e in changes
        ],
    )


def _write_runs(
    db: sqlite3.Connection, fired: list[FiredRun], events: list[RunEventRecord]
) -> None:
    minutes: dict[int, list[int]] = {}
    firsts = [run for run in fired if run.attempt == 1]
    for run in firsts:
        counts = minutes.setdefault(epoch_ms(run.fired_at) // 60_000, _empty_minute())
        counts[0] += 1
        counts[1 + bucket_of(run.lateness_ms)] += 1
    db.executemany(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, 'requested', 1, NULL, NULL, NULL) "
        "ON CONFLICT (run_id) DO UPDATE SET fired_at = excluded.fired_at, "
        "lateness_ms = excluded.lateness_ms, ticker = excluded.ticker",
        [
            (
                r.run_id,
                r.schedule_id,
                epoch_ms(r.nominal),
                epoch_ms(r.fired_at),
                r.lateness_ms,
                r.ticker_instance,
            )
            for r in firsts
        ],
    )
    for event in events:
        _apply_event(db, event)
        if event.kind in _MINUTE_EVENTS:
            at = event.finished_at or event.started_at or event.fired_at
            counts = minutes.setdefault(epoch_ms(at) // 60_000, _empty_minute())
            counts[1 + len(LATENESS_BOUNDS_MS) + _MINUTE_EVENTS.index(event.kind)] += 1
    _add_minutes(db, minutes)


def _empty_minute() -> list[int]:
    """fires, a count per lateness bucket, then one per `_MINUTE_EVENTS` kind."""
    return [0] * (1 + len(LATENESS_BOUNDS_MS) + len(_MINUTE_EVENTS))


def _apply_event(db: sqlite3.Connection, event: RunEventRecord) -> None:
    found = db.execute(
        "SELECT status, attempts FROM runs WHERE run_id = ?", (event.run_id,)
    ).fetchone()
    if found is None:
        # An event whose fire is not read yet (another topic, another partition): the fire
        # fills in its own columns when it arrives.
        db.execute(
            "INSERT INTO runs VALUES (?, ?, ?, NULL, NULL, NULL, 'requested', ?, NULL, NULL, NULL)",
            (event.run_id, event.schedule_id, epoch_ms(event.nominal), event.attempt),
        )
        found = ("requested", event.attempt)
    status, attempts = found
    moves = STATUS_RANK.get(event.kind, 0) >= STATUS_RANK.get(status, 0) or event.attempt > attempts
    if not moves:
        return
    db.execute(
        "UPDATE runs SET status = ?, attempts = max(attempts, ?), executor = ?, reason = ?, "
        "finished_at = ? WHERE run_id = ?",
        (
            event.kind,
            event.attempt,
            event.source,
            event.reason,
            None if event.finished_at is None else epoch_ms(event.finished_at),
            event.run_id,
        ),
    )


def _add_minutes(db: sqlite3.Connection, minutes: dict[int, list[int]]) -> None:
    for minute, added in minutes.items():
        counts = added
        found = db.execute(
            "SELECT fires, lateness, skipped, failed, dead_lettered, deadline_missed "
            "FROM minutes WHERE minute = ?",
            (minute,),
        ).fetchone()
        if found is not None:
            before = [found[0], *json.loads(found[1]), *found[2:]]
            counts = [a + b for a, b in zip(before, added, strict=True)]
        buckets = len(LATENESS_BOUNDS_MS)
        db.execute(
            "INSERT OR REPLACE INTO minutes VALUES (?, ?, ?, ?, ?, ?, ?)",
            (minute, counts[0], json.dumps(counts[1 : 1 + buckets]), *counts[1 + buckets :]),
        )


def _write_dead_letters(db: sqlite3.Connection, letters: list[DeadLetterRow]) -> None:
    db.executemany(
        "INSERT OR IGNORE INTO dead_letters VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                d.topic,
                d.partition,
                d.offset,
                d.source_topic,
                d.source_partition,
                d.source_offset,
                d.error_class,
                d.reason,
                d.dead_lettered_at,
                d.schedule_id,
            )
            for d in letters
        ],
    )
