"""What a partition's first quota verdict costs: counting its teams' use from the store.

Run: `.venv/bin/python -m bench.bench_quota_count [--schedules 100000] [--teams 500]`.

One partition store holds N schedules as a ticker writes them (changelog bytes of real states,
owners spread over the teams, one in ten `every: 10s`). Timed in the same run, on the same store:
- baseline: iterating the store's definitions without decoding them (RocksDB's share);
- count: `PartitionUse`'s whole count (decode each definition, sum per owner), as a change a
  quota judges pays it when idle time has not counted its partition yet;
- states: decoding each into a full `ScheduleState`, as `OwnedPartition.state` would (what
  counting with the ticker's own decoded states would cost).
Printed: seconds and microseconds per schedule of each, and each one's ratio to the baseline.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kairos.core.firing import ScheduleState
from kairos.core.schedule import Schedule
from kairos.services.ticker.quotas import PartitionUse
from kairos.streams.state.changelog import StateWriteEncoder, state_from_stored
from kairos.streams.state.state_store import PartitionStore, StoreMemory
from kairos.streams.wire.codec import make_codecs

T0 = datetime(2027, 1, 1, tzinfo=UTC)
BATCH = 1_000


def fill(store: PartitionStore, schedules: int, teams: int) -> None:
    encoder = StateWriteEncoder(make_codecs())
    writes = []
    for n in range(schedules):
        trigger: dict[str, object] = (
            {"every": timedelta(seconds=10), "start_at": T0}
            if n % 10 == 0
            else {"cron": "0 3 * * *"}
        )
        schedule = Schedule(id=f"job-{n:07d}", owner=f"team-{n % teams:04d}", **trigger)
        state = ScheduleState(schedule, version=n, next_nominal=T0 + timedelta(seconds=n))
        writes.append(encoder.state_write(schedule.id, state, redefined=True))
        if len(writes) == BATCH:
            store.apply(writes, changelog_offset=n + 1)
            writes = []
    if writes:
        store.apply(writes, changelog_offset=schedules + 1)


def timed(step: Callable[[], object]) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--teams", type=int, default=500)
    args = parser.parse_args()
    codecs = make_codecs()
    with tempfile.TemporaryDirectory(prefix="kairos-quota-count-") as tmp:
        store = PartitionStore(Path(tmp), StoreMemory(64))
        fill(store, args.schedules, args.teams)
        results = {
            "baseline": timed(lambda: sum(1 for _ in store.definitions())),
            "count": timed(lambda: PartitionUse(0, store, codecs).of("team-0000")),
            "states": timed(
                lambda: [
                    state_from_stored(codecs, *stored, None)
                    for schedule_id in store.schedule_ids()
                    if (stored := store.get(schedule_id)) is not None
                ]
            ),
        }
        store.close()
    baseline = results["baseline"]
    print(f"{args.schedules} schedules of {args.teams} teams in one partition store")
    for name, seconds in results.items():
        per_us = seconds / args.schedules * 1e6
        print(f"{name:9s} {seconds:7.3f} s  {per_us:7.2f} us/schedule  {seconds / baseline:6.1f}x")


if __name__ == "__main__":
    main()
