"""The observer and the scheduler processes of bench/peer_apscheduler.py.

The observer LISTENs on the event broker's channel for `JobAdded`, the fire signal, and can
SIGKILL the scheduler that sends the next one; each scheduler is a bench/apscheduler_node.py
process.
"""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
from apscheduler import JobAdded, ScheduleUpdated
from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker
from apscheduler.serializers.json import JSONSerializer

from bench.apscheduler_node import TASK_ID

CHANNEL = "apscheduler"
"""AsyncpgEventBroker's default NOTIFY channel."""
NODE_START_TIMEOUT_S = 60.0
KILL_WAIT_S = 30.0


@dataclass(frozen=True)
class Notice:
    """One `JobAdded` notification as the observer received it."""

    received: float
    sender_pid: int
    job_id: UUID


class Observer:
    """LISTENs on the broker's channel; keeps `JobAdded` payloads raw until the run is over, so
    that recording a notification costs next to nothing while the schedulers are measured."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self._raw: list[tuple[float, int, str]] = []
        self._kill_targets: dict[int, int] = {}
        self._killed: asyncio.Future[tuple[int, float]] | None = None

    @classmethod
    @asynccontextmanager
    async def listening(cls, url: str) -> AsyncIterator[Observer]:
        conn = await asyncpg.connect(url)
        observer = cls(conn)
        try:
            await conn.add_listener(CHANNEL, observer._on_notification)
            yield observer
        finally:
            await conn.close()

    def _on_notification(self, _conn: Any, pid: int, _channel: str, payload: str) -> None:
        if not payload.startswith("JobAdded "):
            return
        received = time.time()
        self._raw.append((received, pid, payload))
        target = self._kill_targets.pop(pid, None)
        if target is not None and self._killed is not None:
            # Here rather than after a hop through the event loop: the sender has just
            # committed a job and is the likeliest to be in the middle of its batch.
            os.kill(target, signal.SIGKILL)
            self._kill_targets.clear()
            self._killed.set_result((pid, time.time()))

    async def kill_next_sender(self, processes: dict[int, int]) -> tuple[int, float]:
        """SIGKILL the process that sends the next `JobAdded`; `processes` maps the backend pid
        of each one's broker connection to its own pid. Returns that backend pid and when."""
        self._killed = asyncio.get_running_loop().create_future()
        self._kill_targets = dict(processes)
        try:
            return await asyncio.wait_for(self._killed, KILL_WAIT_S)
        finally:
            self._kill_targets.clear()

    def notices(self) -> list[Notice]:
        serializer = JSONSerializer()
        decoded = []
        for received, pid, payload in self._raw:
            body = base64.b64decode(payload.split(" ", 1)[1])
            event = JobAdded.unmarshal(serializer.deserialize(body))
            assert isinstance(event, JobAdded)
            decoded.append(Notice(received, pid, event.job_id))
        return decoded

    async def wake_schedulers(self, first_fire: datetime) -> None:
        """What `add_schedule` publishes: a sleeping scheduler re-reads the next fire time."""
        event = ScheduleUpdated(schedule_id="wakeup", task_id=TASK_ID, next_fire_time=first_fire)
        payload = AsyncpgEventBroker(dsn="").generate_notification_str(event)
        await self.conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)

    async def backend_pids(self, names: Iterable[str]) -> dict[int, str]:
        rows = await self.conn.fetch(
            "SELECT pid, application_name FROM pg_stat_activity"
            " WHERE application_name = ANY($1::text[])",
            list(names),
        )
        return {row["pid"]: row["application_name"] for row in rows}


@dataclass
class Node:
    name: str
    process: asyncio.subprocess.Process

    @property
    def pid(self) -> int:
        return self.process.pid


@asynccontextmanager
async def scheduler_nodes(
    url: str, names: Sequence[str], lease_s: float | None, workdir: Path
) -> AsyncIterator[list[Node]]:
    nodes: list[Node] = []
    try:
        for name in names:
            command = [sys.executable, "-m", "bench.apscheduler_node", "--url", url]
            command += ["--name", name]
            if lease_s is not None:
                command += ["--lease-s", str(lease_s)]
            log_path = workdir / f"node-{name}.log"
            with log_path.open("ab") as log:
                process = await asyncio.create_subprocess_exec(
                    *command, stdout=asyncio.subprocess.PIPE, stderr=log
                )
            nodes.append(Node(name, process))
            assert process.stdout is not None
            line = await asyncio.wait_for(process.stdout.readline(), NODE_START_TIMEOUT_S)
            if line.strip() != b"ready":
                log_tail = log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"scheduler {name} did not start:\n{log_tail}")
        yield nodes
    finally:
        for node in nodes:
            if node.process.returncode is None:
                # The failover's SIGKILL may not have been reaped yet.
                with suppress(ProcessLookupError):
                    node.process.terminate()
        for node in nodes:
            await node.process.wait()
