"""Failover: two tickers under steady load, one SIGKILLed; how long its schedules go unfired.

Run: `.venv/bin/python -m bench.bench_failover [--size 10000] [--window 120]
[--json bench/results/failover.json]`.

For each config (`tuned`: `--session-timeout-ms 3000`, as the failover tests use; `default`:
the product's 10 s), on a local broker this script starts and stops itself:

1. N steady schedules (as in bench_steady: every minute, spread over it by a one-minute jitter)
   are published; two ticker processes share the partitions; an observer reads the runs topic
   read_committed and stamps each `RunRequested` when it sees it.
2. The window starts at the first minute boundary at least `--warmup` seconds after the group
   settled (see bench_steady for why). `--kill-after` seconds into it, ticker A gets a real
   SIGKILL: no transaction finished, no goodbye to the group.
3. Measured from the observations:
   - A's partitions: the schedules partitions of the runs A fired before the kill (each record
     carries its schedules partition and the ticker that fired it).
   - gap_s: from the kill to the first run of one of A's partitions fired by the survivor.
   - lateness: of A's occurrences the survivor fired that were due by then (they waited for
     the takeover); the survivor's own occurrences due in the same interval are in `extra`.
   - lost and duplicated over every occurrence of the window's whole minutes.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    Observation,
    Restore,
    RunsObserver,
    Tally,
    TickerProcess,
    deployment,
    local_broker,
    minute_after,
    publish,
    restores,
    run_ids,
    sleep_until,
    start_ticker,
    steady_ids,
    steady_schedules,
    tally,
    wait_until_held,
)
from bench.outcome import Outcome, percentiles, process_tree_cpu_s, write_outcomes
from kairos.streams.kafka.settings import KafkaSettings

SESSION_TIMEOUTS_MS = {"tuned": 3_000, "default": 10_000}


@dataclass(frozen=True)
class Takeover:
    killed_partitions: set[int]
    gap_s: float
    waited_ms: dict[str, float]
    """Lateness of the killed ticker's occurrences the survivor fired, due by the takeover."""
    survivor_ms: dict[str, float]
    """Lateness of the survivor's own occurrences due between the kill and the takeover."""
    survivor_fired_ms: dict[str, float]
    """The same occurrences' fired_at − due: far below `survivor_ms` means they were fired on
    time but became visible late (a read_committed reader waits for any transaction still open
    on the runs partition, such as the killed ticker's, until the broker aborts it)."""


def takeover(observations: list[Observation], killed: str, killed_at: float) -> Takeover:
    owned = {o.schedules_partition for o in observations if o.ticker == killed}
    taken = [o for o in observations if o.schedules_partition in owned and o.ticker != killed]
    if not owned or not taken:
        raise RuntimeError(f"no partition of {killed} was seen fired by the survivor")
    first = min(o.seen_at for o in taken)
    first_sightings: dict[str, Observation] = {}
    for o in observations:
        first_sightings.setdefault(o.run_id, o)
    survivors = [
        o
        for o in first_sightings.values()
        if o.schedules_partition not in owned and killed_at <= o.due_at <= first
    ]
    return Takeover(
        killed_partitions=owned,
        gap_s=first - killed_at,
        waited_ms=percentiles(
            [
                (o.seen_at - o.due_at) * 1000
                for o in first_sightings.values()
                if o.schedules_partition in owned and o.ticker != killed and o.due_at <= first
            ]
        ),
        survivor_ms=percentiles([(o.seen_at - o.due_at) * 1000 for o in survivors]),
        survivor_fired_ms=percentiles([(o.fired_at - o.due_at) * 1000 for o in survivors]),
    )


def _start_pair(
    settings: KafkaSettings, config: str, workdir: Path, session_ms: int
) -> tuple[TickerProcess, TickerProcess]:
    """The ticker to kill and its survivor."""
    victim, survivor = (
        start_ticker(
            settings,
            f"{config}-{name}",
            workdir / f"state-{config}-{name}",
            workdir / f"ticker-{config}-{name}.log",
            session_timeout_ms=session_ms,
        )
        for name in ("a", "b")
    )
    return victim, survivor


