"""The midnight herd: N schedules due at the same instant, against a raw transactional producer.

Run: `.venv/bin/python -m bench.bench_herd [--sizes 10000 100000 300000] [--json out.json]
[--ticker-code <checkout> --rounds 2] [--tickers 2]`.

For each N, on a local broker this script starts and stops itself:

1. N schedules `* * * * *` are published and one ticker process (the real `kairos ticker`)
   takes them in; once it holds all N, the next minute boundary is the herd instant.
2. Kairos: seconds from the herd instant until the transaction committing the N-th run of that
   minute, and fires per second. Each run's lateness is the commit of its transaction minus the
   herd instant, both from the ticker's DEBUG commit log (`runs=` per committed transaction).
3. Raw: a confluent-kafka transactional producer writes N records of the same size as a
   RunRequested to a fresh topic with as many partitions, in transactions as large as the
   ticker's; seconds from its first produce to its last commit, and each record's lateness as
   its transaction's commit minus the first produce.
4. Raw, Kairos's records: the same producer writes what a fire writes, the run and, to a second
   topic, a progress record of the changelog's size with its due-instant header: the least any
   ticker pays on this broker for the two records each fire commits.

CPU seconds over the herd: the ticker process (Kairos), this script (raw), the broker (extra).
The ratio Kairos/raw compares rates measured in the same run on the same broker. With
`--ticker-code`, each round also runs the herd on a ticker of that checkout (before, then this
one), on the same broker minutes apart: the machine's speed drifts by tens of percent.
"""

from __future__ import annotations

import argparse
import platform
import re
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import (
    PARTITIONS,
    deployment,
    local_broker,
    minute_after,
    own_cpu_s,
    publish,
    sleep_until,
    start_ticker,
    wait_until_held,
)
from bench.outcome import Outcome, percentiles, process_tree_cpu_s, write_outcomes
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.services.ticker.settings import TickerSettings
from kairos.streams.state.changelog import DUE_HEADER, StateWriteEncoder
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import run_requested_record

TRANSACTION_SIZE = TickerSettings.model_fields["max_decisions_per_transaction"].default
QUIET_BEFORE_HERD = timedelta(seconds=30)
"""Idle time before the herd: the ticker decides ahead what it will fire (a 300k herd: ~10 s)."""
COMMIT_LINE = re.compile(
    r"^(\S+ \S+) DEBUG kairos\.services\.ticker\.\w+: transaction committed \S+ runs=(\d+)"
)


def run_kairos(
    bootstrap: str,
    broker_pid: int,
    size: int,
    workdir: Path,
    *,
    code: Path | None = None,
    tickers: int = 1,
) -> Outcome:
    """The herd of `size` on `tickers` ticker processes of this checkout (or of `code`)."""
    label = f"{size}-{int(time.time())}"
    settings = deployment(bootstrap, f"herd{label}.")
    publish_s = publish(
        settings, (Schedule(id=f"herd-{n:07d}", cron="* * * * *") for n in range(size))
    )
    logs = [workdir / f"ticker-{label}-{n}.log" for n in range(tickers)]
    started = [
        start_ticker(
            settings,
            f"bench-{label}-{n}",
            workdir / f"state-{label}-{n}",
            log,
            log_level="DEBUG",
            code=code,
        )
        for n, log in enumerate(logs)
    ]
    try:
        wait_until_held(started, size)
        herd_at = quiet_minute(
            logs[0], minute_after(datetime.now(UTC) + timedelta(seconds=3)), *logs[1:]
        )
        print(f"  N={size:,}: published in {publish_s:.1f}s; herd at {herd_at:%H:%M:%S}Z")
        before = sum(t.cpu_s() for t in started), process_tree_cpu_s(broker_pid)
        threads_before = [t.thread_cpu_s() for t in started]
        lateness_s = wait_for_runs(logs, herd_at, size, deadline=time.monotonic() + 600)
        cpu_s = sum(t.cpu_s() for t in started) - before[0]
        broker_cpu_s = process_tree_cpu_s(broker_pid) - before[1]
        threads: dict[str, float] = {}
        for ticker, earlier in zip(started, threads_before, strict=True):
            for kind, spent in ticker.thread_cpu_s().items():
                threads[kind] = round(threads.get(kind, 0.0) + spent - earlier.get(kind, 0.0), 2)
    finally:
        for ticker in started:
            ticker.stop()
    herd_s = lateness_s[-1]
    return Outcome(
        system=("kairos" if code is None else "kairos-before") + ("" if tickers == 1 else "-x2"),
        scenario="herd",
        n=size,
        config="default" if tickers == 1 else f"{tickers} tickers",
        fires=size,
        expected=size,
        seconds=herd_s,
        fires_per_s=size / herd_s,
        lateness_ms=percentiles([s * 1000 for s in lateness_s]),
        cpu_s=cpu_s,
        extra={"publish_s": publish_s, "broker_cpu_s": broker_cpu_s, "thread_cpu_s": threads},
    )


