"""What a window whose runs wait for upstream periods reads, and from where: the run events from
the read margin before the earliest upstream period (a weekly upstream's, six days before the
window), only those periods' successes besides the window's own, the upstream's history too with
`--schedule`; and a whole-history read that finds the same.

The reader is a stand-in that serves records by their append instant, as the time-indexed reads
of `kairos.streams.readers.history.HistoryReader` do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from kairos.cli.audit_read import AuditRead, AuditWindow, read_audit_window
from kairos.core.audit import (
    FiredRun,
    HistoryEvent,
    OpenTransaction,
    RunEventRecord,
    expected_occurrences,
    fired_through,
    stopped_spans,
)
from kairos.core.audit_dependencies import RunWaiting, UpstreamPeriod
from kairos.core.audit_margin import CLOCK_MARGIN
from kairos.core.audit_report import DEFAULT_EARLY_TOLERANCE, AuditReport, FindingKind
from kairos.core.audit_verdict import verify
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.streams.readers.history import HistoryReader
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.history_records import TopicRecord, run_event

CODECS = make_codecs()

SUNDAY = datetime(2027, 1, 10, tzinfo=UTC)
START, END = SUNDAY.replace(hour=5), SUNDAY.replace(hour=6)
MONDAY_PERIOD = datetime(2027, 1, 4, 6, tzinfo=UTC)
"""The weekly upstream's latest period before the window: six days before it."""
SECOND = timedelta(seconds=1)

WEEKLY = Schedule.model_validate({"id": "weekly", "cron": "0 6 * * 1"})
REPORT = Schedule.model_validate(
    {"id": "report", "cron": "0 * * * *", "upstream": [{"schedule": "weekly"}]}
)
HISTORY = [
    HistoryEvent("weekly", 1, 0, "upserted", WEEKLY, datetime(2026, 12, 1, tzinfo=UTC)),
    HistoryEvent("report", 0, 0, "upserted", REPORT, datetime(2026, 12, 1, tzinfo=UTC)),
]
REPORT_RUN = run_id("report", START)


def _event(
    schedule_id: str, nominal: datetime, kind: str, when: datetime, offset: int
) -> RunEventRecord:
    return RunEventRecord(
        run_id(schedule_id, nominal),
        schedule_id,
        kind,
        1,
        "exec-1",
        nominal,
        nominal,
        when if kind == "started" else when - 60 * SECOND,
        None if kind == "started" else when,
        None,
        None,
        0,
        offset,
    )


FIRE = FiredRun(
    REPORT_RUN,
    "report",
    START,
    START,
    START,
    0,
    1,
    "ticker-a",
    0,
    0,
    0,
    waiting=RunWaiting((("weekly", "latest_before"),), timedelta(hours=6), "fail", "UTC"),
)
WEEK_BEFORE = MONDAY_PERIOD - timedelta(days=7)
DONE = MONDAY_PERIOD + 600 * SECOND
EVENTS = [
    # (append instant, event): the week before's success, the period's start and success, and
    # the window's run's start.
    (WEEK_BEFORE + 600 * SECOND, _event("weekly", WEEK_BEFORE, "succeeded", WEEK_BEFORE, 1)),
    (MONDAY_PERIOD, _event("weekly", MONDAY_PERIOD, "started", MONDAY_PERIOD, 2)),
    (DONE, _event("weekly", MONDAY_PERIOD, "succeeded", DONE, 3)),
    (START + SECOND, _event("report", START, "started", START + SECOND, 4)),
]


@dataclass
class StandIn:
    """The reads `read_audit_window` makes, over records stamped with their append instant."""

    events: list[tuple[datetime, RunEventRecord]]
    reruns: list[Any] = field(default_factory=list)
    rejected: list[Any] = field(default_factory=list)
    open_transactions: list[OpenTransaction] = field(default_factory=list)
    asked: list[tuple[str, datetime | None, str | None]] = field(default_factory=list)
    fires: list[FiredRun] = field(default_factory=lambda: [FIRE])

    def refused_changes(self) -> list[Any]:
        return []

    def schedule_events(
        self, schedule_id: str | None = None, refusals: list[Any] | None = None
    ) -> list[HistoryEvent]:
        self.asked.append(("schedules", None, schedule_id))
        return [e for e in HISTORY if schedule_id in (None, e.schedule_id)]

    def runs_and_unsettled(
        self,
        keep: Callable[[FiredRun], bool],
        since: datetime | None,
        keep_unsettled: Callable[[FiredRun], bool],
        schedule_id: str | None,
    ) -> tuple[list[FiredRun], list[FiredRun]]:
        self.asked.append(("runs", since, schedule_id))
        return [run for run in self.fires if keep(run)], []

    def run_events_and_unsettled(
        self,
        keep: Callable[[RunEventRecord], bool],
        since: datetime | None,
        schedule_id: str | None,
    ) -> tuple[list[RunEventRecord], list[RunEventRecord]]:
        self.asked.append(("run-events", since, schedule_id))
        return [
            event
            for appended, event in self.events
            if (since is None or appended >= since)
            and schedule_id in (None, event.schedule_id)
            and keep(event)
        ], []

    def admission_dead_letters(self, since: datetime | None = None) -> list[Any]:
        return []


