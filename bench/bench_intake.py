"""Intake: how fast one ticker takes in schedule events, beside a raw consumer of the same topic.

Run: `.venv/bin/python -m bench.bench_intake [--sizes 100000 1000000] [--profile out.txt]
[--json out.json]`.

For each N, on a local broker this script starts and stops itself:

1. N schedule events are published before any ticker runs: daily schedules at a minute and hour
   of their own in one of five time zones (1,440 expressions by 5 zones, as teams' schedules
   share a few expressions and zones), so almost none fires while the ticker takes them in.
2. Baseline, in the same run: a raw confluent-kafka consumer reads the schedules topic
   read_committed and decodes every value with the same Avro codec: the least any intake pays.
3. One ticker (`--tickers K`: K ticker processes sharing the partitions) starts on an empty
   state directory. Its intake runs from the moment it owns every partition (its
   `owned_partitions` gauge, polled every 250 ms) to the moment it holds N schedules
   (`schedules_held`, set after each committed transaction).

Each ticker takes in a deployment of its own (its own topics, group and changelog), published
the same way. `--ticker-code DIR` first measures a ticker run from another checkout (before),
then this one's (after). The ratio is a ticker's events per second over the raw consumer's. With
`--profile`, py-spy samples this checkout's ticker during the intake of the last N.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import median

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench.common import (
    PARTITIONS,
    TickerProcess,
    deployment,
    local_broker,
    publish,
    start_ticker,
    wait_for,
)
from bench.outcome import Outcome, write_outcomes
from bench.profile_ticker import print_shares, start_sampling, stop_sampling
from kairos.core.schedule import Schedule
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs

IDLE_BEFORE_RSS_S = 5
ZONES = ("UTC", "America/New_York", "Europe/Berlin", "Asia/Tokyo", "Australia/Sydney")


@dataclass(frozen=True)
class Run:
    """What every measurement of one invocation shares: the broker and the options."""

    bootstrap: str
    workdir: Path
    logs: Path
    """Where the tickers' logs go (`--logs`, the temporary directory by default)."""
    log_level: str
    rounds: int
    tickers: int
    before: Path | None
    """The checkout measured before this one (`--ticker-code`)."""


