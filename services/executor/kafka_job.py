"""`kafka` jobs: one record produced, keyed by the run id, to a topic the team may write.

The executor produces as its own principal, so Kafka's ACLs cannot tell one team's job from
another's, nor from the executor's own run events: which topics a team's jobs write is decided
here (`egress.topic_refusal_reason`), and Kairos's own topics are never among them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message

from kairos.services.executor.egress import topic_refusal_reason
from kairos.services.executor.jobs import (
    INTERVAL_FIELDS,
    Invocation,
    JobFailedError,
    KafkaJob,
    payload_bytes,
)
from kairos.streams.kafka.ports import Producer
from kairos.streams.kafka.topics import TopicLayout


@dataclass(frozen=True)
class JobProducer:
    """The executor's producer of `kafka` jobs, and the deployment whose topics it refuses."""

    producer: Producer
    """Shared by the worker threads (librdkafka's producer is thread-safe)."""
    layout: TopicLayout


def run_kafka(job: KafkaJob, invocation: Invocation, job_producer: JobProducer) -> None:
    refusal = topic_refusal_reason(
        job.topic, invocation.owner, invocation.runtime.kafka_topics, job_producer.layout
    )
    if refusal is not None:
        raise JobFailedError(refusal)
    producer = job_producer.producer
    delivered = threading.Event()
    failure: list[str] = []

    def on_delivery(error: KafkaError | None, _: Message) -> None:
        if error is not None:
            failure.append(error.str())
        delivered.set()

    producer.produce(
        job.topic,
        key=invocation.run_id,
        value=payload_bytes(job.payload),
        headers=[
            *((n, v) for n, v in job.headers.items() if n.lower() not in _OURS),
            ("kairos-run-id", invocation.run_id),
            *((_header_name(name), value) for name, value in invocation.interval_fields().items()),
        ],
        on_delivery=on_delivery,
    )
    # Several workers share the producer; whichever polls serves every delivery callback.
    while not delivered.is_set() and invocation.remaining_s() > 0:
        producer.poll(min(0.1, invocation.remaining_s()))
    if not delivered.is_set():
        raise JobFailedError(invocation.timed_out_reason())
    if failure:
        raise JobFailedError(f"producing to {job.topic} failed: {failure[0]}")


def _header_name(field: str) -> str:
    """`INTERVAL_START_LOCAL` -> `kairos-interval-start-local`."""
    return "kairos-" + field.lower().replace("_", "-")


_OURS = frozenset({"kairos-run-id", *(_header_name(name) for name in INTERVAL_FIELDS)})
"""Headers a job's own never pass for (case-insensitive, as a consumer may read them)."""