def committed_runs(*log_paths: Path) -> list[tuple[datetime, int]]:
    """Each transaction the tickers committed: when, and how many runs it held; oldest first."""
    commits = []
    for log_path in log_paths:
        for line in log_path.read_text(errors="replace").splitlines():
            match = COMMIT_LINE.match(line)
            if match:
                at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
                commits.append((at.replace(tzinfo=UTC), int(match.group(2))))
    return sorted(commits)


def quiet_minute(log_path: Path, candidate: datetime, *others: Path) -> datetime:
    """The first minute boundary from `candidate` that the ticker (and `others`' tickers) meet
    idle.

    While the ticker still takes in a large N, it fires the minutes it passes (and catches up
    on those it missed): a herd measured on top of that would measure both. Waits until just
    before the boundary it returns.
    """
    while True:
        sleep_until(candidate - timedelta(seconds=0.5))
        busy = [at for at, runs in committed_runs(log_path, *others) if runs]
        if not busy or busy[-1] < candidate - QUIET_BEFORE_HERD:
            return candidate
        candidate += timedelta(minutes=1)


def wait_for_runs(
    log_paths: list[Path], herd_at: datetime, size: int, deadline: float
) -> list[float]:
    """Seconds from `herd_at` to the commit of each of the herd's `size` runs, in order."""
    while time.monotonic() < deadline:
        lateness: list[float] = []
        for at, runs in committed_runs(*log_paths):
            if at >= herd_at:
                lateness += [(at - herd_at).total_seconds()] * min(runs, size - len(lateness))
                if len(lateness) >= size:
                    return lateness
        time.sleep(0.5)
    raise RuntimeError(f"the herd of {size} was not committed in time; see {log_paths}")


def run_raw(
    bootstrap: str, broker_pid: int, size: int, record_size: int, *, with_progress: bool = False
) -> Outcome:
    topic = f"raw-{size}-{int(time.time())}"
    progress_topic = f"{topic}-progress"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for created in admin.create_topics(
        [NewTopic(name, PARTITIONS, 1) for name in (topic, progress_topic)]
    ).values():
        created.result(timeout=30)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": topic,
            "linger.ms": 5,
            "partitioner": "murmur2_random",
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    producer.init_transactions(30)
    value = b"x" * record_size
    progress = b"p" * progress_size()
    due_header: list[tuple[str, str | bytes | None]] = [(DUE_HEADER, b"\x00" * 8)]
    before = own_cpu_s(), process_tree_cpu_s(broker_pid)
    started = time.monotonic()
    lateness_s: list[float] = []
    for first in range(0, size, TRANSACTION_SIZE):
        producer.begin_transaction()
        last = min(size, first + TRANSACTION_SIZE)
        for n in range(first, last):
            while True:
                try:
                    producer.produce(topic, key=f"herd-{n:07d}@run", value=value)
                    if with_progress:
                        producer.produce(
                            progress_topic,
                            key=f"herd-{n:07d}#progress",
                            value=progress,
                            headers=due_header,
                        )
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction(60)
        lateness_s += [time.monotonic() - started] * (last - first)
    seconds = lateness_s[-1]
    return Outcome(
        system="raw-producer-with-progress" if with_progress else "raw-producer",
        scenario="herd",
        n=size,
        config="default",
        fires=size,
        expected=size,
        seconds=seconds,
        fires_per_s=size / seconds,
        lateness_ms=percentiles([s * 1000 for s in lateness_s]),
        cpu_s=own_cpu_s() - before[0],
        extra={"broker_cpu_s": process_tree_cpu_s(broker_pid) - before[1]},
    )