def measure(
    bootstrap: str, broker_pid: int, config: str, args: argparse.Namespace, workdir: Path
) -> Outcome:
    settings = deployment(bootstrap, f"failover-{config}.")
    ids = steady_ids(args.size)
    publish_s = publish(settings, steady_schedules(ids))
    session_ms = SESSION_TIMEOUTS_MS[config]
    victim, survivor = _start_pair(settings, config, workdir, session_ms)
    try:
        wait_until_held([victim, survivor], args.size)
        start = minute_after(datetime.now(UTC) + timedelta(seconds=args.warmup))
        end = start + timedelta(seconds=args.window)
        observer = RunsObserver(settings, keep_from=start.timestamp())
        try:
            published = f"  {config}: published {args.size:,} in {publish_s:.1f}s"
            window = f"{start:%H:%M:%S}–{end:%H:%M:%S}Z, SIGKILL at +{args.kill_after}s"
            print(f"{published}; window {window}", flush=True)
            expected = run_ids(ids, start, args.window // 60)
            sleep_until(start)
            before = victim.cpu_s() + survivor.cpu_s(), process_tree_cpu_s(broker_pid)
            sleep_until(start + timedelta(seconds=args.kill_after))
            victim_cpu = victim.cpu_s()
            survivor_log_at = survivor.log.stat().st_size
            killed_at = time.time()
            victim.kill()
            sleep_until(end)
            ticker_cpu = victim_cpu + survivor.cpu_s() - before[0]
            broker_cpu = process_tree_cpu_s(broker_pid) - before[1]
            unseen = observer.wait_for(expected, time.monotonic() + args.drain)
        finally:
            observer.stop()
        with survivor.log.open(errors="replace") as log:
            log.seek(survivor_log_at)
            taken_over = restores(log.read())
    finally:
        victim.stop()
        survivor.stop()
    taken = takeover(observations := observer.observations(), victim.instance, killed_at)
    seen = tally(observations, expected)
    extra = {
        "session_timeout_ms": session_ms,
        "killed_partitions": sorted(taken.killed_partitions),
        "survivor_lateness_ms": taken.survivor_ms,
        "survivor_fired_lateness_ms": taken.survivor_fired_ms,
        "survivor_restores": [asdict(r) for r in taken_over],
        "window_lateness_ms": seen.lateness_ms,
        "broker_cpu_s": broker_cpu,
        "publish_s": publish_s,
    }
    return _outcome(
        config,
        args,
        seen=seen,
        expected=len(expected),
        taken=taken,
        taken_over=taken_over,
        ticker_cpu=ticker_cpu,
        finished=not unseen,
        extra=extra,
    )


def _outcome(
    config: str,
    args: argparse.Namespace,
    *,
    seen: Tally,
    expected: int,
    taken: Takeover,
    taken_over: list[Restore],
    ticker_cpu: float,
    finished: bool,
    extra: dict[str, Any],
) -> Outcome:
    """Print the configuration's line and return its outcome."""
    print(
        f"  {config:>7}  session {extra['session_timeout_ms'] / 1000:.0f}s  "
        f"gap {taken.gap_s:5.2f}s  "
        f"waited p50 {taken.waited_ms['p50']:,.0f} ms max {taken.waited_ms['max']:,.0f} ms  "
        f"survivor's own max {taken.survivor_ms.get('max', 0):,.0f} ms "
        f"(fired {taken.survivor_fired_ms.get('max', 0):,.0f} ms)  "
        f"fires {seen.fires:,}/{expected:,}  lost {seen.lost}  dup {seen.duplicated}  "
        f"restored {sum(r.records for r in taken_over):,} records "
        f"in {sum(r.seconds for r in taken_over):.2f}s",
        flush=True,
    )
    return Outcome(
        system="kairos",
        scenario="failover",
        n=args.size,
        config=config,
        fires=seen.fires,
        expected=expected,
        lost=seen.lost,
        duplicated=seen.duplicated,
        seconds=args.window,
        lateness_ms=taken.waited_ms,
        cpu_s=ticker_cpu,
        gap_s=taken.gap_s,
        finished=finished,
        extra=extra,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument(
        "--configs", nargs="+", choices=SESSION_TIMEOUTS_MS, default=["tuned", "default"]
    )
    parser.add_argument("--window", type=int, default=120, help="seconds, whole minutes")
    parser.add_argument("--kill-after", type=int, default=30, help="seconds into the window")
    parser.add_argument("--warmup", type=int, default=60, help="seconds at least")
    parser.add_argument("--drain", type=int, default=120, help="seconds to wait for late fires")
    parser.add_argument("--json", type=Path, help="write the Outcome rows here")
    args = parser.parse_args()
    if args.window <= 0 or args.window % 60:
        parser.error("--window must be a whole number of minutes, in seconds (60, 120, …)")
    if args.kill_after >= args.window:
        parser.error("--kill-after must fall inside the window")
    outcomes = []
    with (
        tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None and broker.pid is not None
        for config in args.configs:
            outcomes.append(measure(broker.bootstrap_servers, broker.pid, config, args, Path(tmp)))
            if args.json:
                write_outcomes(args.json, outcomes)


if __name__ == "__main__":
    main()
