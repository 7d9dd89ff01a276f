"""The console's own view of the topics: what its pages read instead of the topics.

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
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kairos.core.audit import FiredRun, HistoryEvent, RunEventRecord
from kairos.core.instants import epoch_ms
from kairos.services.console.database import Connections, ViewDatabaseError, ViewDb
from kairos.services.console.lateness import LATENESS_BOUNDS_MS, bucket_of
from kairos.services.console.view_schema import create_or_migrate, require_version
from kairos.streams.sql.dialects import shown_url

RUNS_KEPT_MS = 14 * 24 * 3600 * 1000
"""Runs older than this (by nominal instant) leave the view: pages show recent runs, and the
audit reads the topics. The per-minute activity is kept longer (`MINUTES_KEPT_MS`)."""
MINUTES_KEPT_MS = 90 * 24 * 3600 * 1000

# `{key_text}`, `{serial_key}`, `{table_suffix}`: the dialect's (services/console/database.py).

# The order of a run's states: a later event never moves a run back to an earlier state, so
# events read out of order (two partitions, a republished outbox event) settle the same way.
STATUS_RANK = {
    "requested": 0,
    "unknown": 0,
    "started": 1,
    "retrying": 2,
    "failed": 2,
    "deadline_missed": 2,
    "released": 0,
    "skipped": 3,
    "dead_lettered": 3,
    "succeeded": 3,
}
_MINUTE_EVENTS = ("skipped", "failed", "dead_lettered", "deadline_missed")


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
    upstream: tuple[str, ...] = ()
    """The schedules it waits for (`Schedule.upstream`), for the pages of both ends."""


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


@dataclass(frozen=True)
class ChangeRow:
    """A change of the schedules topic as the view keeps it."""

    event: HistoryEvent
    definition: str | None
    """The definition's JSON (the schedule row's: encoded once); `None` for a delete."""
    team: str | None
    """The team its `kairos-team` header names, verified or not (pages show it only once a
    signed ticker took the change: `kairos.streams.kafka.ownership.Judged`)."""
    restores: bool
    """It bears the ticker's restoration mark (`RESTORES_HEADER`)."""


@dataclass
class ViewBatch:
    """What one poll of the topics brought, applied at once by `ConsoleView.apply`."""

    schedules: dict[str, ScheduleRow | None] = field(default_factory=dict)
    """Each schedule's state after the batch: its row, or `None` once deleted (the last record
    of a schedule in the batch decides)."""
    changes: list[ChangeRow] = field(default_factory=list)
    fired: list[FiredRun] = field(default_factory=list)
    events: list[RunEventRecord] = field(default_factory=list)
    dead_letters: list[DeadLetterRow] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    """(topic, partition) -> the next offset to read once this batch is applied."""

    def upsert(self, row: ScheduleRow) -> None:
        self.schedules.pop(row.schedule_id, None)
        self.schedules[row.schedule_id] = row

    def delete(self, schedule_id: str) -> None:
        self.schedules.pop(schedule_id, None)
        self.schedules[schedule_id] = None


