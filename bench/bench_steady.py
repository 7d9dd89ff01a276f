"""Steady load: N every-minute schedules spread over the minute, fires observed as a consumer.

Run: `.venv/bin/python -m bench.bench_steady [--sizes 10000 100000 1000000] [--window 120]
[--tickers 1] [--json bench/results/steady.json] [--logs DIR --log-level DEBUG]
[--ticker-code <checkout> --rounds 2]`.

For each N, on a local broker this script starts and stops itself:

1. N schedules `* * * * *` with a one-minute jitter are published (timed). The jitter offset is
   a hash of each run id, so the N fires of a minute are spread evenly over it: a steady
   N/60 fires per second, not a herd.
2. The ticker processes (the real `kairos ticker`) take them in; then an observer reads the
   runs topic read_committed and stamps each `RunRequested` of the window when it sees it.
3. Warm-up: the window starts at the first minute boundary at least `--warmup` seconds after the
   tickers hold all N. The minute after the ingest is not steady: each schedule owes its first
   occurrence from the minute after its creation, so the first fires overlap the ingest's last
   transactions and find nothing prepared ahead. After a full minute of
   firing, the ticker is in the state it keeps day after day: every schedule decided at least
   once, its next fire prepared if idle time allowed (the ticker prepares fires up to two
   minutes ahead whenever the next due instant is over 20 ms away, so the larger N, the less
   room it finds), and the observer, started before the window, is at the end of the topic.
4. Window: every occurrence of the whole nominal minutes in it is due inside it (jitter < 1 min).
   Lateness is observed − due of each occurrence's first sighting; lost are expected run ids
   not seen by the end of the drain (the window's end plus `--drain` seconds), duplicated are
   run ids seen more than once. CPU seconds of the tickers, the broker and this script (the
   observer) are taken over the window.

With `--ticker-code <checkout>` (a before/after in one run) and `--rounds R`, each round
measures the checkout's tickers, then this code's, alternated on the same broker, each on a
deployment of its own (published and taken in afresh).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta
from math import nan
from pathlib import Path
from typing import Any

from bench.common import (
    RunsObserver,
    Tally,
    TickerProcess,
    deployment,
    local_broker,
    minute_after,
    own_cpu_s,
    publish,
    run_ids,
    sleep_until,
    start_ticker,
    steady_ids,
    steady_schedules,
    tally,
    wait_until_held,
)
from bench.outcome import Outcome, process_tree_cpu_s, write_outcomes
from kairos.streams.kafka.settings import KafkaSettings


def _start_tickers(
    settings: KafkaSettings,
    size: int,
    args: argparse.Namespace,
    workdir: Path,
    *,
    label: str = "ticker",
    code: Path | None = None,
) -> list[TickerProcess]:
    logs = args.logs or workdir
    logs.mkdir(parents=True, exist_ok=True)
    return [
        start_ticker(
            settings,
            f"steady-{size}-{label}-{t}",
            workdir / f"state-{size}-{label}-{t}",
            logs / f"ticker-{size}-{label}-{t}.log",
            log_level=args.log_level,
            code=code,
        )
        for t in range(args.tickers)
    ]


def measure(
    bootstrap: str, broker_pid: int, size: int, args: argparse.Namespace, workdir: Path
) -> list[Outcome]:
    """A window per round and ticker code, each on a deployment of its own.

    With `--ticker-code`, each round measures the checkout's tickers, then this code's: each
    publishes its N schedules afresh and takes them in from scratch. (Restoring one intake
    into the other code's tickers was tried: after a few minutes of steady firing the
    changelog holds millions of progress records not compacted yet, and the restore took
    longer than the intake.)
    """
    codes: list[tuple[str, Path | None]] = [("ticker", None)]
    if args.ticker_code is not None:
        codes = [("before", args.ticker_code), ("ticker", None)]
    outcomes = []
    ids = steady_ids(size)
    for round_no in range(args.rounds):
        for label, code in codes:
            prefix = f"steady{size}x{args.tickers}.{label}{round_no}."
            settings = deployment(bootstrap, prefix)
            publish_s = publish(settings, steady_schedules(ids))
            print(f"  N={size:,}: {label} published in {publish_s:.1f}s", flush=True)
            tickers = _start_tickers(
                settings, size, args, workdir, label=f"{label}{round_no}", code=code
            )
            try:
                started = time.monotonic()
                wait_until_held(tickers, size)
                ingest_s = time.monotonic() - started
                print(f"  N={size:,}: {label} held after {ingest_s:.1f}s", flush=True)
                outcome = _window(
                    settings, broker_pid, size, ids, tickers=tickers, args=args, label=label
                )
            finally:
                for ticker in tickers:
                    ticker.stop()
            outcome.extra.update(publish_s=publish_s, ingest_s=ingest_s)
            outcomes.append(outcome)
    return outcomes


def _window(
    settings: KafkaSettings,
    broker_pid: int,
    size: int,
    ids: list[str],
    *,
    tickers: list[TickerProcess],
    args: argparse.Namespace,
    label: str,
) -> Outcome:
    """One measured window of whole minutes, from the first boundary after the warm-up."""
    start = minute_after(datetime.now(UTC) + timedelta(seconds=args.warmup))
    end = start + timedelta(seconds=args.window)
    observer = RunsObserver(settings, keep_from=start.timestamp())
    try:
        print(f"  N={size:,}: window {start:%H:%M:%S}–{end:%H:%M:%S}Z", flush=True)
        expected = run_ids(ids, start, args.window // 60)
        sleep_until(start)
        before = (sum(t.cpu_s() for t in tickers), process_tree_cpu_s(broker_pid), own_cpu_s())
        ahead_before = _decided_ahead(tickers)
        sleep_until(end)
        after = (sum(t.cpu_s() for t in tickers), process_tree_cpu_s(broker_pid), own_cpu_s())
        ahead = tuple(b - a for a, b in zip(ahead_before, _decided_ahead(tickers), strict=True))
        rss_mb = sum(t.rss_mb() for t in tickers)
        unseen = observer.wait_for(expected, time.monotonic() + args.drain)
    finally:
        observer.stop()
    seen = tally(observer.observations(), expected)
    ticker_cpu, broker_cpu, observer_cpu = (b - a for a, b in zip(before, after, strict=True))
    extra = {
        "code": label,
        "tickers": args.tickers,
        "broker_cpu_s": broker_cpu,
        "observer_cpu_s": observer_cpu,
        "ticker_rss_mb": rss_mb,
        "decided_ahead_share": ahead[0] / ahead[1] if ahead[1] else nan,
        "window_start": start.isoformat(),
    }
    return _outcome(
        size,
        window_s=args.window,
        seen=seen,
        expected=len(expected),
        ticker_cpu=ticker_cpu,
        finished=not unseen,
        extra=extra,
    )


def _decided_ahead(tickers: list[TickerProcess]) -> tuple[float, float]:
    """The tickers' occurrences committed as decided ahead so far, and all they committed (a
    checkout older than the counter reads none)."""
    return (
        sum(t.gauge("kairos_ticker_decided_ahead_total") for t in tickers),
        sum(t.gauge("kairos_ticker_fires_total") for t in tickers),
    )


def _outcome(
    size: int,
    *,
    window_s: int,
    seen: Tally,
    expected: int,
    ticker_cpu: float,
    finished: bool,
    extra: dict[str, Any],
) -> Outcome:
    """Print the size's line and return its outcome."""
    late = seen.lateness_ms
    ahead_share = extra["decided_ahead_share"]
    print(
        f"  N={size:>9,}  {extra['code']:<7} fires {seen.fires:>9,}/{expected:,} "
        f"({seen.fires / window_s:,.0f}/s)  lost {seen.lost}  dup {seen.duplicated}  "
        f"lateness p50 {late.get('p50', nan):,.0f} ms p99 {late.get('p99', nan):,.0f} ms "
        f"max {late.get('max', nan):,.0f} ms  ticker CPU {ticker_cpu:.1f}s "
        f"({ticker_cpu / window_s:.0%} of a core)  broker CPU {extra['broker_cpu_s']:.1f}s  "
        f"observer CPU {extra['observer_cpu_s']:.1f}s  "
        f"ticker RSS {extra['ticker_rss_mb']:,.0f} MB  decided ahead {ahead_share:.0%}",
        flush=True,
    )
    return Outcome(
        system="kairos",
        scenario="steady",
        n=size,
        config="default",
        fires=seen.fires,
        expected=expected,
        lost=seen.lost,
        duplicated=seen.duplicated,
        seconds=window_s,
        fires_per_s=seen.fires / window_s,
        lateness_ms=seen.lateness_ms,
        cpu_s=ticker_cpu,
        finished=finished,
        extra=extra,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--window", type=int, default=120, help="seconds, whole minutes")
    parser.add_argument("--warmup", type=int, default=60, help="seconds at least, see above")
    parser.add_argument("--drain", type=int, default=120, help="seconds to wait for late fires")
    parser.add_argument("--tickers", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the Outcome rows here")
    parser.add_argument("--logs", type=Path, help="keep the tickers' logs in this directory")
    parser.add_argument("--log-level", default="INFO", help="the tickers' (DEBUG: each commit)")
    parser.add_argument("--ticker-code", type=Path, help="a checkout to measure before this one")
    parser.add_argument("--rounds", type=int, default=1, help="windows per code, alternated")
    args = parser.parse_args()
    if args.window <= 0 or args.window % 60:
        parser.error("--window must be a whole number of minutes, in seconds (60, 120, …)")
    outcomes = []
    with (
        tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None and broker.pid is not None
        for size in args.sizes:
            outcomes.extend(measure(broker.bootstrap_servers, broker.pid, size, args, Path(tmp)))
            if args.json:
                # Rewritten after each size, so a bound hit by a larger N keeps the smaller ones.
                write_outcomes(args.json, outcomes)


if __name__ == "__main__":
    main()
