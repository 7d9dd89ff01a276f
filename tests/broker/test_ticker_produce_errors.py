"""A record Kafka refuses to take never stops the ticker's transactions (real broker and producer).

The schedule-event contract keeps every record the ticker derives well under Kafka's default
limits; this is the last line, for a producer limit set lower than the records it must send.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from confluent_kafka import Consumer, Producer, TopicPartition

from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.services.ticker.transaction import FiringTransactions, Topics
from kairos.services.ticker.work import TransactionWork
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from tests.helpers import unique_name
from tests.kafka_helpers import read_topic

CODECS = make_codecs()


def firing(state: ScheduleState, nominal: datetime) -> tuple[Decision, ScheduleState, int]:
    schedule_id = state.schedule_id
    decision = Decision(run_id(schedule_id, nominal), schedule_id, nominal, nominal, Action.FIRE)
    return decision, state, 0


def test_a_run_too_large_to_produce_is_dead_lettered_and_the_transaction_commits(
    kafka_settings: KafkaSettings,
) -> None:
    layout = kafka_settings.layout
    topics = Topics(
        schedules=layout.name(TopicRole.SCHEDULES),
        changelog=layout.name(TopicRole.CHANGELOG),
        runs=layout.name(TopicRole.RUNS),
        run_events=layout.name(TopicRole.RUN_EVENTS),
        dead_letters=layout.name(TopicRole.DEAD_LETTERS),
    )
    # Above the dead letters' bound (512 KiB of copied value), below the large run.
    limit = 600_000
    producer = Producer(
        kafka_settings.client_config(
            **{"transactional.id": unique_name("ticker"), "message.max.bytes": limit}
        )
    )
    producer.init_transactions(30)
    group = Consumer(kafka_settings.consumer_config(**{"group.id": unique_name("tickers")}))
    nominal = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    small = Schedule(id="small", at=nominal)
    big = Schedule(id="big", at=nominal, job={"kind": "shell", "command": "x" * limit})
    work = TransactionWork()
    for schedule in (big, small):
        work.runs.append(firing(ScheduleState(schedule, 3, nominal), nominal))
    transactions = FiringTransactions(
        producer, topics, CODECS, "t", 10, clock=lambda: datetime.now(UTC), max_clock_ahead_ms=1000
    )
    fired_at = datetime.now(UTC)
    try:
        transactions.send(
            work,
            {},
            group,
            fired_at,
            runs=transactions.encode_runs(work, fired_at),
            checkpoints={},
            offsets_for=lambda _: [TopicPartition(topics.schedules, 0, 4)],
        )
    finally:
        group.close()

    fired = read_topic(kafka_settings.bootstrap_servers, topics.runs)
    assert [key for key, _ in fired] == [run_id("small", nominal)]
    (letter,) = [
        value
        for _, value in read_topic(
            kafka_settings.bootstrap_servers, topics.dead_letters, CODECS.dead_letter.decode
        )
    ]
    assert letter["source_topic"] == topics.runs
    assert letter["key"] == run_id("big", nominal).encode()
    assert letter["error_class"] == "MSG_SIZE_TOO_LARGE"
    assert "message.max.bytes" in letter["reason"]
    assert letter["value_size"] > limit and letter["truncated"] is True