class ConsoleView:
    """The database behind the console: one writer (the follower), many readers (pages).

    `url` is `sqlite:////absolute/path` (the default, in the console's state directory) or
    `postgresql://user@host:5432/database`.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        """Open the view at `url`, creating or migrating its schema; with `create` false (a
        reader beside the console, such as `schedules describe --view`) only an existing view
        of this schema version is opened, and nothing is written."""
        self._connections = Connections(url)
        self.url = url
        self.dialect = self._connections.dialect.name
        with self.connection() as db:
            if create:
                create_or_migrate(db, self._connections.dialect)
                return
            try:
                require_version(db, self._connections.dialect)
            except ViewDatabaseError as error:
                self.reconnect()
                raise ViewDatabaseError(f"{shown_url(url)}: {error}") from None

    @contextmanager
    def connection(self) -> Iterator[ViewDb]:
        """This thread's connection."""
        with self._connections.connection() as db:
            yield db

    def is_error(self, error: BaseException) -> bool:
        """Whether `error` is the view's database's own (sqlite3's or psycopg's)."""
        return self._connections.dialect.is_error(error)

    def take_follower_lock(self) -> bool:
        return self._connections.take_follower_lock()

    def reconnect(self) -> None:
        """Drop this thread's connection (after an error left it in doubt)."""
        self._connections.drop()

    @contextmanager
    def transaction(self) -> Iterator[ViewDb]:
        """A write transaction: committed when the block ends, rolled back if it raises."""
        with self.connection() as db:
            db.execute(self._connections.dialect.begin)
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def offsets(self) -> dict[tuple[str, int], int]:
        with self.connection() as db:
            rows = db.execute("SELECT topic, partition, next_offset FROM offsets").fetchall()
        return {(topic, partition): offset for topic, partition, offset in rows}

    def apply(self, batch: ViewBatch) -> None:
        """Write the batch and the offsets it reached in one transaction: all or nothing."""
        with self.transaction() as db:
            _write_schedules(db, batch.schedules)
            _write_changes(db, batch.changes)
            _write_runs(db, batch.fired, batch.events)
            _write_dead_letters(db, batch.dead_letters)
            db.executemany(
                "INSERT INTO offsets VALUES (?, ?, ?) ON CONFLICT (topic, partition) "
                "DO UPDATE SET next_offset = excluded.next_offset",
                [(topic, p, offset) for (topic, p), offset in batch.offsets.items()],
            )

    def prune(self, now_ms: int) -> None:
        """Forget runs and minutes past what the view keeps (`RUNS_KEPT_MS`, `MINUTES_KEPT_MS`)."""
        with self.transaction() as db:
            for table in ("runs", "run_events"):
                db.execute(f"DELETE FROM {table} WHERE nominal_at < ?", (now_ms - RUNS_KEPT_MS,))
            db.execute(
                "DELETE FROM minutes WHERE minute < ?", ((now_ms - MINUTES_KEPT_MS) // 60_000,)
            )


_CHUNK = 500
"""Ids per `IN (…)` list: below SQLite's limit on parameters."""


def _write_schedules(db: ViewDb, schedules: dict[str, ScheduleRow | None]) -> None:
    ids = list(schedules)
    known: dict[str, tuple[int, str]] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        query = (
            "SELECT schedule_id, partition, coalesce(owner, '') FROM schedules "
            f"WHERE schedule_id IN ({marks})"
        )
        known.update((i, (p, owner)) for i, p, owner in db.execute(query, chunk))
    partitions: Counter[int] = Counter()
    owners: Counter[str] = Counter()
    for schedule_id, row in schedules.items():
        if schedule_id in known:
            partition, owner = known[schedule_id]
            partitions[partition] -= 1
            owners[owner] -= 1
        if row is not None:
            partitions[row.partition] += 1
            owners[row.owner or ""] += 1
    _add_counts(db, "partition_counts", "partition", partitions)
    _add_counts(db, "owner_counts", "owner", owners)
    db.executemany("DELETE FROM labels WHERE schedule_id = ?", [(i,) for i in ids])
    db.executemany(
        "DELETE FROM schedules WHERE schedule_id = ?",
        [(i,) for i, row in schedules.items() if row is None],
    )
    rows = [row for row in schedules.values() if row is not None]
    db.executemany(
        "INSERT INTO schedules VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (schedule_id) DO UPDATE SET owner = excluded.owner, "
        "paused = excluded.paused, trigger_kind = excluded.trigger_kind, "
        "trigger = excluded.trigger, timezone = excluded.timezone, "
        "at_offset = excluded.at_offset, revision = excluded.revision, "
        "changed_at = excluded.changed_at, changed_by = excluded.changed_by, "
        "definition = excluded.definition",
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
            for r in rows
        ],
    )
    _write_edges(db, ids, rows)


def _write_edges(db: ViewDb, ids: list[str], rows: list[ScheduleRow]) -> None:
    """The schedules' labels and upstreams, as their rows now say."""
    db.executemany(
        "INSERT INTO labels VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
        [(key, value, r.schedule_id) for r in rows for key, value in r.labels.items()],
    )
    db.executemany("DELETE FROM upstreams WHERE schedule_id = ?", [(i,) for i in ids])
    db.executemany(
        "INSERT INTO upstreams VALUES (?, ?) ON CONFLICT DO NOTHING",
        [(r.schedule_id, upstream) for r in rows for upstream in r.upstream],
    )


def _add_counts(db: ViewDb, table: str, key: str, added: Counter[Any]) -> None:
    db.executemany(
        f"INSERT INTO {table} VALUES (?, ?) "
        f"ON CONFLICT ({key}) DO UPDATE SET schedules = {table}.schedules + ?",
        [(value, count, count) for value, count in added.items() if count],
    )


