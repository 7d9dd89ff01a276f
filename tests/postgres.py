"""A throwaway PostgreSQL cluster for the tests, started like the Kafka broker: no Docker.

`initdb` into a temporary directory, `pg_ctl start` on a free loopback port with the unix socket
in that directory, one fresh database per test, `pg_ctl stop` and removal at session end. The
binaries are Debian's (`apt-get install postgresql`: `/usr/lib/postgresql/<version>/bin`) or
whatever `initdb` is on PATH. PostgreSQL refuses to run as root, so as root the cluster runs as
the `postgres` user the package creates. A cluster that cannot start fails the tests that need it.

The fixtures here are imported by `tests/local/conftest.py` and `tests/broker/conftest.py`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.helpers import unique_name

_DEBIAN_BIN = Path("/usr/lib/postgresql")
_SERVICE_USER = "postgres"
_INSTALL_HINT = "install PostgreSQL (Debian: apt-get install -y postgresql)"


def run_sql(store_url: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """One statement on a dedupe store's database (SQLite or PostgreSQL URL), committed at once:
    what a team's own code or an operator does beside the executors."""
    if store_url.startswith("sqlite:///"):
        with closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as conn, conn:
            return list(conn.execute(sql, params).fetchall())
    with psycopg.connect(store_url) as pg:
        cursor = pg.execute(sql.replace("?", "%s"), params)
        return list(cursor.fetchall()) if cursor.description else []


class PostgresUnavailableError(RuntimeError):
    """The test cluster could not be created or started; the message says why."""


def postgres_bin_dir() -> Path:
    """The directory of `initdb` and `pg_ctl`: PATH first, then Debian's newest version."""
    on_path = shutil.which("initdb")
    if on_path is not None:
        return Path(on_path).resolve().parent
    versions = sorted(
        (p for p in _DEBIAN_BIN.glob("*/bin") if (p / "initdb").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if not versions:
        raise PostgresUnavailableError(f"no initdb on PATH or under {_DEBIAN_BIN}: {_INSTALL_HINT}")
    return versions[-1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PostgresCluster:
    """One cluster in a temporary directory, run by the `postgres` user when we are root."""

    def __init__(self) -> None:
        self.bin_dir = postgres_bin_dir()
        # Not under pytest's tmp_path: its parents are private to root, and the server
        # process (as the postgres user) must reach its own directory.
        self.root = Path(tempfile.mkdtemp(prefix="kairos-pg-"))
        self.data_dir = self.root / "data"
        self.log_file = self.root / "server.log"
        self.port = _free_port()
        self._as_service_user = os.geteuid() == 0
        if self._as_service_user:
            try:
                account = pwd.getpwnam(_SERVICE_USER)
            except KeyError:
                raise PostgresUnavailableError(
                    f"running as root needs the {_SERVICE_USER!r} user: {_INSTALL_HINT}"
                ) from None
            os.chown(self.root, account.pw_uid, account.pw_gid)

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_service_user:
            command = ["runuser", "-u", _SERVICE_USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            log = ""
            if self.log_file.exists():
                log = self.log_file.read_text(errors="replace")[-3000:]
            raise PostgresUnavailableError(
                f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}{done.stderr}\n{log}"
            )

    def start(self) -> None:
        self._run(
            "initdb",
            "-D",
            str(self.data_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-instructions",
        )
        server_options = " ".join(
            [
                f"-p {self.port}",
                f"-k {self.root}",
                "-c listen_addresses=127.0.0.1",
                "-c max_connections=300",
                # The tests kill clients, never the server or the machine: skipping fsync loses
                # nothing they check, and keeps each commit off the disk's latency.
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
            ]
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-o",
            server_options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        try:
            if (self.data_dir / "postmaster.pid").exists():
                self._run(
                    "pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "-t", "60", "stop"
                )
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        name = unique_name("kairos").replace("-", "_")
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """The session's PostgreSQL cluster; an error (not a skip) when it cannot start."""
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> str:
    """A fresh database of the session's cluster."""
    return postgres_cluster.create_database()
