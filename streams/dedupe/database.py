"""What the SQL dedupe stores share below the state machine: connections, transactions, schema.

Each thread gets its own connection (the executor's loop, its heartbeat and each worker run
concurrently), in autocommit mode; a write transaction is opened explicitly with the dialect's
`BEGIN`. A database error leaves the connection in doubt, so it is dropped and the next call
reconnects: a restarted database costs one failed call, not the executor.
"""

from __future__ import annotations

import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from kairos.streams.dedupe.base import DedupeStoreError, HandlerTransaction
from kairos.streams.sql.connections import ThreadConnections
from kairos.streams.sql.dialects import Dialect

logger = logging.getLogger(__name__)

T = TypeVar("T")

SCHEMA_VERSION = 3
"""3 added `kairos_upstream_waits` (made by the schema itself): an executor of version 2 would
start a held run it promotes from queued, so it refuses a store of version 3."""
_TRANSIENT_RETRIES = 5


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...

    def close(self) -> None: ...


def schema_statements(dialect: Dialect) -> list[str]:
    """The store's tables in the dialect's types; every statement is idempotent."""
    bigint, blob, serial_key = dialect.bigint, dialect.blob, dialect.serial_key
    return [
        "CREATE TABLE IF NOT EXISTS kairos_dedupe_schema (version INTEGER NOT NULL)",
        # The store's identity, made once with it: executors on one database share it, and
        # refuse a consumer group whose members use another store (services/executor/fleet.py).
        "CREATE TABLE IF NOT EXISTS kairos_dedupe_identity (store_id TEXT NOT NULL)",
        # One row per run id ever claimed (until pruned). `value` is the RunRequested as first
        # consumed: retries decode it again and a dead letter copies it.
        f"""CREATE TABLE IF NOT EXISTS kairos_runs (
            run_id TEXT PRIMARY KEY,
            schedule_id TEXT NOT NULL,
            nominal_ms {bigint} NOT NULL,
            due_ms {bigint} NOT NULL,
            fired_ms {bigint} NOT NULL,
            overlap TEXT NOT NULL,
            state TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            max_attempts INTEGER NOT NULL,
            retry_backoff_ms {bigint} NOT NULL,
            runner TEXT NOT NULL,
            next_ms {bigint} NOT NULL,
            lease_owner TEXT,
            lease_expires_ms {bigint},
            started_ms {bigint},
            stop_reason TEXT,
            deliveries INTEGER NOT NULL,
            reason TEXT,
            value {blob} NOT NULL,
            source_topic TEXT NOT NULL,
            source_partition INTEGER NOT NULL,
            source_offset {bigint} NOT NULL,
            created_ms {bigint} NOT NULL,
            updated_ms {bigint} NOT NULL,
            owner TEXT NOT NULL DEFAULT '')""",
        "CREATE INDEX IF NOT EXISTS kairos_runs_by_next ON kairos_runs (state, next_ms)",
        "CREATE INDEX IF NOT EXISTS kairos_runs_by_lease ON kairos_runs (state, lease_expires_ms)",
        "CREATE INDEX IF NOT EXISTS kairos_runs_by_update ON kairos_runs (state, updated_ms)",
        "CREATE INDEX IF NOT EXISTS kairos_runs_by_schedule ON kairos_runs (schedule_id, state)",
        # Lifecycle events written with the change that caused them, published afterwards.
        f"""CREATE TABLE IF NOT EXISTS kairos_outbox (
            id {serial_key},
            run_id TEXT NOT NULL,
            kind TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            executor_instance TEXT NOT NULL,
            started_ms {bigint},
            finished_ms {bigint},
            reason TEXT,
            next_attempt_ms {bigint},
            dead_letter INTEGER NOT NULL)""",
        *_deadline_statements(bigint),
        *_concurrency_statements(bigint),
        *_upstream_wait_statements(bigint),
    ]