def _write_changes(db: ViewDb, changes: Iterable[ChangeRow]) -> None:
    db.executemany(
        "INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [
            (
                c.event.schedule_id,
                c.event.partition,
                c.event.offset,
                c.event.change,
                c.event.revision,
                epoch_ms(c.event.changed_at),
                c.event.changed_by,
                c.event.reason,
                c.definition,
                c.team,
                int(c.restores),
            )
            for c in changes
        ],
    )


def _write_runs(db: ViewDb, fired: list[FiredRun], events: list[RunEventRecord]) -> None:
    minutes: dict[int, list[int]] = {}
    firsts = [run for run in fired if run.attempt == 1]
    for run in firsts:
        counts = minutes.setdefault(epoch_ms(run.fired_at) // 60_000, _empty_minute())
        counts[0] += 1
        counts[1 + bucket_of(run.lateness_ms)] += 1
    db.executemany(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, 'requested', 1, NULL, NULL, NULL, ?) "
        "ON CONFLICT (run_id) DO UPDATE SET fired_at = excluded.fired_at, "
        "lateness_ms = excluded.lateness_ms, ticker = excluded.ticker, owner = excluded.owner",
        [
            (
                r.run_id,
                r.schedule_id,
                epoch_ms(r.nominal),
                epoch_ms(r.fired_at),
                r.lateness_ms,
                r.ticker_instance,
                r.owner,
            )
            for r in firsts
        ],
    )
    # A republished event (an executor's outbox after a crash) is the same row: kept once.
    db.executemany(
        "INSERT INTO run_events VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [
            (e.run_id, e.attempt, e.kind, epoch_ms(e.finished_at or e.started_at or e.fired_at),
             epoch_ms(e.nominal), e.source, e.reason)
            for e in events
        ],
    )  # fmt: skip
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


def _apply_event(db: ViewDb, event: RunEventRecord) -> None:
    found = db.execute(
        "SELECT status, attempts FROM runs WHERE run_id = ?", (event.run_id,)
    ).fetchone()
    if found is None:
        # An event whose fire is not read yet (another topic, another partition): the fire
        # fills in its own columns when it arrives.
        db.execute(
            "INSERT INTO runs VALUES "
            "(?, ?, ?, NULL, NULL, NULL, 'requested', ?, NULL, NULL, NULL, NULL)",
            (event.run_id, event.schedule_id, epoch_ms(event.nominal), event.attempt),
        )
        found = ("requested", event.attempt)
    status, attempts = found
    rank = STATUS_RANK.get(event.kind, 0)
    if event.attempt < attempts or (
        event.attempt == attempts and rank < STATUS_RANK.get(status, 0)
    ):
        return
    db.execute(
        "UPDATE runs SET status = ?, attempts = ?, executor = ?, reason = ?, finished_at = ? "
        "WHERE run_id = ?",
        (
            event.kind,
            event.attempt,
            event.source,
            event.reason,
            None if event.finished_at is None else epoch_ms(event.finished_at),
            event.run_id,
        ),
    )


def _add_minutes(db: ViewDb, minutes: dict[int, list[int]]) -> None:
    buckets = len(LATENESS_BOUNDS_MS)
    touched = sorted(minutes)
    before: dict[int, list[int]] = {}
    for start in range(0, len(touched), _CHUNK):
        chunk = touched[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        for row in db.execute(
            "SELECT minute, fires, lateness, skipped, failed, dead_lettered, deadline_missed "
            f"FROM minutes WHERE minute IN ({marks})",
            chunk,
        ):
            before[row[0]] = [row[1], *json.loads(row[2]), *row[3:]]
    rows = []
    for minute in touched:
        counts = minutes[minute]
        if minute in before:
            counts = [a + b for a, b in zip(before[minute], counts, strict=True)]
        rows.append(
            (minute, counts[0], json.dumps(counts[1 : 1 + buckets]), *counts[1 + buckets :])
        )
    db.executemany(
        "INSERT INTO minutes VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (minute) DO UPDATE "
        "SET fires = excluded.fires, lateness = excluded.lateness, "
        "skipped = excluded.skipped, failed = excluded.failed, "
        "dead_lettered = excluded.dead_lettered, deadline_missed = excluded.deadline_missed",
        rows,
    )


def _write_dead_letters(db: ViewDb, letters: list[DeadLetterRow]) -> None:
    db.executemany(
        "INSERT INTO dead_letters VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
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
