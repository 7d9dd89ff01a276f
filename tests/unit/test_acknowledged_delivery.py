"""The acknowledged-delivery loop (`kairos.streams.kafka.delivery`) over an in-memory producer.

The fake delivers on `flush` (rule 5 of `kairos.streams.kafka.ports`); a test makes it refuse,
fill its queue, lose a report or fail fatally through `FakeKafka`'s hooks. The publishers' own
errors are checked through the publishers, with their producer swapped for the fake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest
from confluent_kafka import KafkaError, KafkaException

from kairos.core.schedule import Schedule
from kairos.streams.client import publisher
from kairos.streams.client.calendar_publisher import CalendarPublishError, CalendarsClient
from kairos.streams.client.schedule_publisher import PublishError, SchedulesClient
from kairos.streams.kafka.delivery import (
    Outgoing,
    Stamp,
    Undelivered,
    deliver_acknowledged,
    produce_when_room,
)
from kairos.streams.kafka.ports import Headers
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from tests.fakes.kafka import FakeClock, FakePlainProducer
from tests.fakes.kafka_log import FakeKafka

TOPIC = "kairos.things"


class NotPublishedError(Exception):
    """A caller's own error, holding what the helper said."""

    def __init__(self, failure: Undelivered) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclass
class RecordingProducer(FakePlainProducer):
    """The plain fake, remembering how long each poll and flush was allowed."""

    polls: list[float] = field(default_factory=list)
    flushes: list[float] = field(default_factory=list)

    def poll(self, timeout: float = -1) -> int:
        self.polls.append(timeout)
        return super().poll(timeout)

    def flush(self, timeout: float = -1) -> int:
        self.flushes.append(timeout)
        return super().flush(timeout)


@pytest.fixture
def kafka() -> FakeKafka:
    kafka = FakeKafka(FakeClock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC)))
    kafka.create_topic(TOPIC, 3)
    return kafka


@pytest.fixture
def producer(kafka: FakeKafka) -> RecordingProducer:
    return RecordingProducer(kafka)


def deliver(
    producer: RecordingProducer, *records: Outgoing, stamp: Stamp | None = None
) -> list[int]:
    messages = deliver_acknowledged(
        producer, TOPIC, records, NotPublishedError, flush_timeout_s=7.5, poll_s=0.25, stamp=stamp
    )
    offsets = [message.offset() for message in messages]
    assert None not in offsets
    return [offset for offset in offsets if offset is not None]


def stamp_counting(stamps: list[int]) -> Stamp:
    def stamp(topic: str, key: bytes, value: bytes | None, at_ms: int) -> Headers:
        stamps.append(at_ms)
        return [("signed", f"{topic}/{key.decode()}#{len(stamps)}".encode())]

    return stamp


