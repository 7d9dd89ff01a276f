"""The executors' dedupe store: interface and rules in `base`, SQLite and PostgreSQL stores."""

from __future__ import annotations

from pathlib import Path

from kairos.streams.dedupe.base import DedupeStore, DedupeStoreError

SQLITE_SCHEME = "sqlite:///"


def sqlite_url(path: Path) -> str:
    return f"{SQLITE_SCHEME}{path.resolve()}"


def open_dedupe_store(url: str) -> DedupeStore:
    """The store at `url`: `sqlite:////abs/path.sqlite3` or `postgresql://user@host:port/db`."""
    if url.startswith(SQLITE_SCHEME):
        from kairos.streams.dedupe.sqlite import SqliteDedupeStore  # noqa: PLC0415

        return SqliteDedupeStore(Path(url[len(SQLITE_SCHEME) :]))
    if url.startswith(("postgresql://", "postgres://")):
        # Imported here so that psycopg is needed only by deployments that use PostgreSQL.
        from kairos.streams.dedupe.postgres import PostgresDedupeStore  # noqa: PLC0415

        return PostgresDedupeStore(url)
    raise DedupeStoreError(
        url.rsplit("@", maxsplit=1)[-1],
        "unsupported URL; use sqlite:////absolute/path.sqlite3 or postgresql://user@host:5432/db",
    )
