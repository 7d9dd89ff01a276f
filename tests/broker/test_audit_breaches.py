"""`kairos audit verify` names every breach the topics show, and tells a run an open transaction
hides from a lost one: crafted records on a real broker, judged by the real command."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Message, Producer

from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import run_requested_record
from tests.broker.test_replay_audit import Topics, as_json, kairos
from tests.helpers import unique_name

CODECS = make_codecs()
SECOND = timedelta(seconds=1)


def every_two_seconds(schedule_id: str, start: datetime) -> Schedule:
    return Schedule(id=schedule_id, every=2 * SECOND, start_at=start)


def fire_record(
    schedule: Schedule, nominal: datetime, *, fired_at: datetime | None = None
) -> tuple[str, bytes]:
    """A `RunRequested` as the ticker writes it (its `lateness_ms` clamped at 0)."""
    decision = Decision(run_id(schedule.id, nominal), schedule.id, nominal, nominal, Action.FIRE)
    record = run_requested_record(
        decision,
        ScheduleState(schedule, version=0, next_nominal=None),
        fired_at=fired_at or nominal + 30 * timedelta(milliseconds=1),
        partition=0,
        ticker_instance="ticker-a",
    )
    return decision.run_id, CODECS.run_requested.encode(record)


class Records(Topics):
    """The test's writer, plus deletes, fires at chosen instants, and dead letters."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(settings)
        self.offsets: dict[str, tuple[int, int]] = {}

    def delete(self, schedule: Schedule, changed_at: datetime) -> None:
        event = {
            "schedule_id": schedule.id,
            "event_id": uuid.uuid4(),
            "change": "deleted",
            "definition": None,
            "revision": 2,
            "changed_by": "mallory",
            "changed_at": changed_at,
            "reason": "deleted by the test",
        }
        self._send(TopicRole.SCHEDULES, schedule.id, CODECS.schedule_event.encode(event))

    def fire_at(self, schedule: Schedule, nominal: datetime, fired_at: datetime) -> None:
        key, value = fire_record(schedule, nominal, fired_at=fired_at)
        self._send(TopicRole.RUNS, key, value)

    def fire_noting_offset(self, schedule: Schedule, nominal: datetime) -> None:
        key, value = fire_record(schedule, nominal)

        def delivered(error: Any, message: Message) -> None:
            assert error is None, error
            partition, offset = message.partition(), message.offset()
            assert partition is not None and offset is not None
            self.offsets[key] = (partition, offset)

        self.producer.produce(
            self.layout.name(TopicRole.RUNS), key=key, value=value, on_delivery=delivered
        )

    def refused(self, key: str, reason: str) -> None:
        """The dead letter an executor writes when it refuses a fire at admission."""
        partition, offset = self.offsets[key]
        record = {
            "source_topic": self.layout.name(TopicRole.RUNS),
            "source_partition": partition,
            "source_offset": offset,
            "key": key.encode(),
            "value": b"",
            "reason": reason,
            "error_class": "JobParamsError",
            "dead_lettered_at": datetime.now(UTC),
            "dead_lettered_by": "executor:exec-1",
        }
        self._send(TopicRole.DEAD_LETTERS, key, CODECS.dead_letter.encode(record))


