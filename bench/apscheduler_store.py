"""The APScheduler data store's tables in the benchmark (bench/peer_apscheduler.py): schedules
written in bulk as `add_schedule` would write them, waiting until they are handled, and the
tally of what fired from the `jobs` table and the observed notifications.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
from apscheduler import AsyncScheduler, Schedule
from apscheduler.abc import Trigger
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.serializers.pickle import PickleSerializer
from apscheduler.triggers.date import DateTrigger
from sqlalchemy.ext.asyncio import create_async_engine

from bench.apscheduler_node import TASK_ID, asyncpg_url, do_nothing
from bench.apscheduler_processes import Notice, Observer

LOAD_CHUNK = 5_000
SETTLE_S = 2.0
"""After the last occurrence is in the database, how long trailing notifications may take."""


def first_fire(schedule_id: str, trigger: Trigger) -> Schedule:
    """The schedule row `add_schedule` would write: the trigger advanced to its first fire."""
    first = trigger.next()
    assert first is not None, "the date and interval triggers here fire at least once"
    return Schedule(
        id=schedule_id, task_id=TASK_ID, trigger=trigger, job_executor="async", next_fire_time=first
    )


async def create_store(url: str) -> None:
    """Tables and the task, through APScheduler itself, before any scheduler process starts."""
    engine = create_async_engine(asyncpg_url(url))
    try:
        async with AsyncScheduler(SQLAlchemyDataStore(engine)) as scheduler:
            await scheduler.configure_task(TASK_ID, func=do_nothing)
    finally:
        await engine.dispose()


async def load(url: str, schedules: Iterable[Schedule]) -> float:
    """Bulk INSERT of the rows `add_schedule` writes one transaction at a time; seconds taken.

    The schedulers are not told: the caller wakes them once it is done.
    """
    started = time.monotonic()
    engine = create_async_engine(asyncpg_url(url))
    store = SQLAlchemyDataStore(engine)
    table = store.get_table_definitions().tables["schedules"]
    chunk: list[dict[str, Any]] = []
    try:
        async with engine.begin() as conn:
            for schedule in schedules:
                chunk.append(schedule.marshal(store.serializer))
                if len(chunk) == LOAD_CHUNK:
                    await conn.execute(table.insert(), chunk)
                    chunk = []
            if chunk:
                await conn.execute(table.insert(), chunk)
    finally:
        await engine.dispose()
    return time.monotonic() - started


async def move_herd(conn: asyncpg.Connection, n: int) -> datetime:
    """Every schedule's trigger and next fire time to one instant soon after the UPDATE ends,
    as `add_schedule` would have set them; returns that instant.

    The sleeping scheduler does not see the UPDATE, so an attempt that overran its instant is
    simply made again with more room.
    """
    room_s = 3 + n * 40e-6
    for _ in range(4):
        due = whole_ms(datetime.now(UTC) + timedelta(seconds=room_s))
        trigger = DateTrigger(due)
        trigger.next()
        # The data store's default serializer, the one the schedulers read the rows with.
        blob = PickleSerializer().serialize(trigger)
        await conn.execute("UPDATE schedules SET trigger = $1, next_fire_time = $2", blob, due)
        if datetime.now(UTC) < due - timedelta(seconds=0.5):
            return due
        room_s *= 2
    raise RuntimeError(f"moving {n} schedules to the herd instant kept overrunning it")


def whole_ms(at: datetime) -> datetime:
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


async def sleep_until(epoch_s: float) -> None:
    await asyncio.sleep(max(0.0, epoch_s - time.time()))


async def wait_until_handled(observer: Observer, last_due: datetime, deadline: float) -> bool:
    """Wait until no schedule still has a fire time at or before `last_due` (every occurrence
    up to it is committed or coalesced away), then for trailing notifications; False when
    `deadline` (epoch seconds) came first."""
    await sleep_until(last_due.timestamp())
    while time.time() < deadline:
        behind = await observer.conn.fetchval(
            "SELECT count(*) FROM schedules WHERE next_fire_time <= $1", last_due
        )
        if behind == 0:
            await asyncio.sleep(SETTLE_S)
            return True
        await asyncio.sleep(1.0)
    return False


Occurrence = tuple[str, datetime]


@dataclass
class Tally:
    """What the database and the notifications say about the expected occurrences."""

    fires: int = 0
    lost: int = 0
    pending: int = 0
    duplicated: int = 0
    observed_duplicates: int = 0
    unobserved_fires: int = 0
    lateness_ms: list[float] = field(default_factory=list)
    first_seen: dict[Occurrence, Notice] = field(default_factory=dict)
    occurrence_of: dict[UUID, Occurrence] = field(default_factory=dict)
    """Job id to occurrence, for the jobs of expected occurrences."""


async def tally(
    conn: asyncpg.Connection, expected: set[Occurrence], notices: list[Notice]
) -> Tally:
    jobs = {
        row["id"]: (row["schedule_id"], row["scheduled_fire_time"])
        for row in await conn.fetch("SELECT id, schedule_id, scheduled_fire_time FROM jobs")
    }
    next_fire = {
        row["id"]: row["next_fire_time"]
        for row in await conn.fetch("SELECT id, next_fire_time FROM schedules")
    }
    occurrence_of = {job: occurrence for job, occurrence in jobs.items() if occurrence in expected}
    durable = Counter(occurrence_of.values())
    result = Tally(
        duplicated=sum(count - 1 for count in durable.values()), occurrence_of=occurrence_of
    )
    for schedule_id, due in expected - durable.keys():
        moved_on = next_fire.get(schedule_id)
        if moved_on is None or moved_on > due:
            result.lost += 1
        else:
            result.pending += 1
    observed: Counter[Occurrence] = Counter()
    for notice in notices:
        occurrence = occurrence_of.get(notice.job_id)
        if occurrence is None:
            continue
        observed[occurrence] += 1
        if occurrence not in result.first_seen:
            result.first_seen[occurrence] = notice
            result.lateness_ms.append((notice.received - occurrence[1].timestamp()) * 1000)
    result.fires = len(observed)
    result.observed_duplicates = sum(count - 1 for count in observed.values())
    result.unobserved_fires = len(durable) - len(observed)
    return result
