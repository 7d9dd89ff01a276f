"""The real processes and reads the fuzz run needs: a ticker, an executor, whole-topic reads.

The ticker and the executor are `kairos ticker` / `kairos executor` processes with their logs in
files, so a crash is a dead process and a Python traceback in its log, as in production.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Message,
    Producer,
    TopicPartition,
)

from bench.common import TickerProcess, start_ticker, stop_process, wait_for
from bench.fuzz.records import FuzzRecord
from kairos.cli.executor import executor_arguments
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole

TRACEBACK = "Traceback (most recent call last)"
_PRODUCER_MAX_BYTES = 2_000_000
"""Above every record of the storm: the client must not refuse what the broker is meant to see."""


@dataclass
class Service:
    """One `kairos` service process and its log."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, as a supervisor stops it; SIGKILL after two minutes. The exit code."""
        return stop_process(self.process)


def ticker(settings: KafkaSettings, workdir: Path) -> tuple[Service, TickerProcess]:
    started = start_ticker(settings, "fuzz-ticker", workdir / "ticker", workdir / "ticker.log")
    return Service("ticker", started.process, started.log), started


def executor(settings: KafkaSettings, workdir: Path) -> Service:
    arguments = executor_arguments(
        settings,
        "fuzz-executor",
        workdir / "executor",
        concurrency=8,
        lease="5s",
        poll_interval="100ms",
        offset_commit_interval="200ms",
    )
    log = workdir / "executor.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kairos.cli", *arguments], stdout=out, stderr=subprocess.STDOUT
        )
    return Service("executor", process, log)


def wait_until_serving(executor_service: Service, timeout_s: float = 120) -> None:
    def assigned() -> bool:
        if not executor_service.alive():
            raise RuntimeError(f"the executor exited:\n{executor_service.log_text()[-3000:]}")
        return "partitions assigned" in executor_service.log_text()

    wait_for(assigned, timeout_s, "the executor to be assigned the runs partitions")


def produce(
    settings: KafkaSettings, topic_names: dict[TopicRole, str], records: list[FuzzRecord]
) -> float:
    """Send every record to its own partition; each learns its offset, or the broker's refusal.
    The seconds it took.

    A compacted topic refuses a record without a key, and the refusal fails every record of its
    batch: those records go alone, each in a batch of its own, after the others.
    """
    started = time.monotonic()
    producer = Producer(
        settings.producer_config(
            **{"message.max.bytes": _PRODUCER_MAX_BYTES, "linger.ms": 20, "acks": "all"}
        )
    )
    compacted = {topic_names[TopicRole.SCHEDULES]}
    alone = [r for r in records if r.key is None and topic_names[r.topic] in compacted]
    batched = [r for r in records if not (r.key is None and topic_names[r.topic] in compacted)]
    failures: list[str] = []
    for record in batched:
        _send(producer, topic_names[record.topic], record, failures)
    if producer.flush(120) or failures:
        raise RuntimeError(f"the storm was not all delivered: {failures[:3]}")
    for record in alone:
        _send(producer, topic_names[record.topic], record, None)
        producer.flush(30)
    return time.monotonic() - started


def _send(producer: Producer, topic: str, record: FuzzRecord, failures: list[str] | None) -> None:
    """Produce one record; a refusal fails the storm unless `failures` is None (expected)."""

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is None:
            record.offset = message.offset()
        elif failures is None:
            record.broker_error = error.str()
        else:
            failures.append(f"{record.topic}/{record.cls}: {error}")

    while True:
        try:
            producer.produce(
                topic,
                value=record.value,
                key=record.key,
                partition=record.partition,
                on_delivery=delivered,
            )
            break
        except BufferError:
            producer.poll(0.5)
    producer.poll(0)


@dataclass(frozen=True)
class Raw:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_topic(settings: KafkaSettings, topic: str, timeout_s: float = 120) -> list[Raw]:
    """Every committed record of `topic`, from the beginning to its end as the read starts."""
    consumer = Consumer(
        settings.consumer_config(
            **{
                "group.id": settings.deployment_id(f"fuzz-reader-{uuid.uuid4().hex[:8]}"),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        ends = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        found: list[Raw] = []
        deadline = time.monotonic() + timeout_s
        assigned = [TopicPartition(topic, p) for p in ends]
        # A transaction's marker takes the last offset without being delivered: the position,
        # which passes markers, tells the end, not the last offset seen.
        while time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                if message.error() is not None:
                    continue
                partition, offset = message.partition(), message.offset()
                assert partition is not None and offset is not None
                found.append(Raw(partition, offset, message.key(), message.value()))
            positions = consumer.position(assigned)
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
        return found
    finally:
        consumer.close()


_DECODE_REASON = re.compile(r"cannot decode \S+: (\w+):")
_PARTICULARS = re.compile(r"b?'[^']*'|\brun \S+:|\d+")


def reason_class(reason: str) -> str:
    """The short name of a refusal's reason: the decode failure, else its opening words."""
    found = _DECODE_REASON.search(reason)
    if found:
        return found[1]
    # Names and numbers differ from record to record; the words around them are the reason.
    general = _PARTICULARS.sub("…", reason)
    return " ".join(general.split()[:8])