def intake_schedules(size: int) -> Iterator[Schedule]:
    """Daily schedules spread over the day's minutes and five zones."""
    for n in range(size):
        minute = n % 1440
        yield Schedule(
            id=f"intake-{n:07d}",
            cron=f"{minute % 60} {minute // 60} * * *",
            timezone=ZONES[(n // 1440) % len(ZONES)],
        )


def raw_intake(settings: KafkaSettings, size: int) -> float:
    """Seconds a plain consumer takes to read and decode every schedule event."""
    codec = make_codecs().schedule_event
    topic = settings.layout.name(TopicRole.SCHEDULES)
    consumer = Consumer(
        {
            **settings.consumer_config(),
            "group.id": f"raw-intake-{time.monotonic_ns()}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    # From the beginning, explicitly: no committed offsets to ask a group coordinator for.
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen, started = 0, time.monotonic()
    try:
        while seen < size:
            if time.monotonic() - started > 600:
                raise RuntimeError(f"the raw consumer read {seen:,} of {size:,} events in 600 s")
            for message in consumer.consume(num_messages=10_000, timeout=1):
                value = message.value()
                if message.error() is None and value is not None:
                    codec.decode(value)
                    seen += 1
    finally:
        consumer.close()
    return time.monotonic() - started


def tickers_intake(tickers: list[TickerProcess], size: int) -> float:
    """Seconds from the tickers owning every partition between them (each some) to holding
    `size` schedules between them."""

    def owning() -> bool:
        owned = [ticker.gauge("kairos_ticker_owned_partitions") for ticker in tickers]
        return all(owned) and sum(owned) >= PARTITIONS

    wait_for(owning, 120, "the tickers to own every partition")
    started = time.monotonic()
    while sum(ticker.gauge("kairos_ticker_schedules_held") for ticker in tickers) < size:
        for ticker in tickers:
            if not ticker.alive():
                raise RuntimeError(f"a ticker exited:\n{ticker.log.read_text()[-3000:]}")
        # Not faster: each scrape of /metrics takes the ticker's interpreter for a while.
        time.sleep(0.25)
    return time.monotonic() - started


@dataclass(frozen=True)
class Intake:
    seconds: float
    cpu_s: float
    """The tickers' CPU seconds, from start to stop."""
    rss_mb: float
    """The tickers' resident memory holding every schedule, after a few seconds of idle time
    (what falls due soon prepared)."""


def one_deployment(
    run: Run, size: int, name: str, *, code: Path | None, profile: Path | None
) -> Intake:
    """The intake of `run.tickers` tickers on a deployment of their own."""
    settings = deployment(run.bootstrap, f"intake{size}{name}.")
    publish(settings, intake_schedules(size))
    tickers = []
    for n in range(run.tickers):
        instance = f"{name}-{n}"
        tickers.append(
            start_ticker(
                settings,
                instance,
                run.workdir / f"{instance}-{size}",
                run.logs / f"{instance}-{size}.log",
                code=code,
                log_level=run.log_level,
            )
        )
    spy = None if profile is None else start_sampling(tickers[0].process.pid, profile)
    try:
        try:
            seconds = tickers_intake(tickers, size)
        finally:
            stop_sampling(spy)
        time.sleep(IDLE_BEFORE_RSS_S)
        rss_mb = sum(ticker.rss_mb() for ticker in tickers)
    finally:
        cpu_s = sum(ticker.cpu_s() for ticker in tickers)
        for ticker in tickers:
            ticker.stop()
    return Intake(seconds, cpu_s, rss_mb)


def measure(run: Run, size: int, profile: Path | None) -> Outcome:
    """Rounds of (raw, before, this ticker), each on deployments of their own: the machine's
    speed drifts by tens of percent from minute to minute, so each round compares neighbours
    and the medians are reported."""
    raw, old, new, cpu, rss = [], [], [], [], []
    for round_no in range(run.rounds):
        settings = deployment(run.bootstrap, f"intake{size}raw{round_no}.")
        published_s = publish(settings, intake_schedules(size))
        raw.append(raw_intake(settings, size))
        print(
            f"  N={size:>9,}  round {round_no + 1}  published in {published_s:5.1f}s  "
            f"raw read+decode {raw[-1]:6.2f}s ({size / raw[-1]:>9,.0f}/s)",
            flush=True,
        )
        if run.before is not None:
            name = f"before{round_no}"
            before = one_deployment(run, size, name, code=run.before, profile=None)
            old.append(before.seconds)
            print(_line("before", size, before, raw[-1]), flush=True)
        last = round_no == run.rounds - 1
        after = one_deployment(
            run,
            size,
            f"ticker{round_no}",
            code=None,
            profile=profile if last else None,
        )
        new.append(after.seconds)
        cpu.append(after.cpu_s)
        rss.append(after.rss_mb)
        print(_line("ticker", size, after, raw[-1]), flush=True)
    raw_s, kairos_s = median(raw), median(new)
    extra: dict[str, float] = {
        "raw_seconds": raw_s,
        "raw_events_per_s": size / raw_s,
        "events_per_s": size / kairos_s,
        "ticker_over_raw": raw_s / kairos_s,
        "rounds": run.rounds,
        "rss_mb": median(rss),
    }
    summary = f"  N={size:>9,}  medians: raw {size / raw_s:,.0f}/s  ticker {size / kairos_s:,.0f}/s"
    if old:
        extra |= {"before_seconds": median(old), "before_events_per_s": size / median(old)}
        summary += (
            f"  before {size / median(old):,.0f}/s  after/before {median(old) / kairos_s:.2f}"
        )
    print(summary + f"  ticker/raw {raw_s / kairos_s:.2f}", flush=True)
    return Outcome(
        system="kairos",
        scenario="intake",
        n=size,
        config="default",
        seconds=kairos_s,
        cpu_s=median(cpu),
        extra=extra,
    )


def _line(name: str, size: int, intake: Intake, raw_s: float) -> str:
    seconds = intake.seconds
    return (
        f"  N={size:>9,}  {name:>6} {seconds:6.2f}s ({size / seconds:>9,.0f}/s)  "
        f"{name}/raw {raw_s / seconds:.2f}  CPU {intake.cpu_s:.1f}s  "
        f"RSS {intake.rss_mb:,.0f} MB ({intake.rss_mb * 2**20 / size:,.0f} B a schedule)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--profile", type=Path, help="py-spy raw stacks of the last N's intake")
    parser.add_argument("--ticker-code", type=Path, help="a checkout to measure before this one")
    parser.add_argument("--json", type=Path, help="write the Outcome rows here")
    parser.add_argument("--logs", type=Path, help="keep the tickers' logs in this directory")
    parser.add_argument("--log-level", default="INFO", help="the tickers' log level")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per N; medians reported")
    parser.add_argument("--tickers", type=int, default=1, help="ticker processes sharing it")
    args = parser.parse_args()
    if args.logs is not None:
        args.logs.mkdir(parents=True, exist_ok=True)
    outcomes = []
    with (
        tempfile.TemporaryDirectory(prefix="kairos-intake-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None
        run = Run(
            bootstrap=broker.bootstrap_servers,
            workdir=Path(tmp),
            logs=args.logs or Path(tmp),
            log_level=args.log_level,
            rounds=args.rounds,
            tickers=args.tickers,
            before=args.ticker_code,
        )
        for n, size in enumerate(args.sizes):
            last = n == len(args.sizes) - 1
            outcomes.append(measure(run, size, args.profile if last else None))
    if args.profile is not None:
        print_shares(args.profile, 40)
    if args.json is not None:
        write_outcomes(args.json, outcomes)


if __name__ == "__main__":
    main()
