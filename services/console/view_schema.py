"""The console view's tables, and the schema version that says which of them a view holds.

`create_or_migrate` is the console's (it owns the view: creates it, migrates an older one in
place); `require_version` a reader's beside it (`schedules describe --view`), which opens only
a view of this very version and writes nothing.
"""

from __future__ import annotations

from kairos.services.console.database import ViewDatabaseError, ViewDb
from kairos.streams.sql.dialects import Dialect

SCHEMA_VERSION = 5
"""2 added `changes.signing_team`, 3 `changes.restores`, 4 `runs.owner` (the team the ticker
fired the run for, so runs are shown by the ticker's verdict, not a later forged record), 5 the
`upstreams` table (made by the schema itself: schedules read before schema history v13 name
none); an older view is migrated in place."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS offsets (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, next_offset BIGINT NOT NULL,
    PRIMARY KEY (topic, partition)){table_suffix};
CREATE TABLE IF NOT EXISTS schedules (
    schedule_id {key_text} PRIMARY KEY, owner TEXT, paused INTEGER NOT NULL,
    trigger_kind TEXT NOT NULL, trigger TEXT NOT NULL, timezone TEXT NOT NULL,
    partition INTEGER NOT NULL, at_offset BIGINT NOT NULL, revision INTEGER NOT NULL,
    changed_at BIGINT NOT NULL, changed_by TEXT, definition TEXT NOT NULL){table_suffix};
CREATE INDEX IF NOT EXISTS schedules_by_owner ON schedules (owner, schedule_id);
CREATE INDEX IF NOT EXISTS schedules_by_kind ON schedules (trigger_kind, schedule_id);
CREATE INDEX IF NOT EXISTS schedules_by_paused ON schedules (paused, schedule_id);
CREATE TABLE IF NOT EXISTS partition_counts (
    partition INTEGER PRIMARY KEY, schedules BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS owner_counts (owner TEXT PRIMARY KEY, schedules BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS labels (
    key TEXT NOT NULL, value TEXT NOT NULL, schedule_id {key_text} NOT NULL,
    PRIMARY KEY (key, value, schedule_id)){table_suffix};
CREATE INDEX IF NOT EXISTS labels_by_schedule ON labels (schedule_id);
CREATE TABLE IF NOT EXISTS upstreams (
    schedule_id {key_text} NOT NULL, upstream_id {key_text} NOT NULL,
    PRIMARY KEY (schedule_id, upstream_id)){table_suffix};
CREATE INDEX IF NOT EXISTS upstreams_by_upstream ON upstreams (upstream_id, schedule_id);
CREATE TABLE IF NOT EXISTS changes (
    schedule_id {key_text} NOT NULL, partition INTEGER NOT NULL, at_offset BIGINT NOT NULL,
    change TEXT NOT NULL, revision INTEGER NOT NULL, changed_at BIGINT NOT NULL,
    changed_by TEXT, reason TEXT, definition TEXT, signing_team TEXT,
    restores INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (schedule_id, partition, at_offset)){table_suffix};
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, schedule_id {key_text} NOT NULL, nominal_at BIGINT NOT NULL,
    fired_at BIGINT, lateness_ms BIGINT, ticker TEXT, status TEXT NOT NULL,
    attempts INTEGER NOT NULL, executor TEXT, reason TEXT, finished_at BIGINT,
    owner TEXT){table_suffix};
CREATE INDEX IF NOT EXISTS runs_by_schedule ON runs (schedule_id, nominal_at);
CREATE INDEX IF NOT EXISTS runs_by_nominal ON runs (nominal_at);
CREATE TABLE IF NOT EXISTS run_events (
    run_id TEXT NOT NULL, attempt INTEGER NOT NULL, kind TEXT NOT NULL, at_ms BIGINT NOT NULL,
    nominal_at BIGINT NOT NULL, source TEXT NOT NULL, reason TEXT,
    PRIMARY KEY (run_id, attempt, kind, at_ms)){table_suffix};
CREATE INDEX IF NOT EXISTS run_events_by_nominal ON run_events (nominal_at);
CREATE TABLE IF NOT EXISTS minutes (
    minute BIGINT PRIMARY KEY, fires BIGINT NOT NULL, lateness TEXT NOT NULL,
    skipped BIGINT NOT NULL, failed BIGINT NOT NULL, dead_lettered BIGINT NOT NULL,
    deadline_missed BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS dead_letters (
    topic TEXT NOT NULL, partition INTEGER NOT NULL, at_offset BIGINT NOT NULL,
    source_topic TEXT NOT NULL, source_partition INTEGER NOT NULL, source_offset BIGINT NOT NULL,
    error_class TEXT NOT NULL, reason TEXT NOT NULL, dead_lettered_at BIGINT NOT NULL,
    schedule_id TEXT, PRIMARY KEY (topic, partition, at_offset)){table_suffix};
CREATE INDEX IF NOT EXISTS dead_letters_by_time ON dead_letters (dead_lettered_at);
CREATE TABLE IF NOT EXISTS audits (
    audit_id {serial_key}, requested_at BIGINT NOT NULL, window_from BIGINT NOT NULL,
    window_to BIGINT NOT NULL, state TEXT NOT NULL, verdict TEXT, report TEXT)
"""


def create_or_migrate(db: ViewDb, dialect: Dialect) -> None:
    """Create the tables a new view lacks, and migrate an older view to `SCHEMA_VERSION`."""
    for statement in dialect.schema(_SCHEMA):
        db.execute(statement)
    _migrate(db)


def require_version(db: ViewDb, dialect: Dialect) -> None:
    """Refuse, saying why, anything but a view of `SCHEMA_VERSION`: nothing is created."""
    try:
        found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except Exception as error:
        if not dialect.is_error(error):
            raise
        raise ViewDatabaseError(
            f"no console view there ({error}); give the URL the console runs with"
        ) from None
    if found is None or int(found[0]) != SCHEMA_VERSION:
        held = "no schema version" if found is None else f"schema {found[0]}"
        raise ViewDatabaseError(
            f"the view holds {held}, this release reads schema {SCHEMA_VERSION}: start this "
            "release's console on it first (it migrates the view), or use the CLI of the "
            "console's release"
        )


def _migrate(db: ViewDb) -> None:
    found = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if found is None:
        db.execute(
            "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING",
            (str(SCHEMA_VERSION),),
        )
    elif int(found[0]) < SCHEMA_VERSION:
        version = int(found[0])
        if version < 2:
            # Changes read before keep no signing team: none is shown for them.
            db.execute("ALTER TABLE changes ADD COLUMN signing_team TEXT")
        if version < 3:
            # Restorations read before are read as changes: each restates what its ticker held.
            db.execute("ALTER TABLE changes ADD COLUMN restores INTEGER NOT NULL DEFAULT 0")
        if version < 4:
            # Runs read before keep no owner: their reasons are shown to no team.
            db.execute("ALTER TABLE runs ADD COLUMN owner TEXT")
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    elif int(found[0]) > SCHEMA_VERSION:
        raise ViewDatabaseError(
            f"the view holds schema {found[0]}, newer than this console's {SCHEMA_VERSION}; "
            "upgrade the console, or give it an empty view (it is rebuilt from the topics)"
        )
