"""A throwaway PostgreSQL cluster on loopback for tests and benchmarks, no Docker.

`initdb` into a temporary directory, `pg_ctl start` on a free loopback port with the unix socket
in that directory, `pg_ctl stop` and removal of the directory at the end. The binaries are
Debian's (`apt-get install postgresql`: `/usr/lib/postgresql/<version>/bin`) or whatever `initdb`
is on PATH. PostgreSQL refuses to run as root, so as root the cluster runs as the `postgres`
user the package creates.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import psycopg

from kairos.core.errors import KairosError

_DEBIAN_BIN = Path("/usr/lib/postgresql")
_SERVICE_USER = "postgres"
_INSTALL_HINT = "install PostgreSQL (Debian: apt-get install -y postgresql)"


class LocalPostgresError(KairosError):
    """The cluster could not be created, started or stopped; the message says why."""


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
        raise LocalPostgresError(f"no initdb on PATH or under {_DEBIAN_BIN}: {_INSTALL_HINT}")
    return versions[-1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalPostgres:
    """One cluster in a temporary directory, run by the `postgres` user when we are root.

    `settings` are server parameters (`-c name=value`) on top of the defaults, e.g. durability
    traded for speed where the caller never crashes the server or the machine.
    """

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        self.bin_dir = postgres_bin_dir()
        self.settings = {"listen_addresses": "127.0.0.1", "max_connections": "300"}
        self.settings.update(settings or {})
        # Not under a private temporary directory of the caller (pytest's tmp_path is private
        # to root): the server process, as the postgres user, must reach its own directory.
        self.root = Path(tempfile.mkdtemp(prefix="kairos-pg-"))
        self.data_dir = self.root / "data"
        self.log_file = self.root / "server.log"
        self.port = _free_port()
        self._as_service_user = os.geteuid() == 0
        if self._as_service_user:
            try:
                account = pwd.getpwnam(_SERVICE_USER)
            except KeyError:
                raise LocalPostgresError(
                    f"running as root needs the {_SERVICE_USER!r} user: {_INSTALL_HINT}"
                ) from None
            os.chown(self.root, account.pw_uid, account.pw_gid)

    def __enter__(self) -> LocalPostgres:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, *args: str) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_service_user:
            command = ["runuser", "-u", _SERVICE_USER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            log = ""
            if self.log_file.exists():
                log = self.log_file.read_text(errors="replace")[-3000:]
            raise LocalPostgresError(
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
        options = [f"-p {self.port}", f"-k {self.root}"]
        options += [f"-c {name}={value}" for name, value in self.settings.items()]
        self._run(
            "pg_ctl",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-o",
            " ".join(options),
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

    def restart(self, mode: str = "fast") -> None:
        """`pg_ctl restart` with the options it was started with: `fast` rolls back open
        transactions and closes every connection; `immediate` is a crash (recovery on start)."""
        # -l as at the start: without it the server's output is the caller's pipe, which then
        # never closes (the restart's own wait hung until its timeout).
        self._run(
            "pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file),
            "-m", mode, "-w", "-t", "60", "restart",
        )  # fmt: skip

    def server_pid(self) -> int:
        """The postmaster's pid; its children are the server's other processes."""
        return int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "kairos") -> str:
        """A new empty database; returns its URL."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
