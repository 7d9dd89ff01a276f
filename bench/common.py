"""What the benchmarks share: the broker, topics, publishing, ticker processes, the runs observer.

Every benchmark runs on a local broker it starts and stops itself (`local_broker`), publishes
with the real `SchedulesClient`, starts real `kairos ticker` processes and, when it needs to see
fires as a consumer would, reads the runs topic with a `RunsObserver` (read_committed).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from pathlib import Path

import psutil
from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from bench.outcome import percentiles, process_tree_cpu_s
from kairos.cli.ticker import ticker_arguments
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.devinfra.kafka_broker import BrokerStatus, LocalKafka
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole, create_topics
from kairos.streams.wire.codec import make_codecs

PARTITIONS = 12
"""Schedules partitions of every benchmark deployment (the product's default)."""

_PUBLISH_CHUNK = 50_000
"""Schedules per `upsert_all`: each call waits for all its acknowledgements within the client's
30 s timeout, so a large N must not go in one call (nor be encoded in memory at once)."""


# -- broker, topics, schedules ---------------------------------------------------------------


@contextmanager
def local_broker(workdir: Path) -> Iterator[BrokerStatus]:
    """A local broker of this benchmark's own (data under `workdir`), stopped on the way out."""
    broker = LocalKafka(data_dir=workdir / "kafka")
    status, _ = broker.start()
    assert status.bootstrap_servers is not None and status.pid is not None
    try:
        yield status
    finally:
        broker.stop()


def deployment(bootstrap: str, prefix: str) -> KafkaSettings:
    """Settings of a fresh deployment under `prefix`, its topics created."""
    settings = KafkaSettings(
        bootstrap_servers=bootstrap, topic_prefix=prefix, schedules_partitions=PARTITIONS
    )
    create_topics(AdminClient(settings.consumer_config()), settings.layout)
    return settings


def publish(settings: KafkaSettings, schedules: Iterable[Schedule]) -> float:
    """Publish `schedules` through the real client; returns the seconds it took."""
    started = time.monotonic()
    iterator = iter(schedules)
    with SchedulesClient(settings, changed_by="bench") as client:
        while chunk := list(islice(iterator, _PUBLISH_CHUNK)):
            client.upsert_all(chunk)
    return time.monotonic() - started


def steady_ids(size: int) -> list[str]:
    return [f"steady-{n:07d}" for n in range(size)]


def steady_schedules(ids: Iterable[str]) -> Iterator[Schedule]:
    """Every minute, each spread over the minute by its jitter.

    The jitter offset is a hash of the run id in [0, 60 s), so the N fires of each minute arrive
    evenly spread and every occurrence of nominal minute M is due inside [M, M + 1 min): a window
    of whole nominal minutes holds exactly the occurrences due inside it.
    """
    for schedule_id in ids:
        yield Schedule(id=schedule_id, cron="* * * * *", jitter=timedelta(minutes=1))


def minute_after(instant: datetime) -> datetime:
    """The first whole minute strictly after `instant`."""
    return instant.replace(second=0, microsecond=0) + timedelta(minutes=1)


def run_ids(ids: Sequence[str], start: datetime, minutes: int) -> set[str]:
    """Run ids of the occurrences of every-minute schedules `ids` in the `minutes` from `start`."""
    nominals = [start + timedelta(minutes=m) for m in range(minutes)]
    return {run_id(i, n) for n in nominals for i in ids}


def wait_for(probe: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


def sleep_until(instant: datetime) -> None:
    remaining = (instant - datetime.now(UTC)).total_seconds()
    if remaining > 0:
        time.sleep(remaining)


def own_cpu_s() -> float:
    """This script's CPU seconds alone (its children, the broker and the tickers, excluded)."""
    times = psutil.Process().cpu_times()
    return float(times.user + times.system)


# -- tickers -----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def metric(port: int, name: str) -> dict[str, float]:
    """Samples of one metric from a ticker's /metrics page, keyed by their label text."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as page:
        text = page.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, value = line.rsplit(" ", 1)
            samples[key[len(name) :]] = float(value)
    return samples


@dataclass
class TickerProcess:
    """A real `kairos ticker` process, its metrics port and its log."""

    instance: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def gauge(self, name: str) -> float:
        try:
            return metric(self.port, name).get("", 0.0)
        except OSError:
            return 0.0

    def alive(self) -> bool:
        return self.process.poll() is None

    def cpu_s(self) -> float:
        return process_tree_cpu_s(self.process.pid)

    def thread_cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of the ticker's threads, summed by kind (the thread's name without
        its number: `rdk:broker`, `rocksdb:low`, ...; the main thread is the process's name)."""
        kinds: dict[str, float] = {}
        for thread in psutil.Process(self.process.pid).threads():
            comm = Path(f"/proc/{self.process.pid}/task/{thread.id}/comm")
            try:
                kind = comm.read_text().strip().rstrip("0123456789")
            except OSError:
                continue  # ended since listed
            kinds[kind] = kinds.get(kind, 0.0) + thread.user_time + thread.system_time
        return kinds

    def rss_mb(self) -> float:
        return float(psutil.Process(self.process.pid).memory_info().rss) / 2**20

    def kill(self) -> None:
        """SIGKILL: no goodbye to the group, no transaction finished; the failure to survive."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM (finish the open transaction, leave the group); SIGKILL if it hangs."""
        stop_process(self.process)


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 120) -> int:
    """SIGTERM, as a supervisor stops a service; SIGKILL after `timeout_s`. The exit code."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return int(process.returncode)


def start_ticker(
    settings: KafkaSettings,
    instance: str,
    state_dir: Path,
    log: Path,
    *,
    session_timeout_ms: int | None = None,
    log_level: str = "INFO",
    code: Path | None = None,
    env: dict[str, str] | None = None,
) -> TickerProcess:
    """Start a ticker; `session_timeout_ms` None keeps the product's default (10 s).

    `code`: a checkout to run the ticker from (a before/after in one run); this one by default.
    `env`: variables to add to this process's environment for the ticker's.
    """
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "kairos.cli",
        *ticker_arguments(
            settings,
            instance,
            state_dir,
            session_timeout_ms=session_timeout_ms,
            metrics_port=port,
            log_level=log_level,
        ),
    ]
    child_env = {**os.environ, **(env or {})}
    if code is not None:
        # `python -m` puts its working directory first on the path: `kairos` comes from there.
        child_env["PYTHONPATH"] = str(code.resolve())
    with log.open("ab") as out:
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, cwd=code, env=child_env
        )
    return TickerProcess(instance, process, port, log)


_ASSIGNED = re.compile(
    r"^(\S+ \S+) .*handover event=assigned .* partition=(\d+) .* restore=(\w+) "
    r"records=(\d+) seconds=([\d.]+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Restore:
    """A ticker restoring one partition's store as it was assigned, from its handover log line."""

    partition: int
    mode: str
    """`cold` (empty store: the whole changelog) or `warm` (the delta since the store's offset)."""
    records: int
    seconds: float
    """From the partition's assignment to its restore's end. Partitions restore in slices, side
    by side, so these overlap: their sum is not the time the restores took (`restore_span_s`)."""
    ended_at: datetime


def restores(log_text: str) -> list[Restore]:
    return [
        Restore(
            int(m[2]),
            m[3],
            int(m[4]),
            float(m[5]),
            datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f"),
        )
        for m in _ASSIGNED.finditer(log_text)
    ]


def restore_span_s(found: Sequence[Restore]) -> float:
    """Seconds from the first restore's start to the last one's end (the logs' own clock)."""
    if not found:
        return 0.0
    start = min(r.ended_at - timedelta(seconds=r.seconds) for r in found)
    return (max(r.ended_at for r in found) - start).total_seconds()


def wait_until_held(tickers: Sequence[TickerProcess], size: int, timeout_s: float = 1800) -> None:
    """Until the tickers together own every partition, each owns some, and they hold `size`.

    Each must own partitions so that a group still rebalancing does not count as settled.
    """

    def settled() -> bool:
        for ticker in tickers:
            if not ticker.alive():
                # The log goes with the benchmark's temporary directory: show its end here.
                tail = ticker.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"ticker {ticker.instance} exited:\n{tail}")
        owned = [ticker.gauge("kairos_ticker_owned_partitions") for ticker in tickers]
        held = sum(ticker.gauge("kairos_ticker_schedules_held") for ticker in tickers)
        return all(owned) and sum(owned) == PARTITIONS and held >= size

    wait_for(settled, timeout_s, f"the tickers to hold {size:,} schedules")


