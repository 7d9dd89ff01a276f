"""The embedded dedupe store: one SQLite file, shared by the executors of one host.

Every write transaction is `BEGIN IMMEDIATE`: SQLite has one writer at a time, so transactions
are serial and need no row or schedule locks. WAL mode lets readers run beside the writer, and
`synchronous=FULL` makes a claim durable when its transaction returns, before offsets commit.
A `python` handler's transaction holds the write lock while the handler runs: keep transactional
handlers short on SQLite, or use PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, cast

from kairos.streams.dedupe.base import DedupeStoreError
from kairos.streams.dedupe.database import Connection, schema_statements
from kairos.streams.dedupe.sql import SqlDedupeStore
from kairos.streams.sql.dialects import SQLITE, Dialect, connect_sqlite

BUSY_TIMEOUT_S = 10.0
"""How long a transaction waits for another process's write before it fails (and is retried)."""


class SqliteDedupeStore(SqlDedupeStore):
    sql: ClassVar[Dialect] = SQLITE
    for_update: ClassVar[str] = ""
    skip_locked: ClassVar[str] = ""
    # This host's clock, read by SQLite: the executors sharing a file share the host.
    clock_ms: ClassVar[str] = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise DedupeStoreError(
                str(path),
                f"cannot create its directory ({error.strerror}: {error.filename}); give the "
                "executor a --state-dir it can write, or a --dedupe-url",
            ) from None
        super().__init__(str(path))

    def _connect(self) -> Connection:
        # FULL: a claim is durable when its transaction returns, before offsets commit.
        pragmas = ("PRAGMA synchronous=FULL",)
        return cast(
            Connection, connect_sqlite(self.path, busy_timeout_s=BUSY_TIMEOUT_S, pragmas=pragmas)
        )

    def _schema_statements(self) -> list[str]:
        return schema_statements(self.sql)

    def _lock_schedule(self, conn: Connection, schedule_id: str) -> None:
        """Nothing to do: the transaction already holds the database's only write lock."""

    def _lock_concurrency(self, conn: Connection) -> None:
        """Nothing to do: the transaction already holds the database's only write lock."""

    def _take_outbox(self, conn: Connection) -> bool:
        return True
