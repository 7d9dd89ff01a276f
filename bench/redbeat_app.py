"""The Celery app `celery beat` runs in the redbeat peer benchmark, configured from the environment.

Run by bench/peer_redbeat.py as `python -m celery -A bench.redbeat_app beat -S
redbeat.RedBeatScheduler`. Environment:

- `BENCH_REDIS_URL`: the broker and redbeat's store (one Redis, as most deployments have it).
- `BENCH_REDBEAT_LOCK_TIMEOUT`, `BENCH_BEAT_MAX_LOOP_INTERVAL`: seconds; unset keeps the
  redbeat/celery defaults (max loop interval 300 s, lock timeout 5 × that).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import Celery
from celery.signals import beat_init

FIRE_TASK = "bench.fire"
QUEUE = "celery"
"""Celery's default queue: the Redis list beat's messages are pushed onto."""
READY_MARKER = "bench: beat initialised, acquiring the redbeat lock"
ENTRY_KEY_PREFIX = "redbeat:"
"""redbeat's default key prefix, set explicitly so the benchmark writes where beat reads."""
SCHEDULE_KEY = ENTRY_KEY_PREFIX + ":schedule"
LOCK_KEY = ENTRY_KEY_PREFIX + ":lock"

# Optional so the benchmark can import the names above; beat is always started with it set.
REDIS_URL = os.environ.get("BENCH_REDIS_URL")

app = Celery("redbeat_bench")
app.conf.update(
    broker_url=REDIS_URL,
    redbeat_redis_url=REDIS_URL,
    redbeat_key_prefix=ENTRY_KEY_PREFIX,
    task_default_queue=QUEUE,
    # Otherwise beat installs a daily `celery.backend_cleanup` entry and the schedule would hold
    # N + 1 entries; results are never stored here anyway.
    result_expires=None,
)
if "BENCH_REDBEAT_LOCK_TIMEOUT" in os.environ:
    app.conf.redbeat_lock_timeout = float(os.environ["BENCH_REDBEAT_LOCK_TIMEOUT"])
if "BENCH_BEAT_MAX_LOOP_INTERVAL" in os.environ:
    app.conf.beat_max_loop_interval = float(os.environ["BENCH_BEAT_MAX_LOOP_INTERVAL"])


@app.task(name=FIRE_TASK)
def fire(entry_name: str) -> None:
    """Never executed: no worker runs, the benchmark only observes the message beat publishes."""


@beat_init.connect
def announce_start(sender: Any = None, **_: Any) -> None:
    # Connected before redbeat's own beat_init receiver (which blocks until it holds the lock),
    # so a standby beat can be told apart from one that has not started yet.
    logging.getLogger(__name__).warning(READY_MARKER)
