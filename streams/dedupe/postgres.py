"""The shared dedupe store: PostgreSQL, for executors on many hosts.

Decisions about one schedule's runs are serialised by a transaction-scoped advisory lock on the
schedule id; work is taken with `FOR UPDATE SKIP LOCKED`, so executors never wait for each other
to acquire (but for starts in a limited concurrency group: one at a time, under a third advisory
lock, so a group's last place is taken once); one executor at a time publishes the outbox (a
second advisory lock, tried, not waited for). Connections are in autocommit mode and open
transactions explicitly.
"""

from __future__ import annotations

from typing import ClassVar, cast

from kairos.streams.dedupe.database import Connection, schema_statements
from kairos.streams.dedupe.sql import SqlDedupeStore
from kairos.streams.sql.dialects import POSTGRESQL, Dialect, connect_postgresql, shown_url


class PostgresDedupeStore(SqlDedupeStore):
    sql: ClassVar[Dialect] = POSTGRESQL
    for_update: ClassVar[str] = " FOR UPDATE"
    skip_locked: ClassVar[str] = " FOR UPDATE SKIP LOCKED"
    # The server's clock, as the statement runs (now() would be the transaction's start).
    clock_ms: ClassVar[str] = "CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)"

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(shown_url(url))

    def _connect(self) -> Connection:
        return cast(Connection, connect_postgresql(self.url))

    def _schema_statements(self) -> list[str]:
        # Two executors starting together would race on CREATE TABLE IF NOT EXISTS.
        return [
            "SELECT pg_advisory_xact_lock(hashtextextended('kairos-dedupe-schema', 0))",
            *schema_statements(self.sql),
        ]

    def _lock_schedule(self, conn: Connection, schedule_id: str) -> None:
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('kairos-schedule:' || %s, 0))",
            (schedule_id,),
        )

    def _lock_concurrency(self, conn: Connection) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('kairos-concurrency', 0))")

    def _take_outbox(self, conn: Connection) -> bool:
        row = conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtextextended('kairos-dedupe-outbox', 0))"
        ).fetchone()
        return bool(row[0])