def read(
    schedule: str | None = None,
    whole_history: bool = False,
    events: list[tuple[datetime, RunEventRecord]] = EVENTS,
    fire: FiredRun = FIRE,
) -> tuple[AuditRead, StandIn]:
    reader = StandIn(events, fires=[fire])
    window = AuditWindow(START, END, schedule, DEFAULT_EARLY_TOLERANCE, None, whole_history)
    return read_audit_window(cast(HistoryReader, reader), window), reader


def judged(found: AuditRead) -> AuditReport:
    owed = expected_occurrences(found.history, START, END, fired_through(found.fired))
    return verify(
        owed,
        found.fired,
        found.events,
        start=START,
        end=END,
        as_of=END,
        grace=10 * SECOND,
        stops=stopped_spans(found.history),
        periods=found.periods,
    )


def test_run_events_are_read_from_the_margin_before_the_earliest_upstream_period() -> None:
    found, reader = read()
    assert found.since == START - CLOCK_MARGIN
    assert found.events_since == MONDAY_PERIOD - CLOCK_MARGIN
    assert ("runs", START - CLOCK_MARGIN, None) in reader.asked  # the runs: from the window's
    assert found.periods[REPORT_RUN].periods == (
        UpstreamPeriod("weekly", "latest_before", MONDAY_PERIOD),
    )
    # The period's success, six days old, and the window's own; not the week before's success,
    # nor the period's other events.
    assert [(e.run_id, e.kind) for e in found.events] == [
        (run_id("weekly", MONDAY_PERIOD), "succeeded"),
        (REPORT_RUN, "started"),
    ]
    assert judged(found).ok


def test_one_schedule_reads_its_upstreams_history_and_their_events_too() -> None:
    found, reader = read(schedule="report")
    assert ("schedules", None, "weekly") in reader.asked
    assert ("run-events", MONDAY_PERIOD - CLOCK_MARGIN, None) in reader.asked
    assert [e.schedule_id for e in found.history] == ["report"]  # what is owed: its own
    assert found.periods[REPORT_RUN].periods[0].period == MONDAY_PERIOD
    assert judged(found).ok


def test_the_whole_history_finds_the_same() -> None:
    windowed, _ = read()
    whole, _ = read(whole_history=True)
    assert (whole.since, whole.events_since) == (None, None)
    assert whole.periods == windowed.periods
    assert whole.events == windowed.events
    assert judged(whole).findings == judged(windowed).findings == []


def test_a_start_before_the_old_period_succeeded_is_found_either_way() -> None:
    late = START + 30 * SECOND
    events = [*EVENTS[:2], (late, _event("weekly", MONDAY_PERIOD, "succeeded", late, 3)), EVENTS[3]]
    for found in (read(events=events)[0], read(whole_history=True, events=events)[0]):
        assert [(f.kind, f.run_id) for f in judged(found).findings] == [
            (FindingKind.STARTED_BEFORE_UPSTREAM, REPORT_RUN)
        ]


def test_a_run_fired_without_its_wait_is_read_and_judged_by_its_definition() -> None:
    # The record names no upstream: with --schedule, the upstream's history is read all the
    # same (its definition names it), and its run events from before its period.
    bare = replace(FIRE, waiting=None)
    for found in (read(fire=bare)[0], read(schedule="report", fire=bare)[0]):
        assert found.events_since == MONDAY_PERIOD - CLOCK_MARGIN
        assert found.periods[REPORT_RUN].periods[0].period == MONDAY_PERIOD
        assert [(f.kind, f.run_id) for f in judged(found).findings] == [
            (FindingKind.FIRED_WITHOUT_ITS_WAIT, REPORT_RUN)
        ]


def test_a_run_event_carries_the_brokers_append_time() -> None:
    event = {
        "run_id": REPORT_RUN,
        "schedule_id": "report",
        "kind": "released",
        "attempt": 0,
        "executor_instance": "exec-1",
        "nominal_at": START,
        "fired_at": START,
        "started_at": None,
        "finished_at": None,
        "reason": None,
        "next_attempt_at": None,
        "owner": None,
    }
    value = CODECS.run_event.encode(event)
    appended = TopicRecord(0, 7, START + SECOND, REPORT_RUN.encode(), value, 1, appended=True)
    read_back = run_event(CODECS, appended)
    assert (read_back.kind, read_back.appended_at, read_back.offset) == (
        "released",
        START + SECOND,
        7,
    )
    # A topic stamping its producers' clocks (CreateTime) gives no broker time.
    assert run_event(CODECS, replace(appended, appended=False)).appended_at is None
