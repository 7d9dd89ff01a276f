"""Restore and memory: how fast a ticker rebuilds its store, cold and warm, and its RSS.

Run: `.venv/bin/python -m bench.bench_restore [--sizes 10000 100000] [--json out.json]`.

For each N, on a local broker this script starts and stops itself:

1. N schedules (`*/5 * * * *`, so none fires during the run) are published and a first ticker
   takes them in, writing the changelog; its RSS is read once it holds all N and has prepared
   them (idle), then it stops (SIGTERM).
2. Cold: a ticker with an empty state directory restores every partition from the changelog.
3. Warm: the same ticker restarted on its intact state directory restores only the delta.

Restore times come from the tickers' own `handover event=assigned … seconds=` log lines, summed
over partitions; the rate is changelog records applied per second.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench.common import free_port, start_ticker, wait_until_held
from kairos.core.schedule import Schedule
from kairos.services.local_kafka import LocalKafka
from kairos.streams.schedule_publisher import SchedulesClient
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import create_topics

PARTITIONS = 12
ASSIGNED = re.compile(r"handover event=assigned .* restore=(\w+) records=(\d+) seconds=([\d.]+)")


def restores(log: Path, expected: int, timeout_s: float = 900) -> list[tuple[str, int, float]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = [
            (m.group(1), int(m.group(2)), float(m.group(3)))
            for m in map(ASSIGNED.search, log.read_text(errors="replace").splitlines())
            if m
        ]
        if len(found) >= expected:
            return found
        time.sleep(0.2)
    raise RuntimeError(f"only some partitions were restored; see {log}")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(bootstrap: str, size: int, workdir: Path) -> dict[str, Any]:
    settings = KafkaSettings(
        bootstrap_servers=bootstrap, topic_prefix=f"restore{size}.", schedules_partitions=PARTITIONS
    )
    create_topics(AdminClient({"bootstrap.servers": bootstrap}), settings.layout)
    with SchedulesClient(settings, changed_by="bench") as client:
        client.upsert_all(Schedule(id=f"restore-{n:07d}", cron="*/5 * * * *") for n in range(size))
    # 1. Ingest: the first ticker writes the changelog; idle, it prepares what is due soon.
    first_log = workdir / f"ingest-{size}.log"
    port = free_port()
    first = start_ticker(settings, "ingest", workdir / f"ingest-{size}", first_log, port)
    wait_until_held(first, port, size, first_log)
    time.sleep(5)  # idle time: the ticker prepares what falls due in the next two minutes
    rss = rss_mb(first.pid)
    first.terminate()
    first.wait(timeout=120)
    # 2. Cold: an empty state directory.
    cold_dir = workdir / f"cold-{size}"
    cold_log = workdir / f"cold-{size}.log"
    cold = start_ticker(settings, "restorer", cold_dir, cold_log, free_port())
    cold_restores = restores(cold_log, PARTITIONS)
    cold.terminate()
    cold.wait(timeout=120)
    # 3. Warm: the same state directory again.
    warm_log = workdir / f"warm-{size}.log"
    warm = start_ticker(settings, "restorer", cold_dir, warm_log, free_port())
    warm_restores = restores(warm_log, PARTITIONS)
    warm.terminate()
    warm.wait(timeout=120)
    cold_records = sum(r for _, r, _ in cold_restores)
    cold_seconds = sum(s for _, _, s in cold_restores)
    warm_records = sum(r for _, r, _ in warm_restores)
    warm_seconds = sum(s for _, _, s in warm_restores)
    return {
        "schedules": size,
        "ticker_rss_mb": rss,
        "cold": {
            "records": cold_records,
            "seconds": cold_seconds,
            "records_per_second": cold_records / cold_seconds if cold_seconds else None,
        },
        "warm": {"records": warm_records, "seconds": warm_seconds},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kairos-bench-") as tmp:
        workdir = Path(tmp)
        broker = LocalKafka(data_dir=workdir / "kafka")
        status, _ = broker.start()
        assert status.bootstrap_servers is not None
        results = []
        try:
            for size in args.sizes:
                result = measure(status.bootstrap_servers, size, workdir)
                results.append(result)
                cold, warm = result["cold"], result["warm"]
                rate = cold["records_per_second"] or 0
                print(
                    f"  N={size:>9,}  cold {cold['records']:>9,} records in "
                    f"{cold['seconds']:6.2f}s ({rate:>9,.0f}/s)  warm {warm['records']:>6,} "
                    f"records in {warm['seconds']:5.2f}s  "
                    f"ticker RSS {result['ticker_rss_mb']:6.0f} MB"
                )
        finally:
            broker.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