# -- observing fires ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Observation:
    """One RunRequested as a read_committed consumer saw it; instants in POSIX seconds."""

    seen_at: float
    run_id: str
    nominal_at: float
    due_at: float
    fired_at: float
    """The ticker's clock as it built the record, before its transaction committed."""
    schedules_partition: int
    ticker: str


class RunsObserver:
    """Reads the runs topic read_committed in a thread and stamps each record when it is seen.

    It starts at the end of the topic, so it sees what is committed after it started: start it
    well before `keep_from` (POSIX seconds), the start of the window. Records seen before then
    (the warm-up's fires) are dropped, not kept. Only bytes are kept while observing: decoding
    waits for `observations()`, after the measured window, so the observer takes as little CPU
    as it can from the ticker and the broker it measures on the same cores.
    """

    def __init__(self, settings: KafkaSettings, keep_from: float) -> None:
        self._keep_from = keep_from
        self._topic = settings.layout.name(TopicRole.RUNS)
        self._consumer = Consumer(
            settings.consumer_config(
                **{
                    "group.id": settings.deployment_id(f"bench-observer-{uuid.uuid4().hex[:8]}"),
                    "enable.auto.commit": False,
                    # The broker answers a parked fetch as soon as a commit makes records
                    # visible, so the default fetch.wait.max.ms stamps them as promptly as a
                    # 10 ms one did (measured), without the broker CPU of 100 empty fetches/s.
                    "isolation.level": "read_committed",
                }
            )
        )
        partitions = self._consumer.list_topics(self._topic, timeout=30).topics[self._topic]
        self._consumer.assign(
            [TopicPartition(self._topic, p, OFFSET_END) for p in partitions.partitions]
        )
        self._batches: list[tuple[float, list[tuple[bytes, bytes]]]] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._observe, name="runs-observer", daemon=True)
        self._thread.start()

    def _observe(self) -> None:
        consumer = self._consumer
        while not self._stop.is_set():
            first = consumer.poll(0.05)
            if first is None:
                continue
            # Stamped when the first record arrived; the rest of the batch was already queued.
            seen_at = time.time()
            messages = [first, *consumer.consume(num_messages=10_000, timeout=0)]
            if seen_at < self._keep_from:
                continue
            batch = []
            for message in messages:
                error = message.error()
                if error is not None:
                    self._errors.append(error.str())
                    continue
                key, value = message.key(), message.value()
                if key is not None and value is not None:
                    batch.append((key, value))
            self._batches.append((seen_at, batch))

    def wait_for(self, expected: set[str], deadline: float) -> set[str]:
        """Wait (until `deadline`, monotonic) to see every run id of `expected`; the unseen."""
        remaining = set(expected)
        scanned = 0
        while remaining and time.monotonic() < deadline:
            batches = self._batches[scanned:]
            scanned += len(batches)
            for _, batch in batches:
                for key, _ in batch:
                    remaining.discard(key.decode())
            if remaining:
                time.sleep(0.5)
        return remaining

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._consumer.close()
        if self._errors:
            raise RuntimeError(f"the observer's consumer failed: {self._errors[:3]}")

    def observations(self) -> list[Observation]:
        decode = make_codecs().run_requested.decode
        found = []
        for seen_at, batch in self._batches:
            for _, value in batch:
                record = decode(value)
                found.append(
                    Observation(
                        seen_at,
                        record["run_id"],
                        record["nominal_at"].timestamp(),
                        record["due_at"].timestamp(),
                        record["fired_at"].timestamp(),
                        record["schedules_partition"],
                        record["ticker_instance"],
                    )
                )
        return found


@dataclass(frozen=True)
class Tally:
    """Fires of the expected occurrences: lateness of each first sighting, losses, duplicates."""

    fires: int
    lost: int
    duplicated: int
    lateness_ms: dict[str, float]


def tally(observations: Iterable[Observation], expected: set[str]) -> Tally:
    """Count `expected` occurrences as seen; a run id seen twice is a duplicate fire."""
    sightings = Counter[str]()
    lateness = []
    for seen in observations:
        if seen.run_id not in expected:
            continue
        sightings[seen.run_id] += 1
        if sightings[seen.run_id] == 1:
            lateness.append((seen.seen_at - seen.due_at) * 1000)
    return Tally(
        fires=len(sightings),
        lost=len(expected) - len(sightings),
        duplicated=sum(1 for count in sightings.values() if count > 1),
        lateness_ms=percentiles(lateness),
    )