def _deadline_statements(bigint: str) -> list[str]:
    return [
        # The deadlines of claimed runs that have one (kairos.streams.dedupe.deadlines); each is
        # settled once, reported late or found on time, so it is reported once per run id.
        f"""CREATE TABLE IF NOT EXISTS kairos_deadlines (
            run_id TEXT PRIMARY KEY,
            start_by_ms {bigint},
            finish_by_ms {bigint},
            start_settled INTEGER NOT NULL,
            finish_settled INTEGER NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS kairos_deadlines_by_start "
        "ON kairos_deadlines (start_settled, start_by_ms)",
        "CREATE INDEX IF NOT EXISTS kairos_deadlines_by_finish "
        "ON kairos_deadlines (finish_settled, finish_by_ms)",
    ]


def _concurrency_statements(bigint: str) -> list[str]:
    return [
        # The concurrency groups of each claimed run (kairos.core.concurrency.run_groups) and
        # the limits an administrator set on some of them (kairos.streams.dedupe.concurrency).
        """CREATE TABLE IF NOT EXISTS kairos_run_groups (
            group_key TEXT NOT NULL,
            run_id TEXT NOT NULL,
            PRIMARY KEY (group_key, run_id))""",
        "CREATE INDEX IF NOT EXISTS kairos_run_groups_by_run ON kairos_run_groups (run_id)",
        f"""CREATE TABLE IF NOT EXISTS kairos_concurrency_limits (
            group_key TEXT PRIMARY KEY,
            max_running INTEGER NOT NULL,
            updated_ms {bigint} NOT NULL)""",
    ]


def _upstream_wait_statements(bigint: str) -> list[str]:
    return [
        # One row per claimed run still held for its upstream periods
        # (kairos.streams.dedupe.upstream_waits).
        f"""CREATE TABLE IF NOT EXISTS kairos_upstream_waits (
            run_id TEXT PRIMARY KEY,
            until_ms {bigint} NOT NULL,
            checked_ms {bigint} NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS kairos_upstream_waits_by_check "
        "ON kairos_upstream_waits (checked_ms)",
        # Each held run's matched upstream periods, and the periods that succeeded while a run
        # awaited them: the gate releases those runs first, whatever the round of the others.
        # Made by the schema, with no version: a store's older executors ignore them (their
        # held runs are released by the round alone, their successes tell nothing).
        f"""CREATE TABLE IF NOT EXISTS kairos_upstream_awaits (
            schedule_id TEXT NOT NULL,
            nominal_ms {bigint} NOT NULL,
            run_id TEXT NOT NULL,
            PRIMARY KEY (schedule_id, nominal_ms, run_id))""",
        "CREATE INDEX IF NOT EXISTS kairos_upstream_awaits_by_run "
        "ON kairos_upstream_awaits (run_id)",
        f"""CREATE TABLE IF NOT EXISTS kairos_upstream_news (
            schedule_id TEXT NOT NULL,
            nominal_ms {bigint} NOT NULL,
            PRIMARY KEY (schedule_id, nominal_ms))""",
    ]


_UNFINISHED_RUN = "state IN ('queued', 'ready', 'running')"
_OWNER_OF_RUN = (
    "FROM kairos_run_groups g WHERE g.run_id = kairos_runs.run_id AND g.group_key LIKE 'owner:%'"
)
UPGRADES: dict[int, list[str]] = {
    # Version 1 had no owner column, and its label groups (`label:KEY=VALUE`) spanned owners:
    # they become the shared groups, limits included, so a limit set before holds as it did.
    # The unfinished runs get their owner and their owner's label groups; ended runs no longer
    # count anywhere.
    1: [
        "ALTER TABLE kairos_runs ADD COLUMN owner TEXT NOT NULL DEFAULT ''",
        "UPDATE kairos_run_groups SET group_key = 'shared:' || substr(group_key, 7) "
        "WHERE group_key LIKE 'label:%'",
        "UPDATE kairos_concurrency_limits SET group_key = 'shared:' || substr(group_key, 7) "
        "WHERE group_key LIKE 'label:%'",
        f"UPDATE kairos_runs SET owner = (SELECT substr(g.group_key, 7) {_OWNER_OF_RUN}) "
        f"WHERE {_UNFINISHED_RUN} AND EXISTS (SELECT 1 {_OWNER_OF_RUN})",
        "INSERT INTO kairos_run_groups (group_key, run_id) SELECT 'label:' || "
        "replace(replace(r.owner, '%', '%25'), '/', '%2F') || '/' || substr(g.group_key, 8), "
        "g.run_id FROM kairos_run_groups g JOIN kairos_runs r ON r.run_id = g.run_id "
        f"WHERE g.group_key LIKE 'shared:%' AND r.owner <> '' AND r.{_UNFINISHED_RUN}",
    ],
    # Version 3's table is made with the others (`_upstream_wait_statements`): no run held.
    2: [],
}
"""The statements that bring a store of each older version to the next one."""
UPGRADED_INDEXES = [
    # Each owner's ready runs in due order: `acquire` reads every owner's first few through it.
    "CREATE INDEX IF NOT EXISTS kairos_runs_by_owner "
    "ON kairos_runs (state, owner, next_ms, nominal_ms)",
]
"""Indexes on columns an upgrade may have added: made after the upgrades."""


class Database(ABC):
    """Per-thread connections and transactions on one SQL database; subclasses connect."""

    sql: ClassVar[Dialect]

    def __init__(self, name: str) -> None:
        self._name = name
        self._connections: ThreadConnections[Connection] = ThreadConnections(
            self._connect, lambda conn: conn.close()
        )
        self._store_id = self.transaction(self._create_schema)

    @property
    def name(self) -> str:
        return self._name

    @property
    def dialect(self) -> str:
        """`sqlite` or `postgresql`."""
        return self.sql.name

    @property
    def store_id(self) -> str:
        return self._store_id

    @abstractmethod
    def _connect(self) -> Connection: ...

    @abstractmethod
    def _schema_statements(self) -> list[str]:
        """Idempotent DDL, run in one transaction when the store opens."""

    def is_database_error(self, error: BaseException) -> bool:
        return self.sql.is_error(error)

    def q(self, sql: str) -> str:
        """The statement in the driver's placeholder style (written here with `?`)."""
        return self.sql.q(sql)

    def connection(self) -> Connection:
        """This thread's connection, opened on first use."""
        try:
            return self._connections.get()
        except Exception as error:
            if self.is_database_error(error):
                raise DedupeStoreError(self._name, f"cannot connect: {error}") from error
            raise

    def drop_connection(self) -> None:
        """Forget this thread's connection after an error left it in doubt; reconnect next time."""
        self._connections.drop()

    def rollback(self, conn: Connection) -> None:
        try:
            conn.execute("ROLLBACK")
        except Exception as error:
            logger.warning("store=%s rollback failed (%s); reconnecting", self._name, error)
            self.drop_connection()

    def transaction(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in a write transaction on this thread's connection; retry conflicts.

        Errors other than the database's pass through after the rollback (`LeaseLostError`);
        database errors become `DedupeStoreError`.
        """
        for attempt in range(1, _TRANSIENT_RETRIES + 1):
            conn = self.connection()
            try:
                conn.execute(self.sql.begin)
                result = work(conn)
                conn.execute("COMMIT")
            except BaseException as error:
                self.rollback(conn)
                if not self.is_database_error(error):
                    raise
                if self.sql.is_transient(error) and attempt < _TRANSIENT_RETRIES:
                    logger.info("store=%s transaction conflict (%s); retrying", self._name, error)
                    continue
                self.drop_connection()
                raise DedupeStoreError(self._name, str(error)) from error
            return result
        raise AssertionError("unreachable: the last attempt returns or raises")

    def statement(self, sql: str, params: Sequence[Any]) -> Cursor:
        """One statement in a transaction of its own (the connections are in autocommit mode)."""
        try:
            return self.connection().execute(self.q(sql), params)
        except Exception as error:
            if not self.is_database_error(error):
                raise
            self.drop_connection()
            raise DedupeStoreError(self._name, str(error)) from error

    def _create_schema(self, conn: Connection) -> str:
        """Create what is missing; returns the store's id (made here the first time)."""
        for statement in self._schema_statements():
            conn.execute(statement)
        row = conn.execute("SELECT version FROM kairos_dedupe_schema").fetchone()
        if row is None:
            conn.execute(
                self.q("INSERT INTO kairos_dedupe_schema (version) VALUES (?)"), (SCHEMA_VERSION,)
            )
        elif row[0] > SCHEMA_VERSION:
            raise DedupeStoreError(
                self._name,
                f"its schema version {row[0]} is newer than this Kairos knows "
                f"({SCHEMA_VERSION}); upgrade this executor",
            )
        else:
            for version in range(row[0], SCHEMA_VERSION):
                logger.info("store=%s upgrading its schema from version %d", self._name, version)
                for statement in UPGRADES[version]:
                    conn.execute(statement)
            conn.execute(self.q("UPDATE kairos_dedupe_schema SET version = ?"), (SCHEMA_VERSION,))
        for statement in UPGRADED_INDEXES:
            conn.execute(statement)
        identity = conn.execute("SELECT store_id FROM kairos_dedupe_identity").fetchone()
        if identity is not None:
            return str(identity[0])
        store_id = uuid.uuid4().hex
        conn.execute(
            self.q("INSERT INTO kairos_dedupe_identity (store_id) VALUES (?)"), (store_id,)
        )
        return store_id

    def close(self) -> None:
        self._connections.close_all()


class LazyTransaction:
    """The transaction of one attempt of a `python` handler, begun when the handler asks for it,
    on the worker thread's connection. Implements `AttemptTransaction`."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self._conn = database.connection()
        self._begun = False

    @property
    def dialect(self) -> str:
        return self.database.dialect

    @property
    def connection(self) -> Any:
        return self._conn

    @property
    def begun(self) -> bool:
        return self._begun

    def begin(self) -> HandlerTransaction:
        if not self._begun:
            self._conn.execute(self.database.sql.begin)
            self._begun = True
        return self

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        self.begin()
        cursor = self._conn.execute(sql, params)
        return [] if cursor.description is None else [tuple(row) for row in cursor.fetchall()]

    def rollback(self) -> None:
        if self._begun:
            self._begun = False
            self.database.rollback(self._conn)

    def commit_with(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in this transaction and commit everything; roll back on any error."""
        try:
            result = work(self._conn)
            self._conn.execute("COMMIT")
        except BaseException as error:
            self.rollback()
            if self.database.is_database_error(error):
                self.database.drop_connection()
                raise DedupeStoreError(self.database.name, str(error)) from error
            raise
        self._begun = False
        return result
