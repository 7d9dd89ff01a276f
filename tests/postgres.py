"""PostgreSQL for the tests: one throwaway cluster per session (kairos.devinfra.postgres).

One fresh database per test; a cluster that cannot start fails the tests that need it.
The fixtures here are imported by `tests/local/conftest.py` and `tests/broker/conftest.py`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from typing import Any

import psycopg
import pytest

from kairos.devinfra.postgres import LocalPostgres

# The tests kill clients, never the server or the machine: skipping fsync loses nothing they
# check, and keeps each commit off the disk's latency.
_NO_DURABILITY = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def run_sql(store_url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """One statement on a dedupe store's database (SQLite or PostgreSQL URL), committed at once:
    what a team's own code or an operator does beside the executors."""
    if store_url.startswith("sqlite:///"):
        with closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as conn, conn:
            return list(conn.execute(sql, params).fetchall())
    with psycopg.connect(store_url) as pg:
        cursor = pg.execute(sql.replace("?", "%s"), params)
        return list(cursor.fetchall()) if cursor.description else []


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[LocalPostgres]:
    """The session's PostgreSQL cluster; an error (not a skip) when it cannot start."""
    with LocalPostgres(_NO_DURABILITY) as cluster:
        yield cluster


@pytest.fixture
def postgres_url(postgres_cluster: LocalPostgres) -> str:
    """A fresh database of the session's cluster."""
    return postgres_cluster.create_database()
