"""Fixtures of this folder: PostgreSQL (see tests/postgres.py) and a dedupe store of each kind,
so that every dedupe store test runs over SQLite and PostgreSQL."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from kairos.streams.dedupe import open_dedupe_store, sqlite_url
from kairos.streams.dedupe.base import DedupeStore
from tests.postgres import postgres_cluster, postgres_url

__all__ = ["postgres_cluster", "postgres_url", "store", "store_url"]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "dedupe.sqlite3")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def store(store_url: str) -> Iterator[DedupeStore]:
    opened = open_dedupe_store(store_url)
    yield opened
    opened.close()
