"""Fixtures of this folder: PostgreSQL for the dedupe store tests (see tests/postgres.py)."""

from tests.postgres import postgres_cluster, postgres_url

__all__ = ["postgres_cluster", "postgres_url"]
