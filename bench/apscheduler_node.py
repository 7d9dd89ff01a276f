"""One APScheduler 4 scheduler process for bench/peer_apscheduler.py: schedules only, no worker.

Run: `python -m bench.apscheduler_node --url postgresql://… --name a [--lease-s 3]`.

It shares the SQLAlchemy data store and the asyncpg (LISTEN/NOTIFY) event broker on one
PostgreSQL database with its peers and the benchmark's observer. The broker's connection carries
`--name` as its `application_name`, so the observer can tell which process sent a notification.
Prints `ready` once its schedule processing loop runs; stops when killed.

Needs `sniffio`, which APScheduler 4.0.0a6's SQLAlchemy store imports without declaring it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from datetime import timedelta
from typing import Any

import sniffio
from apscheduler import AsyncScheduler, SchedulerRole
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker
from sqlalchemy.ext.asyncio import create_async_engine

TASK_ID = "bench-noop"


def do_nothing() -> None:
    """The task every benchmark schedule names; no worker ever runs it."""


def asyncpg_url(url: str) -> str:
    return url.replace("postgresql://", "postgresql+asyncpg://", 1)


def event_broker(url: str, application_name: str) -> AsyncpgEventBroker:
    return AsyncpgEventBroker(url, {"server_settings": {"application_name": application_name}})


async def run(url: str, name: str, lease_s: float | None) -> None:
    engine = create_async_engine(asyncpg_url(url))
    # Left out, lease_duration keeps APScheduler's default (the `default` config).
    tuning: dict[str, Any] = {}
    if lease_s is not None:
        tuning["lease_duration"] = timedelta(seconds=lease_s)
    scheduler = AsyncScheduler(
        SQLAlchemyDataStore(engine),
        event_broker(url, name),
        identity=name,
        role=SchedulerRole.scheduler,
        **tuning,
    )
    async with scheduler:
        await scheduler.start_in_background()
        print("ready", flush=True)
        await scheduler.wait_until_stopped()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="postgresql://… of the shared database")
    parser.add_argument("--name", required=True, help="scheduler identity")
    parser.add_argument("--lease-s", type=float, help="lease_duration; APScheduler's if unset")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # The asyncpg broker hands every notification to its task group from a plain event-loop
    # callback, where anyio ≥ 4.14 finds no async library through sniffio (which the SQLAlchemy
    # store needs) and drops the event: apscheduler issue #1141. The scheduler would then never
    # hear of schedules added by other processes. This process runs only asyncio, on this thread.
    sniffio.thread_local.name = "asyncio"
    asyncio.run(run(args.url, args.name, args.lease_s))


if __name__ == "__main__":
    main()
