"""Next-fire cost: naive croniter against the Kairos calendar, cold and over a midnight herd.

Run: `.venv/bin/python bench/bench_calendar.py [--herd 300000] [--sample 5000]`.

- croniter: one `croniter(expr, after_in_zone).get_next(datetime)` per call, as a ticker
  without a calendar engine would do it.
- kairos cold: every cache cleared before each call (first sight of an expression).
- kairos herd: `--herd` schedules sharing 50 (expression, zone) pairs, all asking for their next
  fire after the same instant (the midnight herd); total time divided by the herd size.
- kairos spread: the same schedules, each asking after a different instant (one second apart),
  so no answer is reused: the cost when schedules are not due together.
All figures come from the same run, so the ratios compare like with like.
"""

from __future__ import annotations

import argparse
import platform
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from croniter import croniter

from kairos.core.calendar import compile_cron, next_fire
from kairos.core.cron import parse_cron
from kairos.core.schedule import Schedule

EXPRESSIONS = (
    "0 0 * * *",
    "30 2 * * *",
    "*/5 * * * *",
    "0 * * * *",
    "15 9 * * 1-5",
    "0 0 1 * *",
    "0 */2 * * *",
    "45 23 * * 0",
    "0 6,18 * * *",
    "*/15 8-17 * * MON-FRI",
)
ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Australia/Sydney", "Asia/Kolkata")
AFTER = datetime(2027, 3, 14, 6, 0, tzinfo=UTC)


def herd(size: int) -> list[Schedule]:
    templates = [
        Schedule.model_validate({"id": "t", "cron": expr, "timezone": zone})
        for expr in EXPRESSIONS
        for zone in ZONES
    ]
    return [
        templates[i % len(templates)].model_copy(update={"id": f"job-{i}"}) for i in range(size)
    ]


def per_call_us(calls: int, run: Callable[[], None]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) / calls * 1e6


def croniter_calls(sample: list[Schedule]) -> None:
    for schedule in sample:
        croniter(schedule.cron, AFTER.astimezone(schedule.zone)).get_next(datetime)


def kairos_cold_calls(sample: list[Schedule]) -> None:
    for schedule in sample:
        compile_cron.cache_clear()
        parse_cron.cache_clear()
        next_fire(schedule, AFTER)


def kairos_herd_calls(schedules: list[Schedule]) -> None:
    for schedule in schedules:
        next_fire(schedule, AFTER)


def kairos_spread_calls(schedules: list[Schedule]) -> None:
    for offset, schedule in enumerate(schedules):
        next_fire(schedule, AFTER + timedelta(seconds=offset))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--herd", type=int, default=300_000)
    parser.add_argument("--sample", type=int, default=5_000)
    args = parser.parse_args()

    schedules = herd(args.herd)
    sample = random.Random(7).sample(schedules, min(args.sample, len(schedules)))
    pairs = len(EXPRESSIONS) * len(ZONES)

    naive = per_call_us(len(sample), lambda: croniter_calls(sample))
    cold = per_call_us(len(sample), lambda: kairos_cold_calls(sample))
    compile_cron.cache_clear()
    first_herd = per_call_us(len(schedules), lambda: kairos_herd_calls(schedules))
    second_herd = per_call_us(len(schedules), lambda: kairos_herd_calls(schedules))
    spread = per_call_us(len(schedules), lambda: kairos_spread_calls(schedules))

    print(f"python {platform.python_version()} on {platform.machine()}; after {AFTER.isoformat()}")
    print(
        f"herd {len(schedules):,} schedules over {pairs} (expression, zone) pairs; "
        f"sample {len(sample):,}"
    )
    print(f"croniter, per call:                 {naive:8.2f} µs")
    print(f"kairos cold (caches cleared), call: {cold:8.2f} µs   ({naive / cold:5.1f}× faster)")
    print(
        f"kairos herd, first pass, amortised: {first_herd:8.2f} µs   "
        f"({naive / first_herd:5.1f}× faster)"
    )
    print(
        f"kairos herd, warm pass, amortised:  {second_herd:8.2f} µs   "
        f"({naive / second_herd:5.1f}× faster)"
    )
    print(f"kairos spread instants, amortised:  {spread:8.2f} µs   ({naive / spread:5.1f}× faster)")
    print(f"herd total, first pass:             {first_herd * len(schedules) / 1e6:8.3f} s")


if __name__ == "__main__":
    main()