def record_size() -> int:
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    schedule = Schedule(id="herd-0000000", cron="* * * * *")
    decision = Decision(run_id(schedule.id, nominal), schedule.id, nominal, nominal, Action.FIRE)
    state = ScheduleState(schedule=schedule, version=0, next_nominal=nominal)
    record = run_requested_record(
        decision, state, fired_at=nominal, partition=0, ticker_instance="bench"
    )
    return len(make_codecs().run_requested.encode(record))


def progress_size() -> int:
    """The changelog progress record an every-minute schedule's fire writes."""
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    schedule = Schedule(id="herd-0000000", cron="* * * * *")
    state = ScheduleState(
        schedule=schedule, version=0, next_nominal=nominal, last_decided_nominal=nominal
    )
    write = StateWriteEncoder(make_codecs()).state_write(schedule.id, state, False)
    assert write.progress is not None
    return len(write.progress)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    parser.add_argument("--json", type=Path, help="write the Outcome rows here")
    parser.add_argument("--ticker-code", type=Path, help="a checkout to measure before this one")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per N, each a new herd")
    parser.add_argument("--tickers", type=int, default=1, help="ticker processes sharing a herd")
    args = parser.parse_args()
    size_bytes = record_size()
    print(f"python {platform.python_version()} on {platform.machine()}; record {size_bytes} B")
    outcomes = []
    with (
        tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp,
        local_broker(Path(tmp)) as broker,
    ):
        assert broker.bootstrap_servers is not None and broker.pid is not None
        for size in args.sizes:
            for round_no in range(args.rounds):
                measured = one_round(
                    broker.bootstrap_servers,
                    broker.pid,
                    size,
                    Path(tmp),
                    record_bytes=size_bytes,
                    before=args.ticker_code,
                    tickers=args.tickers,
                )
                for outcome in measured:
                    outcome.extra["record_bytes"] = size_bytes
                    outcome.extra["round"] = round_no
                outcomes += measured
                if args.json:
                    write_outcomes(args.json, outcomes)


def one_round(
    bootstrap: str,
    broker_pid: int,
    size: int,
    workdir: Path,
    *,
    record_bytes: int,
    before: Path | None,
    tickers: int,
) -> list[Outcome]:
    """The raw baselines, then the herd on this ticker (and on the `before` one), printed."""
    raw = run_raw(bootstrap, broker_pid, size, record_bytes)
    pairs = run_raw(bootstrap, broker_pid, size, record_bytes, with_progress=True)
    print(
        f"  N={size:>7,}  raw {raw.seconds:5.2f}s ({raw.fires_per_s or 0:>9,.0f}/s)  "
        f"raw with progress {pairs.seconds:5.2f}s ({pairs.fires_per_s or 0:>9,.0f}/s)"
    )
    measured = [raw, pairs]
    for code in [None] if before is None else [before, None]:
        kairos = run_kairos(bootstrap, broker_pid, size, workdir, code=code, tickers=tickers)
        measured.append(kairos)
        assert kairos.fires_per_s and raw.fires_per_s and pairs.fires_per_s
        print(
            f"  N={size:>7,}  {kairos.system:<13} {kairos.seconds:6.2f}s "
            f"({kairos.fires_per_s:>9,.0f}/s, p50 {kairos.lateness_ms['p50'] / 1000:.2f}s, "
            f"p99 {kairos.lateness_ms['p99'] / 1000:.2f}s, CPU {kairos.cpu_s:.1f}s)  "
            f"/raw {kairos.fires_per_s / raw.fires_per_s:.2f}  "
            f"/raw-with-progress {kairos.fires_per_s / pairs.fires_per_s:.2f}"
        )
        busiest = sorted(kairos.extra["thread_cpu_s"].items(), key=lambda kind: -kind[1])[:4]
        print(
            f"  N={size:>7,}  {kairos.system:<13} CPU by thread: "
            + ", ".join(f"{kind} {spent:.2f}s" for kind, spent in busiest)
            + f"; broker {kairos.extra['broker_cpu_s']:.1f}s"
        )
    if before is not None:
        before_s, after_s = measured[2].seconds, measured[3].seconds
        assert before_s and after_s
        print(f"  N={size:>7,}  before/after seconds {before_s / after_s:.2f}")
    return measured


if __name__ == "__main__":
    main()
