"""The audit works out what calendars owe apart from the ticker, so it notices the ticker's
calendar rule going wrong (review H4: the month-end close fired twice, or never, while the
audit, replaying the same rule, held)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.audit import (
    FiredRun,
    HistoryEvent,
    RunEventRecord,
    expected_occurrences,
    fired_through,
)
from kairos.core.audit_report import AuditReport, FindingKind, Verdict
from kairos.core.audit_verdict import verify
from kairos.core.business_calendar import parse_calendar
from kairos.core.calendar_owed import calendar_eras
from kairos.core.calendar_rules import as_of_history
from kairos.core.calendar_versions import CalendarChange
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule

pytestmark = pytest.mark.unit

CLOSE = Schedule.model_validate(
    {
        "id": "close",
        "cron": "0 18 * * *",
        "timezone": "America/New_York",
        "business_day": -1,
        "exclude": ["desk"],
    }
)
CREATED = datetime(2027, 11, 1, tzinfo=UTC)
DEC_30 = datetime(2027, 12, 30, 23, tzinfo=UTC)  # 18:00 New York
DEC_31 = datetime(2027, 12, 31, 23, tzinfo=UTC)
START, END = datetime(2027, 12, 1, tzinfo=UTC), datetime(2028, 1, 2, tzinfo=UTC)


def desk(version: int, changed_at: datetime, *holidays: str) -> CalendarChange:
    calendar = parse_calendar(
        {
            "id": "desk",
            "owner": "treasury",
            "holidays": [{"date": d, "name": "closed"} for d in holidays],
        }
    )
    return CalendarChange("desk", version, "upserted", calendar, changed_at, "treasury")


def fired(nominal: datetime) -> FiredRun:
    return FiredRun(
        run_id=run_id("close", nominal),
        schedule_id="close",
        nominal=nominal,
        due_at=nominal,
        fired_at=nominal + timedelta(milliseconds=30),
        lateness_ms=30,
        attempt=1,
        ticker_instance="ticker-a",
        schedule_offset=0,
        partition=0,
        offset=0,
    )


def skipped(nominal: datetime, reason: str) -> RunEventRecord:
    return RunEventRecord(
        run_id=run_id("close", nominal),
        schedule_id="close",
        kind="skipped",
        attempt=0,
        source="ticker-a",
        nominal=nominal,
        fired_at=nominal,
        started_at=None,
        finished_at=None,
        reason=reason,
        next_attempt_at=None,
        partition=0,
        offset=0,
    )


def audit(
    changes: list[CalendarChange], fires: list[FiredRun], events: list[RunEventRecord]
) -> AuditReport:
    history = [HistoryEvent("close", 0, 0, "upserted", CLOSE, CREATED)]
    owed = expected_occurrences(
        history,
        START,
        END,
        fired_through(fires),
        calendars=as_of_history(changes),
        eras=calendar_eras(changes),
    )
    return verify(owed, fires, events, start=START, end=END, as_of=END, grace=timedelta(seconds=10))


def test_the_close_fired_on_two_days_is_a_breach() -> None:
    removed = [
        desk(1, CREATED - timedelta(days=30), "2027-12-31"),
        desk(2, DEC_30 - timedelta(hours=8)),
    ]
    report = audit(removed, [fired(DEC_30), fired(DEC_31)], [])
    assert report.verdict is Verdict.BREACH
    assert [(f.kind, f.nominal) for f in report.findings] == [(FindingKind.UNEXPECTED, DEC_30)]


def test_the_close_skipped_for_a_holiday_added_after_its_day_passed_is_a_breach() -> None:
    added = [
        desk(1, CREATED - timedelta(days=30)),
        desk(2, DEC_31 - timedelta(hours=8), "2027-12-31"),
    ]
    reason = "2027-12-31 is 'closed' in calendar desk v2"
    report = audit(added, [], [skipped(DEC_31, reason)])
    assert [(f.kind, f.nominal) for f in report.findings] == [(FindingKind.CALENDAR, DEC_31)]


def test_the_close_run_once_where_the_calendars_put_it_holds() -> None:
    removed = [
        desk(1, CREATED - timedelta(days=30), "2027-12-31"),
        desk(2, DEC_30 - timedelta(hours=8)),
    ]
    assert audit(removed, [fired(DEC_31)], []).verdict is Verdict.HOLDS
    added = [
        desk(1, CREATED - timedelta(days=30)),
        desk(2, DEC_31 - timedelta(hours=8), "2027-12-31"),
    ]
    assert audit(added, [fired(DEC_31)], []).verdict is Verdict.HOLDS
