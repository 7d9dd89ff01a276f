"""Fires prepared while transactions wait on the broker (services/ticker/preparer.py), on the
in-memory cluster with real RocksDB stores: a steady load with no idle time fires what was
prepared, each occurrence once."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from tests.fakes.ticker_world import World

SCHEDULES = 3_000


def _round_trip_on_every_flush(world: World) -> None:
    """Each flush waits 5 ms with the interpreter's lock released, as librdkafka's does."""

    def round_trip() -> None:
        time.sleep(0.005)
        world.kafka.before_next("flush", round_trip)

    world.kafka.before_next("flush", round_trip)


def test_a_steady_load_fires_what_was_prepared_while_waiting_each_occurrence_once(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, partitions=4)
    ids = [f"steady-{n:05d}" for n in range(SCHEDULES)]
    world.publish(*({"id": i, "cron": "* * * * *", "jitter": "PT1M"} for i in ids))
    # No idle time at all (a turn never waits 20 ms): only the wait preparer prepares.
    ticker, _ = world.ticker(max_wait_s=0.01)
    _round_trip_on_every_flush(world)
    ticker.connect()
    try:
        while sum(one.store.count for one in ticker.owned.values()) < SCHEDULES:
            ticker.turn()
        start = world.clock().replace(second=0, microsecond=0) + timedelta(minutes=2)
        samples = ticker.metrics.registry.get_sample_value
        counted: dict[str, float] = {}
        while world.clock() < start + timedelta(minutes=1):
            if world.clock() >= start and not counted:
                for name in ("kairos_ticker_fires_total", "kairos_ticker_decided_ahead_total"):
                    counted[name] = samples(name) or 0.0
            world.clock.now = world.clock() + timedelta(milliseconds=100)
            ticker.turn()
        fires = (samples("kairos_ticker_fires_total") or 0) - counted["kairos_ticker_fires_total"]
        ahead = (samples("kairos_ticker_decided_ahead_total") or 0) - counted[
            "kairos_ticker_decided_ahead_total"
        ]
    finally:
        ticker.disconnect()
    assert fires >= SCHEDULES * 0.9, "a minute of the steady load fired"
    assert ahead / fires > 0.8, f"only {ahead:.0f} of {fires:.0f} fires were prepared"
    fired = world.run_ids()
    assert set(fired.values()) == {1}, "an occurrence fired twice"
    minutes = {run["nominal_at"] for run in world.runs()}
    for nominal in sorted(minutes)[1:-1]:  # whole minutes: every schedule fired in each
        assert sum(1 for r in world.runs() if r["nominal_at"] == nominal) == SCHEDULES
