"""The audit of a window read from a margin before it finds what a whole-topic read finds.

Real tickers fire a history with a failover (one ticker SIGKILLed), a calendar change, a delete
and re-create, and a re-run; the window starts mid-history, so the time-indexed read really
leaves records out (checked independently with the broker's own `offsets_for_times`), and the
two reports, taken at the same instant, must be the same to the last field.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition
from typer.testing import CliRunner

from kairos.cli.app import app
from kairos.cli.audit import as_document, audit_window
from kairos.core.audit_report import Verdict
from kairos.core.instants import epoch_ms
from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from tests.helpers import eventually, just_after_a_second, sleep_until, unique_name
from tests.processes import start_ticker

SECOND = timedelta(seconds=1)
CALENDAR = "ops-closed"
MARGIN = SECOND
"""Ample on one machine: the tickers' clock is the broker's."""


def _apply_calendar(settings: KafkaSettings, tmp_path: Path, closed: bool) -> None:
    today = datetime.now(UTC).date()
    holidays = [{"date": (today + timedelta(days=d)).isoformat(), "name": "Closed"} for d in (0, 1)]
    document = {
        "calendars": [{"id": CALENDAR, "owner": "ops", "holidays": holidays if closed else []}]
    }
    path = tmp_path / f"calendar-{closed}.yaml"
    path.write_text(yaml.safe_dump(document))
    connection = ["--bootstrap-servers", settings.bootstrap_servers]
    applied = CliRunner().invoke(
        app,
        [
            *connection,
            "--topic-prefix",
            settings.topic_prefix,
            "calendars",
            "apply",
            "-f",
            str(path),
        ],
    )
    assert applied.exit_code == 0, applied.output


def _skipped_before(settings: KafkaSettings, role: TopicRole, instant: datetime) -> int:
    """How many records of the topic the broker says were appended before `instant`."""
    consumer = Consumer(
        {"bootstrap.servers": settings.bootstrap_servers, "group.id": unique_name("probe")}
    )
    try:
        topic = settings.layout.name(role)
        count = len(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        at_ms = epoch_ms(instant)
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, at_ms) for p in range(count)], timeout=10
        )
        skipped = 0
        for answer in found:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, answer.partition))
            skipped += (answer.offset if answer.offset >= 0 else high) - low
        return skipped
    finally:
        consumer.close()


def _holds(settings: KafkaSettings, start: datetime, end: datetime) -> bool:
    report, _ = audit_window(settings, start, end, as_of=datetime.now(UTC))
    findings = [f"{f.kind.value} {f.run_id} {f.detail}" for f in report.findings]
    assert report.verdict is Verdict.HOLDS, findings[:5]
    return True


def _calendar_excluded(t0: datetime, start: datetime) -> list[Schedule]:
    # Skipped at `start` under the closed calendar, fired at `start + 12s` under the open one:
    # each at least four seconds from the change at `start + 8s`. A ticker decides late (a
    # takeover, a loaded machine) with the calendar it holds then, while the audit dates each
    # version by its append time (docs/defaults.md, calendar limits): occurrences close to a
    # change would make the test race against it, not the reads it is about.
    closed = Schedule(
        id="ops.closed", every=12 * SECOND, start_at=start, exclude=[CALENDAR], owner="ops"
    )
    # Skips before the window: run events the windowed read leaves out.
    closed_early = Schedule(
        id="ops.closed-early",
        every=SECOND,
        start_at=t0,
        end_at=start - 2 * SECOND,
        exclude=[CALENDAR],
        owner="ops",
    )
    return [closed, closed_early]


def test_a_windowed_audit_finds_what_a_whole_topic_audit_finds(
    kafka_settings: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIROS_TICKER_GROUP", unique_name("tickers"))
    _apply_calendar(kafka_settings, tmp_path, closed=True)
    t0 = datetime.now(UTC).replace(microsecond=0) + 6 * SECOND
    start = t0 + 5 * SECOND
    steady = [Schedule(id=f"steady-{n:02d}", every=SECOND, start_at=t0) for n in range(24)]
    closed = _calendar_excluded(t0, start)
    again = Schedule(id="ops.again", every=SECOND, start_at=t0)
    client = SchedulesClient(kafka_settings, changed_by="windowed-audit-test")
    client.upsert_all([*steady, *closed, again])
    killed = start_ticker(kafka_settings, "a", tmp_path / "a", tmp_path)
    survivor = start_ticker(kafka_settings, "b", tmp_path / "b", tmp_path)
    try:
        killed.wait_for_log("handover event=assigned")
        survivor.wait_for_log("handover event=assigned")
        sleep_until(start + 3 * SECOND)
        killed.kill()
        sleep_until(start + 8 * SECOND)
        _apply_calendar(kafka_settings, tmp_path, closed=False)
        deleted_at = just_after_a_second()
        client.delete(again.id, reason="re-created below")
        sleep_until(max(start + 10 * SECOND, deleted_at + SECOND))
        client.upsert(again, reason="back")
        client.request_rerun(
            RerunRequest(
                request_id=uuid.uuid4().hex,
                schedule_id="steady-00",
                kind=RerunKind.BACKFILL,
                start=start,
                end=start + 2 * SECOND,
                overlap=None,
                requested_by="windowed-audit-test",
                requested_at=datetime.now(UTC),
                reason="the window re-run",
            )
        )
        end = start + 14 * SECOND
        sleep_until(end + 2 * SECOND)
        eventually(
            lambda: _holds(kafka_settings, start, end),
            timeout_s=60,
            interval_s=2,
            message="the whole history's audit does not hold after the failover",
        )
    finally:
        survivor.stop()
        client.close()

    as_of = datetime.now(UTC)
    whole, _ = audit_window(kafka_settings, start, end, as_of=as_of, whole_history=True)
    windowed, _ = audit_window(kafka_settings, start, end, as_of=as_of, margin=MARGIN)
    assert as_document(windowed, []) == as_document(whole, [])
    report = as_document(whole, [])
    assert report["reruns"] >= 3 and report["skipped"] >= 1 and report["fired"] > 100, report
    # The windowed read really began later: the broker holds records appended before it.
    assert _skipped_before(kafka_settings, TopicRole.RUNS, start - MARGIN) >= 24 * 3
    assert _skipped_before(kafka_settings, TopicRole.RUN_EVENTS, start - MARGIN) >= 3
