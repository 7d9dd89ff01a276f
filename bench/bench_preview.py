"""`kairos preview --histogram` at scale: counting alone, then end to end on published schedules.

Run: `.venv/bin/python bench/bench_preview.py [--size 100000] [--bootstrap HOST:PORT]`.

- count: `count_fires` over 24 h for `--size` schedules of each selection below (built in memory,
  so only the counting is timed).
- published (with `--bootstrap`): the herd selection is published to a fresh deployment on that
  broker with the real `SchedulesClient`, then `kairos preview --owner team --histogram` runs as
  a process: reading the topic, validating every definition, counting, printing.
"""

from __future__ import annotations

import argparse
import platform
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from bench.common import deployment, publish
from kairos.core.preview_histogram import HistogramTooLargeError, count_fires
from kairos.core.schedule import Schedule

START = datetime(2027, 3, 14, tzinfo=UTC)
ZONES = ("UTC", "America/New_York", "Europe/Paris", "Asia/Tokyo")


def midnight_herd(n: int) -> Schedule:
    return Schedule(id=f"team.job-{n:07d}", cron="0 0 * * *", jitter="10m", owner="team")


def selections(rng: random.Random) -> dict[str, Callable[[int], Schedule]]:
    return {
        "'0 0 * * *', no jitter": lambda n: Schedule(id=f"s{n}", cron="0 0 * * *"),
        "'0 0 * * *', jitter 10m": midnight_herd,
        "'M H * * *' random, 4 zones": lambda n: Schedule(
            id=f"s{n}",
            cron=f"{rng.randrange(60)} {rng.randrange(24)} * * *",
            timezone=rng.choice(ZONES),
        ),
        "'*/5 * * * *', no jitter": lambda n: Schedule(id=f"s{n}", cron="*/5 * * * *"),
        "'0 * * * *', jitter 5m": lambda n: Schedule(id=f"s{n}", cron="0 * * * *", jitter="5m"),
        "every 1h, 1000 start_at, jitter 1m": lambda n: Schedule(
            id=f"s{n}",
            every="1h",
            start_at=START - timedelta(seconds=n % 1000),
            jitter="1m",
        ),
    }


def time_counting(size: int) -> None:
    for name, make in selections(random.Random(16)).items():
        schedules = [make(n) for n in range(size)]
        started = time.perf_counter()
        try:
            counted = count_fires(schedules, START, START + timedelta(hours=24))
            outcome = f"{counted.total:>10,} fires"
        except HistogramTooLargeError:
            outcome = "refused (over the budget)"
        print(f"count {size:,} x {name:<36} {time.perf_counter() - started:7.2f} s  {outcome}")


def time_published(size: int, bootstrap: str) -> None:
    settings = deployment(bootstrap, f"bench-preview-{uuid.uuid4().hex[:8]}.")
    published_s = publish(settings, (midnight_herd(n) for n in range(size)))
    print(f"published {size:,} schedules in {published_s:.1f} s")
    command = [
        sys.executable, "-m", "kairos.cli",
        "--bootstrap-servers", bootstrap, "--topic-prefix", settings.topic_prefix,
        "preview", "--owner", "team", "--histogram", "--from", START.isoformat(), "--top", "3",
    ]  # fmt: skip
    started = time.perf_counter()
    shown = subprocess.run(command, capture_output=True, text=True, check=True, timeout=1800)
    elapsed = time.perf_counter() - started
    print(f"kairos preview --owner team --histogram: {elapsed:.1f} s end to end")
    print(shown.stdout.rstrip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--bootstrap", help="a broker to publish to; else counting only")
    arguments = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.processor() or platform.machine()}")
    time_counting(arguments.size)
    if arguments.bootstrap:
        time_published(arguments.size, arguments.bootstrap)


if __name__ == "__main__":
    main()
