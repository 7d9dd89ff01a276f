"""The midnight herd: N schedules due at the same instant, against a raw transactional producer.

Run: `.venv/bin/python -m bench.bench_herd [--sizes 10000 100000 300000] [--json out.json]`.

For each N, on a local broker this script starts and stops itself:

1. N schedules `* * * * *` are published and one ticker process (the real `kairos ticker`)
   takes them in; once it holds all N, the next minute boundary is the herd instant.
2. Kairos: seconds from the herd instant until the transaction committing the N-th run of that
   minute (from the ticker's DEBUG commit log), fires per second, and the ticker's own
   due→commit lateness histogram (p50/p99 read off its Prometheus buckets).
3. Raw: a confluent-kafka transactional producer writes N records of the same size as a
   RunRequested to a fresh topic with as many partitions, in transactions as large as the
   ticker's; seconds from its first produce to its last commit.

The ratio Kairos/raw compares rates measured in the same run on the same broker.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import free_port, metric, start_ticker, wait_until_held
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.services.local_kafka import LocalKafka
from kairos.streams.codec import make_codecs
from kairos.streams.records import run_requested_record
from kairos.streams.schedule_publisher import SchedulesClient
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import create_topics

PARTITIONS = 12
TRANSACTION_SIZE = 20_000
COMMIT_LINE = re.compile(
    r"^(\S+ \S+) DEBUG kairos\.services\.ticker\.service: transaction committed \S+ runs=(\d+)"
)


def histogram_quantile(port: int, quantile: float) -> float:
    buckets = metric(port, "kairos_ticker_fire_lateness_seconds_bucket")
    pairs = []
    for key, count in buckets.items():
        bound = re.search(r'le="([^"]+)"', key)
        if bound is not None:
            pairs.append((float(bound.group(1)), count))
    pairs.sort()
    total = pairs[-1][1]
    for bound, count in pairs:
        if count >= quantile * total:
            return bound
    return float("inf")


def run_kairos(bootstrap: str, size: int, workdir: Path) -> dict[str, Any]:
    settings = KafkaSettings(
        bootstrap_servers=bootstrap, topic_prefix=f"herd{size}.", schedules_partitions=PARTITIONS
    )
    create_topics(AdminClient({"bootstrap.servers": bootstrap}), settings.layout)
    schedules = [Schedule(id=f"herd-{n:07d}", cron="* * * * *") for n in range(size)]
    started = time.monotonic()
    with SchedulesClient(settings, changed_by="bench") as client:
        client.upsert_all(schedules)
    publish_s = time.monotonic() - started
    port = free_port()
    log_path = workdir / f"ticker-{size}.log"
    ticker = start_ticker(
        settings, f"bench-{size}", workdir / f"state-{size}", log_path, port, log_level="DEBUG"
    )
    try:
        wait_until_held(ticker, port, size, log_path)
        herd_at = (datetime.now(UTC) + timedelta(minutes=1)).replace(second=0, microsecond=0)
        if (herd_at - datetime.now(UTC)).total_seconds() < 3:
            herd_at += timedelta(minutes=1)
        print(f"  N={size:,}: published in {publish_s:.1f}s; herd at {herd_at:%H:%M:%S}Z")
        last_commit = wait_for_runs(log_path, herd_at, size, deadline=time.monotonic() + 600)
        herd_s = (last_commit - herd_at).total_seconds()
        return {
            "herd_seconds": herd_s,
            "fires_per_second": size / herd_s,
            "lateness_p50_s": histogram_quantile(port, 0.50),
            "lateness_p99_s": histogram_quantile(port, 0.99),
        }
    finally:
        ticker.terminate()
        ticker.wait(timeout=60)


def wait_for_runs(log_path: Path, herd_at: datetime, size: int, deadline: float) -> datetime:
    while time.monotonic() < deadline:
        total = 0
        for line in log_path.read_text(errors="replace").splitlines():
            match = COMMIT_LINE.match(line)
            if not match:
                continue
            at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
            if at >= herd_at:
                total += int(match.group(2))
                if total >= size:
                    return at
        time.sleep(0.5)
    raise RuntimeError(f"the herd of {size} was not committed in time; see {log_path}")


def run_raw(bootstrap: str, size: int, record_size: int) -> dict[str, Any]:
    topic = f"raw-{size}-{int(time.time())}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=30)
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
    started = time.monotonic()
    for first in range(0, size, TRANSACTION_SIZE):
        producer.begin_transaction()
        for n in range(first, min(size, first + TRANSACTION_SIZE)):
            while True:
                try:
                    producer.produce(topic, key=f"herd-{n:07d}@run", value=value)
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction(60)
    seconds = time.monotonic() - started
    return {"seconds": seconds, "records_per_second": size / seconds}


def record_size() -> int:
    nominal = datetime(2027, 1, 1, tzinfo=UTC)
    schedule = Schedule(id="herd-0000000", cron="* * * * *")
    decision = Decision(run_id(schedule.id, nominal), schedule.id, nominal, nominal, Action.FIRE)
    state = ScheduleState(schedule=schedule, version=0, next_nominal=nominal)
    record = run_requested_record(
        decision, state, fired_at=nominal, partition=0, ticker_instance="bench"
    )
    return len(make_codecs().run_requested.encode(record))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 300_000])
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    size_bytes = record_size()
    print(f"python {platform.python_version()} on {platform.machine()}; record {size_bytes} B")
    with tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp:
        workdir = Path(tmp)
        broker = LocalKafka(data_dir=workdir / "kafka")
        status, _ = broker.start()
        assert status.bootstrap_servers is not None
        results = []
        try:
            for size in args.sizes:
                raw = run_raw(status.bootstrap_servers, size, size_bytes)
                kairos = run_kairos(status.bootstrap_servers, size, workdir)
                ratio = kairos["fires_per_second"] / raw["records_per_second"]
                results.append({"n": size, "kairos": kairos, "raw": raw, "ratio": ratio})
                print(
                    f"  N={size:>7,}  kairos {kairos['herd_seconds']:6.2f}s "
                    f"({kairos['fires_per_second']:>9,.0f}/s, p50 ≤{kairos['lateness_p50_s']}s, "
                    f"p99 ≤{kairos['lateness_p99_s']}s)  raw {raw['seconds']:5.2f}s "
                    f"({raw['records_per_second']:>9,.0f}/s)  kairos/raw {ratio:.2f}"
                )
        finally:
            broker.stop()
    if args.json:
        args.json.write_text(json.dumps({"record_bytes": size_bytes, "results": results}, indent=2))


if __name__ == "__main__":
    main()
