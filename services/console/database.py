"""Where the console's view lives: SQLite embedded by default, PostgreSQL when configured.

The view's SQL is written once, with `?` parameters and the upsert syntax both databases share
(`INSERT … ON CONFLICT … DO …`); a `Dialect` supplies only what differs: how to connect, how a
write transaction begins, the parameter style and a few column types. Each thread has its own
connection in autocommit mode, so the follower writes while pages read (SQLite in WAL mode).
"""

from __future__ import annotations

import contextlib
import fcntl
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, cast

from kairos.core.errors import KairosError

SQLITE_SCHEME = "sqlite:///"
_SQLITE_BUSY_S = 30.0


class ViewDatabaseError(KairosError):
    """The view's database cannot be used; the message says what to do."""


class Cursor(Protocol):
    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class ViewDb:
    """One connection, speaking the view's SQL whatever the database's parameter style."""

    def __init__(self, raw: Any, placeholder: str) -> None:
        self._raw = raw
        self._placeholder = placeholder

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return cast(Cursor, self._raw.execute(self._q(sql), params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        if isinstance(self._raw, sqlite3.Connection):
            self._raw.executemany(sql, rows)
        else:
            with self._raw.cursor() as cursor:
                cursor.executemany(self._q(sql), rows)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._raw.close()

    def _q(self, sql: str) -> str:
        return sql if self._placeholder == "?" else sql.replace("?", self._placeholder)


@dataclass(frozen=True)
class Dialect:
    name: str
    begin: str
    placeholder: str
    key_text: str
    """The type of a text key that is ranged and ordered: byte order in both databases."""
    serial_key: str
    table_suffix: str

    def schema(self, template: str) -> list[str]:
        text = template.format(
            key_text=self.key_text, serial_key=self.serial_key, table_suffix=self.table_suffix
        )
        return [statement.strip() for statement in text.split(";") if statement.strip()]


SQLITE = Dialect(
    name="sqlite",
    begin="BEGIN IMMEDIATE",
    placeholder="?",
    key_text="TEXT",
    serial_key="INTEGER PRIMARY KEY",
    table_suffix=" WITHOUT ROWID",
)
POSTGRESQL = Dialect(
    name="postgresql",
    begin="BEGIN",
    placeholder="%s",
    # The database's collation would order ids by language rules, and a prefix range would
    # miss ids; "C" orders by bytes, as SQLite does.
    key_text='TEXT COLLATE "C"',
    serial_key="BIGSERIAL PRIMARY KEY",
    table_suffix="",
)


class Connections:
    """A connection per thread to the view's database at `url`."""

    def __init__(self, url: str) -> None:
        self.url = url
        if url.startswith(SQLITE_SCHEME):
            self.dialect = SQLITE
            self._path: Path | None = Path(url.removeprefix(SQLITE_SCHEME))
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise ViewDatabaseError(
                    f"cannot create {self._path.parent} ({error.strerror}); give the console a "
                    "--state-dir it can write, or a --view-url"
                ) from None
        elif url.startswith(("postgresql://", "postgres://")):
            self.dialect = POSTGRESQL
            self._path = None
        else:
            raise ViewDatabaseError(
                f"--view-url {shown_url(url)!r} is neither sqlite:////absolute/path nor "
                "postgresql://user@host:5432/database"
            )
        self._local = threading.local()
        self._lock_file: IO[str] | None = None

    @contextmanager
    def connection(self) -> Iterator[ViewDb]:
        db: ViewDb | None = getattr(self._local, "db", None)
        if db is None:
            db = ViewDb(self._connect(), self.dialect.placeholder)
            self._local.db = db
        yield db

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
        db: ViewDb | None = getattr(self._local, "db", None)
        self._local.db = None
        if db is not None:
            db.close()

    def _connect(self) -> Any:
        if self._path is not None:
            raw = sqlite3.connect(self._path, timeout=_SQLITE_BUSY_S, isolation_level=None)
            raw.execute("PRAGMA journal_mode=WAL")
            # The view is rebuilt from the topics if lost: a crash may cost its last batches,
            # never its consistency (WAL with NORMAL keeps the file whole).
            raw.execute("PRAGMA synchronous=NORMAL")
            raw.execute("PRAGMA cache_size=-65536")
            return raw
        # Imported here so that psycopg is needed only by consoles that use PostgreSQL.
        import psycopg  # noqa: PLC0415

        try:
            return psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        except psycopg.Error as error:
            raise ViewDatabaseError(f"cannot connect to {shown_url(self.url)}: {error}") from None


def shown_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    scheme, separator, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{separator}{credentials.split(':', 1)[0]}:***@{host}"
