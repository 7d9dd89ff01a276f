"""The audit's proof that waiting runs waited, on a real broker, windowed and whole.

Crafted records as tickers and executors write them: an upstream period that succeeded long
before the audited window (appended before the window's read margin, so a windowed read must
reach back for it), a run that started before its upstream period succeeded, and a run left
waiting. The windowed audit and the whole-history one, taken at the same instants, must agree to
the last field.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kairos.cli.audit import as_document, audit_window
from kairos.core.audit_report import Verdict
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import PeriodMatch
from kairos.core.upstream_wait import Resolution, UpstreamPeriod
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.records import run_requested_record
from tests.broker.test_replay_audit import CODECS, Topics
from tests.helpers import sleep_until

SECOND = timedelta(seconds=1)
MARGIN = SECOND
"""The read margin: ample on one machine, and short, so the upstream's old success lies
before the window's margin."""


class Records(Topics):
    def waiting_fire(
        self, schedule: Schedule, nominal: datetime, upstream: tuple[str, datetime]
    ) -> None:
        """A fire of `schedule` at `nominal` waiting for the upstream period `upstream`."""
        decision = Decision(
            run_id(schedule.id, nominal), schedule.id, nominal, nominal, Action.FIRE
        )
        period = UpstreamPeriod(
            upstream[0], PeriodMatch.LATEST_BEFORE, Resolution.MATCHED, period_at=upstream[1]
        )
        record = run_requested_record(
            decision,
            ScheduleState(schedule, version=0, next_nominal=None),
            fired_at=nominal + 10 * timedelta(milliseconds=1),
            partition=0,
            ticker_instance="ticker-a",
            upstream=[period],
        )
        self._send(TopicRole.RUNS, decision.run_id, CODECS.run_requested.encode(record))

    def step(self, schedule: Schedule, nominal: datetime, kind: str, at: datetime, by: str) -> None:
        """A run event: `at` is when the attempt started (`started`) or ended (`succeeded`)."""
        record: dict[str, Any] = {
            "run_id": run_id(schedule.id, nominal),
            "schedule_id": schedule.id,
            "kind": kind,
            "attempt": 1,
            "executor_instance": by,
            "nominal_at": nominal,
            "fired_at": nominal,
            "started_at": at if kind == "started" else at - SECOND,
            "finished_at": None if kind == "started" else at,
            "reason": None,
            "next_attempt_at": None,
        }
        self._send(TopicRole.RUN_EVENTS, record["run_id"], CODECS.run_event.encode(record))


def _waiting(schedule_id: str, upstream: str, at: datetime) -> Schedule:
    return Schedule.model_validate(
        {"id": schedule_id, "at": at, "upstream": [{"schedule": upstream}], "upstream_wait": "1s"}
    )


def test_the_windowed_audit_reaches_back_for_old_upstream_periods_and_finds_what_whole_does(
    kafka_settings: KafkaSettings,
) -> None:
    t0 = datetime.now(UTC).replace(microsecond=0) + 2 * SECOND
    extract = Schedule(id="extract", at=t0 + 2 * SECOND)
    load = Schedule(id="load", at=t0 + 11 * SECOND)
    report = _waiting("report", "extract", t0 + 12 * SECOND)  # waits for the old period
    digest = _waiting("digest", "load", t0 + 13 * SECOND)  # starts before load succeeds
    idle = _waiting("idle", "extract", t0 + 13 * SECOND)  # never starts nor ends
    records = Records(kafka_settings)
    for schedule in (extract, load, report, digest, idle):
        records.schedule(schedule, t0, "the test")
    sleep_until(t0 + 2 * SECOND)
    records.fire(extract, t0 + 2 * SECOND)
    records.step(extract, t0 + 2 * SECOND, "succeeded", t0 + 3 * SECOND, "exec-up")
    records.flush()
    start, end = t0 + 12 * SECOND, t0 + 14 * SECOND
    # Appended before the windowed read begins (the window's start less the margin).
    assert datetime.now(UTC) < start - MARGIN
    sleep_until(start)
    records.fire(load, t0 + 11 * SECOND)
    records.waiting_fire(report, start, ("extract", t0 + 2 * SECOND))
    records.step(report, start, "started", start + SECOND // 2, "exec-down")
    records.flush()
    sleep_until(t0 + 13 * SECOND)  # a fire appended before its due instant is early
    records.waiting_fire(digest, t0 + 13 * SECOND, ("load", t0 + 11 * SECOND))
    records.waiting_fire(idle, t0 + 13 * SECOND, ("extract", t0 + 2 * SECOND))
    records.step(digest, t0 + 13 * SECOND, "started", t0 + 13 * SECOND, "exec-down")
    records.step(load, t0 + 11 * SECOND, "succeeded", t0 + 15 * SECOND, "exec-up")
    records.flush()

    as_of = datetime.now(UTC)
    whole, _ = audit_window(kafka_settings, start, end, as_of=as_of, whole_history=True)
    windowed, _ = audit_window(kafka_settings, start, end, as_of=as_of, margin=MARGIN)
    assert as_document(windowed, []) == as_document(whole, [])
    assert whole.verdict is Verdict.BREACH
    assert [(f.kind.value, f.run_id) for f in whole.findings] == [
        ("started_before_upstream", run_id("digest", t0 + 13 * SECOND))
    ]
    assert "2s before upstream load's period" in whole.findings[0].detail

    # Past idle's wait and the grace, it is reported left waiting; report and digest are not.
    later = as_of + 6 * 60 * SECOND
    whole, _ = audit_window(kafka_settings, start, end, as_of=later, whole_history=True)
    windowed, _ = audit_window(kafka_settings, start, end, as_of=later, margin=MARGIN)
    assert as_document(windowed, []) == as_document(whole, [])
    assert sorted((f.kind.value, f.run_id) for f in whole.findings) == [
        ("started_before_upstream", run_id("digest", t0 + 13 * SECOND)),
        ("waiting_past_deadline", run_id("idle", t0 + 13 * SECOND)),
    ]

    # With --schedule, the upstream's history and events are read too: the same verdict.
    one, _ = audit_window(kafka_settings, start, end, as_of=as_of, schedule="report", margin=MARGIN)
    assert one.ok, one.findings
