"""The `celery beat` processes of bench/peer_redbeat.py, and the settings each config gives them.

Each is a real `celery -A bench.redbeat_app beat -S redbeat.RedBeatScheduler` subprocess with
its log in a file; the first one started holds the redbeat lock, the others wait on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from celery.beat import DEFAULT_MAX_INTERVAL

from bench.redbeat_app import LOCK_KEY, READY_MARKER
from bench.redis_server import RedisServer

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class BeatConfig:
    name: str
    lock_timeout_s: float | None
    max_loop_interval_s: float | None

    def environment(self, redis_url: str) -> dict[str, str]:
        env = {**os.environ, "BENCH_REDIS_URL": redis_url}
        if self.lock_timeout_s is not None:
            env["BENCH_REDBEAT_LOCK_TIMEOUT"] = str(self.lock_timeout_s)
        if self.max_loop_interval_s is not None:
            env["BENCH_BEAT_MAX_LOOP_INTERVAL"] = str(self.max_loop_interval_s)
        return env

    def effective(self) -> dict[str, float]:
        """The values beat ends up with, resolved the way celery.beat and redbeat resolve them."""
        loop = self.max_loop_interval_s or DEFAULT_MAX_INTERVAL
        return {"max_loop_interval_s": loop, "lock_timeout_s": self.lock_timeout_s or 5 * loop}


@dataclass
class Beat:
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def failure(self) -> str | None:
        """Why beat exited on its own (celery logs it CRITICAL), or None while it runs."""
        if self.process.poll() is None:
            return None
        lines = self.log.read_text(errors="replace").splitlines()
        critical = [line for line in lines if "CRITICAL" in line]
        return (critical or lines[-1:] or [f"exit code {self.process.returncode}"])[0]

    def wait_for_log(self, marker: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while marker not in self.log.read_text(errors="replace"):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"beat {self.pid} never logged {marker!r}:\n{self.log_tail()}")
            time.sleep(0.1)

    def wait_for_lock(self, client: redis.Redis, timeout_s: float) -> None:
        self.wait_for_log(READY_MARKER, timeout_s)
        deadline = time.monotonic() + timeout_s
        while not client.exists(LOCK_KEY):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"beat {self.pid} never took the lock:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def beats(
    server: RedisServer, config: BeatConfig, workdir: Path, count: int
) -> Iterator[list[Beat]]:
    """Start `count` beats one after another: the first holds the lock, the rest wait on it."""
    started: list[Beat] = []
    client = server.client()
    try:
        for index in range(count):
            log = workdir / f"beat-{config.name}-{index}.log"
            with log.open("ab") as out:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "bench.redbeat_app",
                        "beat",
                        "-S",
                        "redbeat.RedBeatScheduler",
                    ],
                    cwd=REPO_ROOT,
                    env=config.environment(server.url),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            beat = Beat(process, log)
            started.append(beat)
            if index == 0:
                beat.wait_for_lock(client, timeout_s=60)
            else:
                beat.wait_for_log(READY_MARKER, timeout_s=60)
        yield started
    finally:
        client.close()
        for beat in started:
            beat.stop()
