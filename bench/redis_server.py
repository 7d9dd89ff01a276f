"""A throwaway redis-server on a free loopback port, for the Redis-backed peer benchmarks.

Persistence is off (no RDB snapshots, no AOF): no scenario restarts Redis, so nothing would
ever be read back, and with Redis's default save rules (a snapshot after 10,000 writes in 60 s)
every large run would fork a background save of a multi-hundred-MB dataset at an arbitrary
moment, and the copy-on-write stall would show up as scheduler lateness that is really the
snapshot's. Kafka under Kairos does not fsync per write either (it relies on the page cache and
replication), so an in-memory Redis is the comparable hand-off.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.common import free_port

INSTALL_HINT = "apt-get install -y redis-server"


@dataclass(frozen=True)
class RedisServer:
    port: int
    pid: int
    log: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port)


def redis_server_binary() -> str:
    binary = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )
    if binary is None:
        raise SystemExit(f"redis-server is not installed; install it with `{INSTALL_HINT}`")
    return binary


@contextmanager
def redis_server(startup_timeout_s: float = 10.0) -> Iterator[RedisServer]:
    """Run a redis-server for the duration of the block; its files go in a temporary dir."""
    binary = redis_server_binary()
    with tempfile.TemporaryDirectory(prefix="kairos-bench-redis-") as tmp:
        workdir = Path(tmp)
        log = workdir / "redis.log"
        port = free_port()
        process = subprocess.Popen(
            [
                binary,
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--dir", str(workdir),
                "--save", "",
                "--appendonly", "no",
                "--logfile", str(log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        server = RedisServer(port=port, pid=process.pid, log=log)
        try:
            _wait_until_answering(server, process, startup_timeout_s)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_until_answering(
    server: RedisServer, process: subprocess.Popen[bytes], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    client = server.client()
    try:
        while True:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                log = server.log.read_text(errors="replace") if server.log.exists() else ""
                raise RuntimeError(f"redis-server did not start on port {server.port}:\n{log}")
            time.sleep(0.05)
    finally:
        client.close()
