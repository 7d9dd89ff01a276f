"""The garbage collector inside a herd: the ticker's thresholds against Python's, in one run.

Run: `.venv/bin/python -m bench.bench_herd_collector [--size 150000]`.

An in-process ticker on the fake cluster (`tests/fakes/ticker_world.py`, a fake clock; no broker
noise) takes in N schedules `* * * * *` over 12 partitions, prepares the next minute in idle
time, then fires it as one herd. Twice, each on a world of its own: once with the collector as
the ticker sets it (`services/ticker/garbage.py`: no automatic full pass), once with Python's
default third threshold put back after the ticker started. `gc.callbacks` counts the full passes
inside the herd and the seconds they took. The fake cluster's producer costs more than
librdkafka's, so compare the two herds of one run, not these seconds with `bench_herd`'s.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from kairos.streams.kafka.topics import TopicRole
from tests.fakes.ticker_world import World

PYTHON_DEFAULT_FULL_THRESHOLD = 10
PUBLISH_BATCH = 5_000


class FullPasses:
    """Counts the collector's full passes and their seconds while installed."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.count += 1
            self.seconds += time.perf_counter() - self._started


def herd(size: int, *, automatic_full_passes: bool) -> tuple[float, FullPasses]:
    """Seconds to fire a herd of `size`, and the full passes inside it."""
    world = World(Path(tempfile.mkdtemp(prefix="kairos-herd-gc-")), partitions=12)
    ids = [f"herd-{n:07d}" for n in range(size)]
    for first in range(0, size, PUBLISH_BATCH):
        world.publish(*({"id": i, "cron": "* * * * *"} for i in ids[first : first + PUBLISH_BATCH]))
    ticker, _ = world.ticker()
    if automatic_full_passes:
        young, middle, _ = gc.get_threshold()
        gc.set_threshold(young, middle, PYTHON_DEFAULT_FULL_THRESHOLD)
    ticker.connect()
    try:
        while sum(one.store.count for one in ticker.owned.values()) < size:
            ticker.turn()
        herd_at = (world.clock() + timedelta(minutes=1)).replace(second=0, microsecond=0)
        world.clock.now = herd_at - timedelta(seconds=20)
        for _ in range(40):  # idle turns: the herd is prepared ahead, as on a real ticker
            ticker.turn()
        runs_topic = world.topic(TopicRole.RUNS)
        fired_before = len(world.kafka.visible(runs_topic))
        world.clock.now = herd_at
        passes = FullPasses()
        gc.callbacks.append(passes)
        started = time.perf_counter()
        try:
            while len(world.kafka.visible(runs_topic)) - fired_before < size:
                ticker.turn()
        finally:
            gc.callbacks.remove(passes)
        return time.perf_counter() - started, passes
    finally:
        ticker.disconnect()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=150_000)
    args = parser.parse_args()
    thresholds = gc.get_threshold()
    seconds = {}
    for automatic in (True, False):
        gc.set_threshold(*thresholds)
        spent, passes = herd(args.size, automatic_full_passes=automatic)
        label = "python's thresholds" if automatic else "the ticker's"
        seconds[automatic] = spent
        print(
            f"  N={args.size:,}  {label:<20} herd {spent:5.2f}s  "
            f"full passes {passes.count:3d} ({passes.seconds:.2f}s)"
        )
    print(f"  N={args.size:,}  python's/ticker's herd seconds {seconds[True] / seconds[False]:.2f}")


if __name__ == "__main__":
    main()
