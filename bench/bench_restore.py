"""Restore and memory: how fast a ticker rebuilds its store, cold and warm, and its RSS.

Run: `.venv/bin/python -m bench.bench_restore [--sizes 10000 100000] [--json out.json]`.

For each N, on a local broker this script starts and stops itself:

1. N schedules (`*/5 * * * *`, so none fires during the run) are published and a first ticker
   takes them in, writing the changelog; its RSS is read once it holds all N and has prepared
   them (idle), then it stops (SIGTERM).
2. Cold: a ticker with an empty state directory restores every partition from the changelog.
3. Warm: the same ticker restarted on its intact state directory restores only the delta.

Restore times come from the tickers' own `handover event=assigned … seconds=` log lines: partitions
restore in slices side by side, so the time is the span from the first one's start to the last
one's end (summing the partitions' seconds counted the overlap twelve times over); the rate is
changelog records applied per second. RSS is read twice: of the first ticker holding N (step 1),
and of the cold restorer after 5 s of idle time (`restored`: it decodes a schedule's state only
when it is due or about to be). Every restorer starts clear of the next `*/5` fire, so none of
them fires while it restores. `--ticker-code DIR` first restores
the same changelog cold with a ticker from another checkout (before), with its RSS; `--profile`
samples this checkout's cold restorer with py-spy. Each N is one Outcome row (scenario
`restore`): `seconds` is the cold restore; the rest is in `extra`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.common import (
    PARTITIONS,
    Restore,
    TickerProcess,
    deployment,
    local_broker,
    publish,
    restore_span_s,
    restores,
    sleep_until,
    start_ticker,
    wait_for,
    wait_until_held,
)
from bench.outcome import Outcome, write_outcomes
from bench.profile_ticker import print_shares, start_sampling, stop_sampling
from kairos.core.schedule import Schedule
from kairos.streams.kafka.settings import KafkaSettings


def restored(ticker: TickerProcess, timeout_s: float = 900) -> tuple[list[Restore], float]:
    """Wait until the ticker restored every partition and had 5 s of idle time to prepare what
    falls due; stop it; its restores and its RSS (MB) just before it stopped."""
    found: list[Restore] = []

    def all_restored() -> bool:
        found[:] = restores(ticker.log.read_text(errors="replace"))
        return len(found) >= PARTITIONS

    try:
        wait_for(all_restored, timeout_s, f"{ticker.instance} to restore every partition")
        time.sleep(5)
        rss_mb = ticker.rss_mb()
    finally:
        ticker.stop()
    return found, rss_mb


def clear_of_the_fires() -> None:
    """Wait until a restore started now ends before the schedules' next fire (`*/5`): a
    restorer that also fires 300k occurrences measures the fires, not the restore."""
    now = datetime.now(UTC)
    boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=5 - now.minute % 5)
    if (boundary - now).total_seconds() < 100:
        sleep_until(boundary + timedelta(seconds=10))


def _rate(found: list[Restore]) -> tuple[int, float]:
    """Records restored, and the seconds the restores took side by side."""
    return sum(r.records for r in found), restore_span_s(found)


def restored_before(
    settings: KafkaSettings, size: int, workdir: Path, before: Path
) -> dict[str, float | None]:
    """Restore the changelog cold with the ticker of the checkout `before`: its seconds, rate
    and RSS, as the `before_*` entries of the Outcome's `extra`."""
    clear_of_the_fires()
    old = start_ticker(
        settings,
        "before",
        workdir / f"before-{size}",
        workdir / f"before-{size}.log",
        code=before,
    )
    old_found, old_rss_mb = restored(old)
    old_records, old_seconds = _rate(old_found)
    return {
        "before_seconds": old_seconds,
        "before_records_per_s": old_records / old_seconds if old_seconds else None,
        "before_restored_rss_mb": old_rss_mb,
    }


def measure(
    bootstrap: str, size: int, workdir: Path, before: Path | None, profile: Path | None
) -> Outcome:
    settings = deployment(bootstrap, f"restore{size}.")
    publish(settings, (Schedule(id=f"restore-{n:07d}", cron="*/5 * * * *") for n in range(size)))
    # 1. Ingest: the first ticker writes the changelog; idle, it prepares what is due soon.
    first = start_ticker(
        settings, "ingest", workdir / f"ingest-{size}", workdir / f"ingest-{size}.log"
    )
    try:
        wait_until_held([first], size)
        time.sleep(5)  # idle time: the ticker prepares what falls due in the next two minutes
        rss_mb = first.rss_mb()
    finally:
        first.stop()
    extra: dict[str, float | None] = {}
    if before is not None:
        # The same changelog restored cold by another checkout's ticker, just before this one's.
        extra |= restored_before(settings, size, workdir, before)
    # 2. Cold: an empty state directory. 3. Warm: the same state directory again.
    state_dir = workdir / f"cold-{size}"
    clear_of_the_fires()
    cold_ticker = start_ticker(settings, "restorer", state_dir, workdir / f"cold-{size}.log")
    spy = None if profile is None else start_sampling(cold_ticker.process.pid, profile)
    try:
        cold, restored_rss_mb = restored(cold_ticker)
    finally:
        stop_sampling(spy)
    clear_of_the_fires()
    warm, _ = restored(start_ticker(settings, "restorer", state_dir, workdir / f"warm-{size}.log"))
    cold_records, cold_seconds = _rate(cold)
    return Outcome(
        system="kairos",
        scenario="restore",
        n=size,
        config="default",
        seconds=cold_seconds,
        extra={
            "records": cold_records,
            "records_per_s": cold_records / cold_seconds if cold_seconds else None,
            "warm_records": sum(r.records for r in warm),
            "warm_seconds": restore_span_s(warm),
            "rss_mb": rss_mb,
            "restored_rss_mb": restored_rss_mb,
            **extra,
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--json", type=Path, help="write the Outcome rows here")
    parser.add_argument("--ticker-code", type=Path, help="a checkout to restore cold before this")
    parser.add_argument("--profile", type=Path, help="py-spy raw stacks of the last cold restore")
    args = parser.parse_args()
    outcomes = []
    with (
        tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None
        for size in args.sizes:
            profile = args.profile if size == args.sizes[-1] else None
            outcome = measure(broker.bootstrap_servers, size, Path(tmp), args.ticker_code, profile)
            outcomes.append(outcome)
            extra = outcome.extra
            print(
                f"  N={size:>9,}  cold {extra['records']:>9,} records in "
                f"{outcome.seconds:6.2f}s ({extra['records_per_s'] or 0:>9,.0f}/s)  "
                f"warm {extra['warm_records']:>6,} records in {extra['warm_seconds']:5.2f}s  "
                f"ticker RSS {extra['rss_mb']:6.0f} MB "
                f"(restored {extra['restored_rss_mb']:6.0f} MB)"
            )
            if "before_seconds" in extra:
                print(
                    f"  N={size:>9,}  before: cold in {extra['before_seconds']:6.2f}s "
                    f"({extra['before_records_per_s'] or 0:>9,.0f}/s)  "
                    f"restored RSS {extra['before_restored_rss_mb']:6.0f} MB"
                )
            if args.json:
                write_outcomes(args.json, outcomes)
    if args.profile is not None:
        print_shares(args.profile, 40)


if __name__ == "__main__":
    main()