def test_records_delivered_and_acknowledged_return_their_reports_in_order(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    stamps: list[int] = []
    offsets = deliver(
        producer,
        Outgoing(b"a", b"1", partition=2, headers=(("extra", b"x"),)),
        Outgoing(b"b", b"2", partition=2),
        Outgoing(b"c", None, partition=0),
        stamp=stamp_counting(stamps),
    )

    assert offsets == [0, 1, 0]
    assert producer.flushes == [7.5]
    assert producer.polls == []
    written = kafka.visible(TOPIC, 2)
    assert [(r.key, r.value) for r in written] == [(b"a", b"1"), (b"b", b"2")]
    # The stamp's headers come first, the record's own after them.
    assert written[0].headers == [("signed", b"kairos.things/a#1"), ("extra", b"x")]
    assert kafka.visible(TOPIC, 0)[0].value is None


def test_a_record_without_headers_is_produced_without_any(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    deliver(producer, Outgoing(b"a", b"1", partition=1))

    assert kafka.visible(TOPIC, 1)[0].headers is None


def test_a_full_queue_is_polled_and_the_record_produced_again_freshly_stamped(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    def queue_full() -> None:
        raise BufferError("Local: Queue full")

    kafka.before_next("produce", queue_full)
    stamps: list[int] = []

    offsets = deliver(producer, Outgoing(b"a", b"1", partition=0), stamp=stamp_counting(stamps))

    assert offsets == [0]
    assert producer.polls == [0.25]
    assert len(stamps) == 2, "a retried record is signed again, as late as it can be"
    assert kafka.visible(TOPIC, 0)[0].headers == [("signed", b"kairos.things/a#2")]


def test_a_delivery_error_reported_through_the_callback_becomes_the_callers_error(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    too_large = KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large")
    kafka.fail_delivery(TOPIC, too_large)  # the next record: the first

    with pytest.raises(NotPublishedError) as raised:
        deliver(producer, Outgoing(b"a", b"1", partition=0), Outgoing(b"b", b"2", partition=0))

    failure = raised.value.failure
    assert failure == Undelivered(0, "Broker: Message size too large", too_large, more=0)
    assert [r.key for r in kafka.visible(TOPIC, 0)] == [b"b"]


def test_every_unacknowledged_record_is_counted_and_the_first_blamed(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out")
    kafka.fail_delivery(TOPIC, timed_out)
    kafka.fail_delivery(TOPIC, timed_out)

    with pytest.raises(NotPublishedError) as raised:
        deliver(producer, *(Outgoing(key, b"v", partition=1) for key in (b"a", b"b", b"c")))

    assert raised.value.failure == Undelivered(0, "Local: Message timed out", timed_out, more=1)


def test_a_record_without_a_delivery_report_in_time_is_not_acknowledged(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    # The flush returns with the second record's report still outstanding.
    kafka.before_next("flush", producer.deliveries.pop)

    with pytest.raises(NotPublishedError) as raised:
        deliver(producer, Outgoing(b"a", b"1", partition=0), Outgoing(b"b", b"2", partition=0))

    assert raised.value.failure == Undelivered(1, None)


def test_a_record_the_producer_refuses_stops_the_batch_there(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    invalid = KafkaError(KafkaError._INVALID_ARG, "Local: Invalid argument")
    kafka.fail_next("produce", invalid)

    with pytest.raises(NotPublishedError) as raised:
        deliver(producer, Outgoing(b"a", b"1", partition=0), Outgoing(b"b", b"2", partition=0))

    failure = raised.value.failure
    assert failure == Undelivered(0, str(KafkaException(invalid)))
    assert isinstance(raised.value.__cause__, KafkaException)
    assert kafka.visible(TOPIC) == []
    assert producer.flushes == [], "nothing after a refused record is produced or flushed"


def test_a_fatal_error_out_of_the_flush_is_blamed_on_the_first_record(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    fenced = KafkaError(KafkaError._FENCED, "Local: This instance has been fenced", fatal=True)
    kafka.fail_next("flush", fenced)

    with pytest.raises(NotPublishedError) as raised:
        deliver(producer, Outgoing(b"a", b"1", partition=0), Outgoing(b"b", b"2", partition=0))

    assert raised.value.failure == Undelivered(0, fenced.str(), fenced)
    assert isinstance(raised.value.__cause__, KafkaException)


def test_a_fatal_error_reported_as_a_callbacks_system_error_is_the_callers_too(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    refused = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "refused", fatal=True)

    def callback_failed() -> None:
        raise SystemError("callback failed") from KafkaException(refused)

    kafka.before_next("flush", callback_failed)

    with pytest.raises(NotPublishedError) as raised:
        deliver(producer, Outgoing(b"a", b"1", partition=0))

    assert raised.value.failure == Undelivered(0, "refused", refused)


def test_a_system_error_without_a_kafka_error_behind_it_is_left_alone(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    def broken() -> None:
        raise SystemError("something else")

    kafka.before_next("flush", broken)

    with pytest.raises(SystemError, match="something else"):
        deliver(producer, Outgoing(b"a", b"1", partition=0))


def test_producing_when_room_leaves_a_refusal_to_the_caller(
    kafka: FakeKafka, producer: RecordingProducer
) -> None:
    """The executor and the ticker judge a refused record themselves (a smaller copy, a dead
    letter instead): only a full queue is retried."""
    attempts: list[int] = []

    def produce() -> None:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise BufferError("Local: Queue full")
        raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"))

    with pytest.raises(KafkaException, match="too large"):
        produce_when_room(producer, produce, poll_s=0.05)

    assert attempts == [0, 1]
    assert producer.polls == [0.05]


# -- the publishers' own errors, through the helper ---------------------------------------------

SETTINGS = KafkaSettings(bootstrap_servers="nowhere:9092")


def _publishers_producer(monkeypatch: pytest.MonkeyPatch, kafka: FakeKafka) -> RecordingProducer:
    producer = RecordingProducer(kafka)
    monkeypatch.setattr(publisher, "Producer", lambda config: producer)
    return producer


def test_the_schedule_publisher_says_how_many_more_events_failed(
    monkeypatch: pytest.MonkeyPatch, kafka: FakeKafka
) -> None:
    topic = SETTINGS.layout.name(TopicRole.SCHEDULES)
    kafka.create_topic(topic, SETTINGS.schedules_partitions)
    producer = _publishers_producer(monkeypatch, kafka)
    timed_out = KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out")
    kafka.fail_delivery(topic, timed_out)
    kafka.fail_delivery(topic, timed_out)
    schedules = [Schedule(id=f"s{n}", cron="0 2 * * *", timezone="UTC") for n in range(3)]

    with pytest.raises(PublishError) as raised:
        SchedulesClient(SETTINGS, changed_by="billing").upsert_all(schedules)

    assert str(raised.value) == (
        "schedule 's0' was not published: Local: Message timed out (and 1 more events)"
    )
    assert raised.value.kafka_error is timed_out
    assert producer.flushes == [30.0]


def test_the_schedule_publisher_says_how_long_it_waited_for_an_acknowledgement(
    monkeypatch: pytest.MonkeyPatch, kafka: FakeKafka
) -> None:
    kafka.create_topic(SETTINGS.layout.name(TopicRole.SCHEDULES), SETTINGS.schedules_partitions)
    producer = _publishers_producer(monkeypatch, kafka)
    kafka.before_next("flush", producer.deliveries.clear)

    with pytest.raises(PublishError) as raised:
        SchedulesClient(SETTINGS, changed_by="billing").upsert(
            Schedule(id="report", cron="0 2 * * *", timezone="UTC")
        )

    assert (
        str(raised.value) == "schedule 'report' was not published: no acknowledgement within 30.0s"
    )


def test_the_calendar_publisher_returns_versions_and_names_the_first_unacknowledged(
    monkeypatch: pytest.MonkeyPatch, kafka: FakeKafka
) -> None:
    topic = SETTINGS.layout.name(TopicRole.CALENDARS)
    kafka.create_topic(topic, 1)
    producer = _publishers_producer(monkeypatch, kafka)
    client = CalendarsClient(SETTINGS, changed_by="treasury", timeout_s=8.0)

    assert client.delete("holidays") == 0  # its `deleted` event; the tombstone follows at 1
    assert [r.value is None for r in kafka.visible(topic)] == [False, True]

    kafka.before_next("flush", producer.deliveries.clear)
    with pytest.raises(CalendarPublishError) as raised:
        client.delete("holidays")
    assert str(raised.value) == (
        "calendar 'holidays' was not published: no acknowledgement within 8s"
    )
    assert producer.flushes == [8.0, 8.0]
