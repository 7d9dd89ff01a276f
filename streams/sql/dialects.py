"""What differs between SQLite and PostgreSQL, said once: how to connect, how a write
transaction begins, the parameter style, the column types, which errors are the database's and
which of those a retry may clear.

Statements are written once, with `?` parameters and the syntax both databases share; `q` puts
them in the driver's style.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SQLITE_SCHEME = "sqlite:///"
POSTGRESQL_SCHEMES = ("postgresql://", "postgres://")
CONNECT_TIMEOUT_S = 10


@dataclass(frozen=True, slots=True)
class Dialect:
    name: str
    """`sqlite` or `postgresql`, as handlers' transactions report it."""
    begin: str
    """Opens a write transaction (connections are in autocommit mode)."""
    placeholder: str
    bigint: str
    blob: str
    serial_key: str
    key_text: str
    """The type of a text key that is ranged and ordered: byte order in both databases."""
    table_suffix: str

    def q(self, sql: str) -> str:
        """`sql`, written with `?` parameters, in the driver's style."""
        return sql if self.placeholder == "?" else sql.replace("?", self.placeholder)

    def schema(self, template: str) -> list[str]:
        """The statements of a `;`-separated schema whose types are named by field."""
        text = template.format(
            bigint=self.bigint,
            blob=self.blob,
            serial_key=self.serial_key,
            key_text=self.key_text,
            table_suffix=self.table_suffix,
        )
        return [statement.strip() for statement in text.split(";") if statement.strip()]

    def is_error(self, error: BaseException) -> bool:
        """Whether `error` is the database's (the connection is then in doubt)."""
        if self.name == "sqlite":
            return isinstance(error, sqlite3.Error)
        import psycopg  # noqa: PLC0415

        return isinstance(error, psycopg.Error)

    def is_transient(self, error: BaseException) -> bool:
        """A conflict that the same transaction, run again, will likely not meet."""
        if self.name == "sqlite":
            code = getattr(error, "sqlite_errorcode", None)
            return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
        import psycopg.errors  # noqa: PLC0415

        return isinstance(
            error, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure
        )


SQLITE = Dialect(
    name="sqlite",
    # SQLite has one writer at a time: taking the write lock at the start makes transactions
    # serial, so they need no row locks.
    begin="BEGIN IMMEDIATE",
    placeholder="?",
    bigint="INTEGER",
    blob="BLOB",
    # AUTOINCREMENT: an id is never given twice, even after the newest row is deleted.
    serial_key="INTEGER PRIMARY KEY AUTOINCREMENT",
    key_text="TEXT",
    table_suffix=" WITHOUT ROWID",
)
POSTGRESQL = Dialect(
    name="postgresql",
    begin="BEGIN",
    placeholder="%s",
    bigint="BIGINT",
    blob="BYTEA",
    serial_key="BIGSERIAL PRIMARY KEY",
    # The database's collation would order ids by language rules, and a prefix range would
    # miss ids; "C" orders by bytes, as SQLite does.
    key_text='TEXT COLLATE "C"',
    table_suffix="",
)


def dialect_of(url: str) -> Dialect | None:
    """The dialect of a database URL: `sqlite:////absolute/path` or `postgresql://…`."""
    if url.startswith(SQLITE_SCHEME):
        return SQLITE
    if url.startswith(POSTGRESQL_SCHEMES):
        return POSTGRESQL
    return None


def sqlite_path(url: str) -> Path:
    return Path(url.removeprefix(SQLITE_SCHEME))


def connect_sqlite(path: Path, *, busy_timeout_s: float, pragmas: Sequence[str]) -> Any:
    """A SQLite connection in autocommit mode (transactions begin explicitly), in WAL mode so
    readers run beside the writer, with the caller's durability `pragmas`."""
    connection = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None)
    connection.execute("PRAGMA journal_mode=WAL")
    for pragma in pragmas:
        connection.execute(pragma)
    return connection


def connect_postgresql(url: str) -> Any:
    """A PostgreSQL connection in autocommit mode; raises `psycopg.Error`."""
    # Imported here so that psycopg is needed only by deployments that use PostgreSQL.
    import psycopg  # noqa: PLC0415

    return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)


def shown_url(url: str) -> str:
    """The URL without its password, for messages and logs. Split by hand, not parsed: a
    password may hold `?` or `#`, and a malformed port must not make the message itself fail."""
    scheme, separator, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{separator}{credentials.split(':', 1)[0]}:***@{host}"