@pytest.fixture
def held_open(kafka_settings: KafkaSettings) -> Iterator[Producer]:
    """A transactional producer, as a ticker that died mid-transaction leaves one."""
    producer = Producer(
        kafka_settings.client_config(
            **{"transactional.id": unique_name("dead-ticker"), "transaction.timeout.ms": 60_000}
        )
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    yield producer
    producer.abort_transaction(30)


def window(now: datetime) -> list[str]:
    return [
        "--from",
        f"{now - 20 * SECOND:%Y-%m-%dT%H:%M:%SZ}",
        "--to",
        f"{now - 4 * SECOND:%Y-%m-%dT%H:%M:%SZ}",
        "--grace",
        "1s",
    ]


@dataclass(frozen=True)
class Breaches:
    """What the `breaches` fixture wrote, 20 s of two-second schedules up to `now`."""

    settings: KafkaSettings
    now: datetime
    after_delete: str
    early: str
    unknown: str
    hidden: str
    held: Schedule
    transaction: Producer


@pytest.fixture
def breaches(kafka_settings: KafkaSettings, held_open: Producer) -> Breaches:
    """billing.close is deleted at T-11s and fired at T-10s; ops.early fires T-14s 1.5 s before
    it is due; ghost is a schedule no event names; ops.held's T-12s fire is in a transaction a
    dead ticker left open."""
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - 20 * SECOND
    closed = every_two_seconds("billing.close", start)
    early = every_two_seconds("ops.early", start)
    held = every_two_seconds("ops.held", start)
    records = Records(kafka_settings)
    for schedule in (closed, early, held):
        records.schedule(schedule, now - 30 * SECOND, "oscar")
    records.delete(closed, now - 11 * SECOND)
    for n in range(8):  # T-20s .. T-6s
        nominal = start + 2 * n * SECOND
        if nominal <= now - 10 * SECOND:
            records.fire(closed, nominal)
        if n == 3:  # by the ticker's own record, lateness_ms clamped at 0
            records.fire_at(early, nominal, fired_at=nominal - 1500 * timedelta(milliseconds=1))
        else:
            records.fire(early, nominal)
        if nominal != now - 12 * SECOND:
            records.fire(held, nominal)
    records.fire(every_two_seconds("ghost", start), start)
    records.flush()
    hidden, value = fire_record(held, now - 12 * SECOND)
    held_open.produce(kafka_settings.layout.name(TopicRole.RUNS), key=hidden, value=value)
    assert held_open.flush(30) == 0
    return Breaches(
        kafka_settings,
        now,
        after_delete=run_id(closed.id, now - 10 * SECOND),
        early=run_id(early.id, now - 14 * SECOND),
        unknown=run_id("ghost", start),
        hidden=hidden,
        held=held,
        transaction=held_open,
    )


def test_audit_verify_names_a_fire_after_a_delete_an_early_fire_an_unknown_run_and_a_hidden_one(
    breaches: Breaches, tmp_path: Path
) -> None:
    settings, now = breaches.settings, breaches.now
    result = kairos(settings, "audit", "verify", *window(now), "--json")
    assert result.exit_code == 1, result.output
    report = as_json(result)
    assert (report["verdict"], report["ok"]) == ("breach", False)
    assert {(f["kind"], f["run_id"]) for f in report["findings"]} == {
        ("fired_after_delete", breaches.after_delete),
        ("early", breaches.early),
        ("unexpected", breaches.unknown),
        ("hidden_by_open_transaction", breaches.hidden),
    }
    (early,) = [f for f in report["findings"] if f["kind"] == "early"]
    assert "fired 1500 ms before it was due" in early["detail"]
    assert (early["schedule_id"], report["lost"], report["hidden"]) == ("ops.early", 0, 1)
    (transaction,) = report["open_transactions"]
    runs = settings.layout.name(TopicRole.RUNS)
    assert transaction["topic"] == runs
    held_partition = partition_for(breaches.hidden, settings.layout.runs_partitions)
    assert transaction["partition"] == held_partition
    assert transaction["pending_offsets"] >= 1 and transaction["since"] is not None

    metrics = tmp_path / "kairos-audit.prom"
    human = kairos(settings, "audit", "verify", *window(now), "--metrics-file", str(metrics))
    assert human.exit_code == 1
    # What KairosAuditBreach reads, through node_exporter's textfile collector.
    written = metrics.read_text()
    assert 'kairos_audit_verdict{verdict="breach"} 1.0' in written, written
    assert 'kairos_audit_findings{kind="early"} 1.0' in written
    assert f"FIRED_AFTER_DELETE {breaches.after_delete}" in human.stdout
    assert f"EARLY {breaches.early}" in human.stdout
    assert f"UNEXPECTED {breaches.unknown}" in human.stdout
    assert f"OPEN TRANSACTION {runs} partition {held_partition}" in human.stdout


def test_a_run_an_open_transaction_hides_is_inconclusive_until_the_transaction_ends(
    breaches: Breaches,
) -> None:
    settings, held = breaches.settings, breaches.held.id
    waiting = kairos(settings, "audit", "verify", *window(breaches.now), "--schedule", held)
    assert waiting.exit_code == 2, waiting.output
    assert "INCONCLUSIVE" in waiting.stdout
    assert f"HIDDEN_BY_OPEN_TRANSACTION {breaches.hidden}" in waiting.stdout
    # Aborted, the run never fired: now it is lost.
    breaches.transaction.abort_transaction(30)
    breaches.transaction.begin_transaction()  # for the fixture's own abort
    ended = kairos(settings, "audit", "verify", *window(breaches.now), "--schedule", held, "--json")
    assert ended.exit_code == 1, ended.output
    report = as_json(ended)
    assert [r["run_id"] for s in report["schedules"] for r in s["lost_runs"]] == [breaches.hidden]
    assert report["open_transactions"] == []


def test_audit_verify_with_outcomes_fails_on_runs_refused_at_admission_or_never_reported(
    kafka_settings: KafkaSettings,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    start = now - 20 * SECOND
    jobs = every_two_seconds("ops.jobs", start)
    records = Records(kafka_settings)
    records.schedule(jobs, now - 30 * SECOND, "oscar")
    refused, silent = run_id(jobs.id, now - 16 * SECOND), run_id(jobs.id, now - 12 * SECOND)
    for n in range(8):
        nominal = start + 2 * n * SECOND
        records.fire_noting_offset(jobs, nominal)
        if run_id(jobs.id, nominal) not in (refused, silent):
            records.event(jobs, nominal, "succeeded")
    records.flush()
    records.refused(refused, "job kind 'noop' does not take parameters")
    records.flush()

    counted = kairos(kafka_settings, "audit", "verify", *window(now), "--json")
    assert counted.exit_code == 0, counted.output
    checked = kairos(
        kafka_settings,
        "audit",
        "verify",
        *window(now),
        "--outcomes",
        "--outcome-grace",
        "1s",
        "--json",
    )
    assert checked.exit_code == 1, checked.output
    report = as_json(checked)
    assert report["outcome_grace_ms"] == 1000
    assert [(f["kind"], f["run_id"]) for f in report["findings"]] == [
        ("dead_lettered_at_admission", refused),
        ("unreported", silent),
    ]
    assert "JobParamsError" in report["findings"][0]["detail"]


def test_a_transaction_in_flight_that_hides_nothing_in_the_window_leaves_the_audit_holding(
    kafka_settings: KafkaSettings, held_open: Producer
) -> None:
    # A live ticker nearly always has a transaction open, holding its newest fires.
    now = datetime.now(UTC).replace(microsecond=0)
    steady = every_two_seconds("ops.steady", now - 20 * SECOND)
    records = Records(kafka_settings)
    records.schedule(steady, now - 30 * SECOND, "oscar")
    for n in range(8):
        records.fire(steady, now - 20 * SECOND + 2 * n * SECOND)
    records.flush()
    key, value = fire_record(steady, now)
    held_open.produce(kafka_settings.layout.name(TopicRole.RUNS), key=key, value=value)
    assert held_open.flush(30) == 0

    arguments = [*window(now)[:4], "--grace", "30s"]
    result = kairos(kafka_settings, "audit", "verify", *arguments, "--json")
    assert result.exit_code == 0, result.output
    report = as_json(result)
    assert (report["verdict"], report["fired"], report["findings"]) == ("holds", 8, [])
    assert len(report["open_transactions"]) == 1
    human = kairos(kafka_settings, "audit", "verify", *arguments)
    assert human.exit_code == 0, human.output
    assert "1 partition(s) had a transaction in flight, hiding nothing" in human.stdout
    assert "OPEN TRANSACTION" not in human.stdout
