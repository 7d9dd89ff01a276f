"""Acknowledged delivery: produce records, wait for the broker's word on each, say what failed.

What belongs here is the mechanics every producer of Kairos repeats: producing through a full
local queue, flushing, and telling a refusal, a fatal producer error or a record the broker did
not acknowledge apart. What a caller says about a failure (its error type and wording) does not:
each caller turns an `Undelivered` into its own error, so one fix to the loop reaches every
publisher while their messages stay theirs.

`deliver_acknowledged` is the whole loop, for publishers that return only once every record is
acknowledged. `produce_when_room` is its produce step, for producers that wait for their
acknowledgements their own way (the executor's batch flush, the ticker's transaction).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from confluent_kafka import KafkaError, KafkaException, Message

from kairos.streams.kafka.authorization import kafka_error_of
from kairos.streams.kafka.ports import DeliveryCallback, Headers, Producer

ANY_PARTITION = -1
"""librdkafka's RD_KAFKA_PARTITION_UA: the configured partitioner chooses from the key."""

Stamp = Callable[[str, bytes, bytes | None, int], Headers]
"""Headers made from (topic, key, value, wall clock in ms) right before each attempt to produce
a record: a signature is judged against the record's append time, so it is made as late as it
can be (`kairos.streams.wire.signing.Signer.headers` is one)."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record to deliver; its `headers` follow the stamp's."""

    key: bytes
    value: bytes | None
    partition: int = ANY_PARTITION
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class Undelivered:
    """Why records were not published, for the caller to say in its own error."""

    index: int
    """The record to blame: the one refused, the first not acknowledged, or the first of all
    for a fatal error of the producer."""
    reason: str | None
    """The client's or the broker's words; `None` when no delivery report came within the
    flush's timeout (the caller says how long that was)."""
    kafka_error: KafkaError | None = None
    more: int = 0
    """How many further records were not acknowledged either."""


Failed = Callable[[Undelivered], Exception]
"""The caller's error for an `Undelivered`."""


def produce_when_room(producer: Producer, produce: Callable[[], None], *, poll_s: float) -> None:
    """Call `produce` until the producer's local queue takes the record.

    A full queue (`BufferError`) drains only while delivery reports are served, so each retry
    polls for `poll_s` first. Any other refusal (`KafkaException`) is raised to the caller.
    """
    while True:
        try:
            produce()
            return
        except BufferError:
            producer.poll(poll_s)


def deliver_acknowledged(
    producer: Producer,
    topic: str,
    records: Sequence[Outgoing],
    failed: Failed,
    *,
    flush_timeout_s: float,
    poll_s: float,
    stamp: Stamp | None = None,
) -> list[Message]:
    """Produce `records` in order, flush, and return each one's delivery report, in order.

    Raises the error `failed` makes of the first record the producer refused, of a fatal error
    of the producer (blamed on the first record), or of the first record without a successful
    delivery report once the flush returned.
    """
    reports: dict[int, tuple[KafkaError | None, Message]] = {}
    for index, record in enumerate(records):
        attempt = partial(
            _produce, producer, topic, record, partial(_store_report, reports, index), stamp
        )
        try:
            produce_when_room(producer, attempt, poll_s=poll_s)
        except KafkaException as refused:
            raise failed(Undelivered(index, str(refused))) from refused
    try:
        producer.flush(flush_timeout_s)
    except (KafkaException, SystemError) as failure:
        # A fatal error (say, the cluster refusing the producer id) is raised out of the flush;
        # confluent-kafka then reports it as a SystemError of the next callback, with the
        # KafkaException as its cause.
        fatal = kafka_error_of(failure)
        if fatal is None:
            raise
        raise failed(Undelivered(0, fatal.str(), fatal)) from failure
    unacknowledged = [
        index
        for index in range(len(records))
        if index not in reports or reports[index][0] is not None
    ]
    if unacknowledged:
        first = unacknowledged[0]
        error = reports[first][0] if first in reports else None
        reason = None if error is None else error.str()
        raise failed(Undelivered(first, reason, error, len(unacknowledged) - 1))
    return [reports[index][1] for index in range(len(records))]


def _produce(
    producer: Producer,
    topic: str,
    record: Outgoing,
    on_delivery: DeliveryCallback,
    stamp: Stamp | None,
) -> None:
    stamped = [] if stamp is None else stamp(topic, record.key, record.value, _now_ms())
    producer.produce(
        topic,
        key=record.key,
        value=record.value,
        partition=record.partition,
        headers=[*stamped, *record.headers] or None,
        on_delivery=on_delivery,
    )


def _store_report(
    reports: dict[int, tuple[KafkaError | None, Message]],
    index: int,
    error: KafkaError | None,
    message: Message,
) -> None:
    reports[index] = (error, message)


def _now_ms() -> int:
    return int(time.time() * 1000)
