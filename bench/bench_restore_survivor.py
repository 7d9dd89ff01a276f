"""A survivor's own fires while it cold-restores a large partition it takes over.

Run: `.venv/bin/python -m bench.bench_restore_survivor [--size 300000] [--json out.json]`
(`--ticker-code DIR`: run the tickers from another checkout, for a before/after).

On a local broker this script starts and stops itself:

1. Two tickers share the 12 partitions. `--size` schedules that never fire in the run (yearly)
   are published onto one partition the *leaver* owns; `--own` every-second schedules onto the
   partitions the *survivor* owns.
2. Baseline: the survivor's fires for `--window` seconds, every other partition quiet.
3. The leaver stops (SIGTERM, leaving the group): the survivor takes its partitions over and
   restores the large one cold (its state directory never held it), while its own schedules keep
   falling due each second.

Lateness is the runs observer's sighting (read_committed) minus the occurrence's due instant.
The ratio is the restore window's p99 over the baseline's, both measured in this run.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import (
    PARTITIONS,
    RunsObserver,
    TickerProcess,
    deployment,
    local_broker,
    publish,
    start_ticker,
    tally,
    wait_for,
    wait_until_held,
)
from bench.outcome import Outcome, write_outcomes
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings

_ASSIGNED = r"handover event=assigned instance={} partition=(\d+) .*seconds=([\d.]+)"
_HANDOVER = r"handover event=(assigned|revoked|lost) instance={} partition=(\d+)"


def owned_by(ticker: TickerProcess) -> set[int]:
    """The partitions `ticker` owns now, by its handover log lines in order."""
    owned: set[int] = set()
    log = ticker.log.read_text(errors="replace")
    for event, partition in re.findall(_HANDOVER.format(ticker.instance), log):
        if event == "assigned":
            owned.add(int(partition))
        else:
            owned.discard(int(partition))
    return owned


def ids_on(partitions: set[int], prefix: str, count: int) -> Iterator[str]:
    """`count` schedule ids that land on `partitions`."""
    n = made = 0
    while made < count:
        candidate = f"{prefix}-{n:07d}"
        n += 1
        if partition_for(candidate, PARTITIONS) in partitions:
            made += 1
            yield candidate


def expected_runs(ids: list[str], start: datetime, first: float, last: float) -> set[str]:
    """Run ids of every-second schedules `ids` (from `start`) due in [first, last)."""
    nominals = []
    instant = start
    while instant.timestamp() < last:
        if instant.timestamp() >= first:
            nominals.append(instant)
        instant += timedelta(seconds=1)
    return {run_id(i, n) for n in nominals for i in ids}


def measure(bootstrap: str, size: int, own: int, window_s: float, workdir: Path) -> Outcome:
    settings = deployment(bootstrap, f"survivor{size}.")
    survivor, leaver = (
        start_ticker(settings, name, workdir / name, workdir / f"{name}.log")
        for name in ("survivor", "leaver")
    )
    try:
        wait_until_held([survivor, leaver], 0)
        big = min(owned_by(leaver))
        publish(settings, (Schedule(id=i, cron="0 0 1 1 *") for i in ids_on({big}, "big", size)))
        own_ids = list(ids_on(owned_by(survivor), "own", own))
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=30)
        publish(
            settings, (Schedule(id=i, every=timedelta(seconds=1), start_at=start) for i in own_ids)
        )
        wait_until_held([survivor, leaver], size + own)
        scene = Scene(settings, survivor, leaver, big, own_ids, start)
        return _observe(scene, window_s, size)
    finally:
        survivor.stop()
        leaver.stop()


@dataclass(frozen=True)
class Scene:
    settings: KafkaSettings
    survivor: TickerProcess
    leaver: TickerProcess
    big: int
    """The leaver's partition holding the large state."""
    own_ids: list[str]
    start: datetime
    """The first occurrence of the survivor's every-second schedules."""


def _observe(scene: Scene, window_s: float, size: int) -> Outcome:
    settings, survivor, leaver, big = scene.settings, scene.survivor, scene.leaver, scene.big
    own_ids, start = scene.own_ids, scene.start
    observer_from = max(time.time(), start.timestamp()) + 2
    observer = RunsObserver(settings, keep_from=observer_from)
    time.sleep(max(0.0, observer_from - time.time()) + window_s)
    baseline = (observer_from + 1, time.time())
    # Only what the survivor logs from here on: it owned every partition before the leaver came.
    log_from = survivor.log.stat().st_size
    leaver.stop()
    pattern = re.compile(_ASSIGNED.format(survivor.instance).replace(r"(\d+)", str(big)))
    found: list[float] = []

    def restored() -> bool:
        with survivor.log.open("rb") as log:
            log.seek(log_from)
            match = pattern.search(log.read().decode(errors="replace"))
        if match:
            found.append(float(match[1]))
        return bool(match)

    wait_for(restored, 600, f"the survivor to restore partition {big}")
    done_at = time.time()
    restore = (done_at - found[0], done_at)
    time.sleep(5)
    observer.stop()
    seen = observer.observations()
    during = tally(seen, expected_runs(own_ids, start, *restore))
    steady = tally(seen, expected_runs(own_ids, start, *baseline))
    ratio = during.lateness_ms.get("p99", 0) / max(1.0, steady.lateness_ms.get("p99", 0))
    return Outcome(
        system="kairos",
        scenario="restore-survivor",
        n=size,
        config="default",
        fires=during.fires,
        expected=during.fires + during.lost,
        lost=during.lost,
        duplicated=during.duplicated,
        seconds=found[0],
        lateness_ms=during.lateness_ms,
        extra={"baseline_lateness_ms": steady.lateness_ms, "p99_ratio": ratio},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=300_000)
    parser.add_argument(
        "--own", type=int, default=200, help="the survivor's every-second schedules"
    )
    parser.add_argument("--window", type=float, default=20.0, help="baseline seconds")
    parser.add_argument("--ticker-code", type=Path, help="a checkout whose tickers to run")
    parser.add_argument("--json", type=Path, help="write the Outcome row here")
    args = parser.parse_args()
    if args.ticker_code is not None:
        # The ticker processes (`python -m`, which puts their working directory first on the
        # path) import `kairos` from there; this script keeps what it imported.
        os.environ["PYTHONPATH"] = str(args.ticker_code.resolve())
        os.chdir(args.ticker_code)
    with (
        tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None
        outcome = measure(broker.bootstrap_servers, args.size, args.own, args.window, Path(tmp))
    base = outcome.extra["baseline_lateness_ms"]
    late = outcome.lateness_ms
    print(
        f"  N={args.size:,}: cold restore {outcome.seconds:.2f}s; the survivor's own fires "
        f"during it p50 {late.get('p50', 0):.0f} ms p99 {late.get('p99', 0):.0f} ms max "
        f"{late.get('max', 0):.0f} ms (baseline p50 {base.get('p50', 0):.0f} p99 "
        f"{base.get('p99', 0):.0f} max {base.get('max', 0):.0f}); p99 ratio "
        f"{outcome.extra['p99_ratio']:.2f}; {outcome.fires} fires, {outcome.lost} lost, "
        f"{outcome.duplicated} duplicated"
    )
    if args.json:
        write_outcomes(args.json, [outcome])


if __name__ == "__main__":
    main()
