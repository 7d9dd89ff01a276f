"""Where the console's view lives: SQLite embedded by default, PostgreSQL when configured.

The view's SQL is written once, with `?` parameters and the upsert syntax both databases share
(`INSERT … ON CONFLICT … DO …`); the dialect (`kairos.streams.sql.dialects`) supplies only what
differs: how to connect, how a write transaction begins, the parameter style and a few column
types. Each thread has its own connection in autocommit mode, so the follower writes while pages
read (SQLite in WAL mode).
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any, Protocol, cast

from kairos.core.errors import KairosError
from kairos.streams.sql.connections import ThreadConnections
from kairos.streams.sql.dialects import (
    SQLITE,
    Dialect,
    connect_postgresql,
    connect_sqlite,
    dialect_of,
    shown_url,
    sqlite_path,
)

_SQLITE_BUSY_S = 30.0


class ViewDatabaseError(KairosError):
    """The view's database cannot be used; the message says what to do."""


class Cursor(Protocol):
    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class ViewDb:
    """One connection, speaking the view's SQL whatever the database's parameter style."""

    def __init__(self, raw: Any, dialect: Dialect) -> None:
        self._raw = raw
        self._dialect = dialect

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return cast(Cursor, self._raw.execute(self._dialect.q(sql), params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        if isinstance(self._raw, sqlite3.Connection):
            self._raw.executemany(sql, rows)
        else:
            with self._raw.cursor() as cursor:
                cursor.executemany(self._dialect.q(sql), rows)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._raw.close()


class Connections:
    """A connection per thread to the view's database at `url`."""

    def __init__(self, url: str) -> None:
        self.url = url
        dialect = dialect_of(url)
        if dialect is None:
            raise ViewDatabaseError(
                f"--view-url {shown_url(url)!r} is neither sqlite:////absolute/path nor "
                "postgresql://user@host:5432/database"
            )
        self.dialect = dialect
        self._path = sqlite_path(url) if dialect is SQLITE else None
        if self._path is not None:
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise ViewDatabaseError(
                    f"cannot create {self._path.parent} ({error.strerror}); give the console a "
                    "--state-dir it can write, or a --view-url"
                ) from None
        self._connections = ThreadConnections(self._connect, ViewDb.close)
        self._lock_file: IO[str] | None = None

    @contextmanager
    def connection(self) -> Iterator[ViewDb]:
        yield self._connections.get()

    def take_follower_lock(self) -> bool:
        """Whether this thread now holds the view's follower lock: one console follows the
        topics into a view, any number read it. Held until this thread's connection closes
        (PostgreSQL: a session advisory lock) or the process ends (SQLite: a lock file)."""
        if self._path is None:
            with self.connection() as db:
                row = db.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended('kairos-console-follower', 0))"
                ).fetchone()
            return bool(row[0])
        if self._lock_file is None:
            lock_file = (self._path.parent / (self._path.name + ".follower")).open("a")
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock_file.close()
                return False
            self._lock_file = lock_file
        return True

    def drop(self) -> None:
        self._connections.drop()

    def _connect(self) -> ViewDb:
        if self._path is not None:
            # The view is rebuilt from the topics if lost: a crash may cost its last batches,
            # never its consistency (WAL with NORMAL keeps the file whole).
            pragmas = ("PRAGMA synchronous=NORMAL", "PRAGMA cache_size=-65536")
            raw = connect_sqlite(self._path, busy_timeout_s=_SQLITE_BUSY_S, pragmas=pragmas)
            return ViewDb(raw, self.dialect)
        try:
            return ViewDb(connect_postgresql(self.url), self.dialect)
        except Exception as error:
            if not self.dialect.is_error(error):
                raise
            raise ViewDatabaseError(f"cannot connect to {shown_url(self.url)}: {error}") from None
