"""Entries of bench/peer_redbeat.py written straight into redbeat's layout in Redis.

A hash per entry holds the JSON `definition` and `meta`, and the `redbeat::schedule` sorted set
scores each entry by its due time, as `RedBeatSchedulerEntry.save()` would leave them, in
pipelined batches instead of a round trip per entry.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import redis
from redbeat.decoder import RedBeatJSONEncoder

from bench.redbeat_app import ENTRY_KEY_PREFIX, FIRE_TASK, SCHEDULE_KEY

WRITE_BATCH = 2_000


def write_definitions(
    client: redis.Redis, names: Sequence[str], schedule_of: Callable[[int], Any]
) -> float:
    """Store each entry's definition as RedBeatSchedulerEntry.save() does; seconds it took."""
    started = time.monotonic()
    for first in range(0, len(names), WRITE_BATCH):
        with client.pipeline(transaction=False) as pipe:
            for index in range(first, min(len(names), first + WRITE_BATCH)):
                definition = {
                    "name": names[index],
                    "task": FIRE_TASK,
                    "args": [names[index]],
                    "kwargs": {},
                    "options": {},
                    "schedule": schedule_of(index),
                    "enabled": True,
                }
                pipe.hset(
                    ENTRY_KEY_PREFIX + names[index],
                    "definition",
                    json.dumps(definition, cls=RedBeatJSONEncoder),
                )
            pipe.execute()
    return time.monotonic() - started


def arm_entries(
    client: redis.Redis, names: Sequence[str], last_run_at: datetime, due_of: Callable[[int], float]
) -> None:
    """Give every entry its last run and put it in the schedule set at its first due second."""
    meta = json.dumps({"last_run_at": last_run_at}, cls=RedBeatJSONEncoder)
    for first in range(0, len(names), WRITE_BATCH):
        with client.pipeline(transaction=False) as pipe:
            for index in range(first, min(len(names), first + WRITE_BATCH)):
                key = ENTRY_KEY_PREFIX + names[index]
                pipe.hset(key, "meta", meta)
                # redbeat scores by whole seconds (calendar.timegm of the due instant).
                pipe.zadd(SCHEDULE_KEY, {key: math.floor(due_of(index))})
            pipe.execute()
