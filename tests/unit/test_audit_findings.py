"""Every breach of the promise the topics show is a finding, and fails the audit.

Fed with histories and records as the topics hold them: a fire after a delete or inside a pause
(even one the ticker saw late), a fire nothing owed, an early fire, runs an executor refused or
never finished, and records an open transaction still hides (inconclusive, not lost).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kairos.core.audit import (
    AdmissionDeadLetter,
    ExpectedOccurrence,
    FiredRun,
    HistoryEvent,
    OpenTransaction,
    RunEventRecord,
    expected_occurrences,
    fired_through,
    stopped_spans,
)
from kairos.core.audit_report import AuditReport, FindingKind, Verdict
from kairos.core.audit_verdict import OutcomeCheck, Unsettled, verify
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule

DAY = datetime(2027, 1, 4, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def at(hour: int, minute: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute)


NOON = at(12)


def schedule(**fields: Any) -> Schedule:
    return Schedule.model_validate({"id": "report", "cron": "0 * * * *", **fields})


def event(offset: int, when: datetime, definition: Schedule | None, change: str) -> HistoryEvent:
    return HistoryEvent("report", 0, offset, change, definition, when)


def fire(
    nominal: datetime,
    *,
    version: int = 0,
    schedule_id: str = "report",
    fired_at: datetime | None = None,
    offset: int = 0,
    appended_at: datetime | None = None,
) -> FiredRun:
    fired = fired_at or nominal + 40 * timedelta(milliseconds=1)
    return FiredRun(
        run_id=run_id(schedule_id, nominal),
        schedule_id=schedule_id,
        nominal=nominal,
        due_at=nominal,
        fired_at=fired,
        lateness_ms=max(0, (fired - nominal) // timedelta(milliseconds=1)),
        attempt=1,
        ticker_instance="ticker-a",
        schedule_offset=version,
        partition=3,
        offset=offset,
        appended_at=appended_at,
    )


def run_event(nominal: datetime, kind: str, offset: int = 0) -> RunEventRecord:
    return RunEventRecord(
        run_id=run_id("report", nominal),
        schedule_id="report",
        kind=kind,
        attempt=0 if kind == "skipped" else 1,
        source="ticker-a" if kind == "skipped" else "exec-1",
        nominal=nominal,
        fired_at=nominal,
        started_at=None,
        finished_at=None,
        reason="missed (misfire policy skip)" if kind == "skipped" else None,
        next_attempt_at=None,
        partition=3,
        offset=offset,
    )


def audit(
    history: list[HistoryEvent],
    fired: list[FiredRun],
    events: list[RunEventRecord] | None = None,
    *,
    as_of: datetime = NOON,
    **options: Any,
) -> AuditReport:
    """`kairos audit verify` of 00:00..07:00 over these records, as the CLI wires it."""
    owed = expected_occurrences(history, at(0), at(7), fired_through(fired))
    return verify(
        owed,
        fired,
        events or [],
        start=at(0),
        end=at(7),
        as_of=as_of,
        grace=10 * SECOND,
        stops=stopped_spans(history),
        **options,
    )


def kinds(report: AuditReport) -> list[tuple[FindingKind, str]]:
    return [(f.kind, f.run_id) for f in report.findings]


def hourly_fires(*hours: int, version: int = 0) -> list[FiredRun]:
    return [fire(at(hour), version=version, offset=n) for n, hour in enumerate(hours)]


# -- runs nothing owed --------------------------------------------------------------------------


def test_a_fire_after_a_delete_the_ticker_saw_late_is_a_breach() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted"), event(1, at(2, 30), None, "deleted")]
    # The ticker read the delete only after it had fired 03:00 and 04:00 under version 0.
    report = audit(history, hourly_fires(1, 2, 3, 4))
    assert report.verdict is Verdict.BREACH
    assert kinds(report) == [
        (FindingKind.FIRED_AFTER_DELETE, run_id("report", at(3))),
        (FindingKind.FIRED_AFTER_DELETE, run_id("report", at(4))),
    ]
    finding = report.findings[0]
    assert (finding.schedule_id, finding.nominal, finding.due_at) == ("report", at(3), at(3))
    assert "deleted at 2027-01-04T02:30:00Z (schedules offset 1)" in finding.detail
    assert report.total("expected") == report.total("fired") == 2


def test_a_breach_names_who_stopped_the_schedule_and_the_team_a_signed_ticker_verified() -> None:
    deleted = replace(
        event(1, at(2, 30), None, "deleted"), changed_by="alice", signed_by="payments"
    )
    report = audit([event(0, at(0, 30), schedule(), "upserted"), deleted], hourly_fires(1, 2, 3))
    assert "deleted by alice (signed by team payments) at 2027-01-04T02:30:00Z" in (
        report.findings[0].detail
    )


def test_a_schedule_created_again_owes_its_runs_after_the_delete() -> None:
    history = [
        event(0, at(0, 30), schedule(), "upserted"),
        event(1, at(2, 30), None, "deleted"),
        event(2, at(4, 30), schedule(), "upserted"),
    ]
    fires = [*hourly_fires(1, 2), fire(at(5), version=2, offset=5), fire(at(6), version=2)]
    report = audit(history, fires)
    assert (report.verdict, report.findings) == (Verdict.HOLDS, [])
    assert report.total("expected") == 4


def test_a_fire_inside_a_pause_is_a_breach() -> None:
    history = [
        event(0, at(0, 30), schedule(), "upserted"),
        event(1, at(1, 30), schedule(paused=True), "paused"),
        event(2, at(4, 15), schedule(), "resumed"),
    ]
    report = audit(history, [*hourly_fires(1, 2), fire(at(5), version=2), fire(at(6), version=2)])
    assert kinds(report) == [(FindingKind.FIRED_WHILE_PAUSED, run_id("report", at(2)))]
    assert "paused at 2027-01-04T01:30:00Z" in report.findings[0].detail
    assert report.verdict is Verdict.BREACH


def test_a_fire_at_an_instant_no_version_owed_or_of_an_unknown_schedule_is_a_breach() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    fires = [
        *hourly_fires(1, 2, 3, 4, 5, 6),
        fire(at(3, 30), offset=9),  # hourly: 03:30 is no occurrence
        fire(at(2), schedule_id="ghost"),  # no event names it
    ]
    report = audit(history, fires)
    assert report.verdict is Verdict.BREACH
    assert sorted(kinds(report)) == [
        (FindingKind.UNEXPECTED, run_id("ghost", at(2))),
        (FindingKind.UNEXPECTED, run_id("report", at(3, 30))),
    ]
    details = {f.schedule_id: f.detail for f in report.findings}
    assert "no event of the schedules topic names this schedule" in details["ghost"]
    assert "no version of the schedule owed an occurrence at this instant" in details["report"]
    assert report.total("unexpected") == 2


# -- early fires ---------------------------------------------------------------------------------


def test_a_fire_before_its_due_instant_is_a_breach_though_lateness_ms_says_zero() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    early = fire(at(3), fired_at=at(3) - 2 * SECOND, offset=2)
    assert early.lateness_ms == 0  # the ticker clamps it
    report = audit(history, [*hourly_fires(1, 2), early, *hourly_fires(4, 5, 6)])
    assert kinds(report) == [(FindingKind.EARLY, run_id("report", at(3)))]
    finding = report.findings[0]
    assert finding.fired_at == at(3) - 2 * SECOND and finding.due_at == at(3)
    assert "fired 2000 ms before it was due" in finding.detail
    assert "lateness_ms says 0" in finding.detail
    assert report.lateness is not None and report.lateness.min == -2000
    assert report.verdict is Verdict.BREACH


def test_a_fire_early_within_the_tolerance_holds() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    slightly = fire(at(3), fired_at=at(3) - 50 * timedelta(milliseconds=1), offset=2)
    report = audit(history, [*hourly_fires(1, 2), slightly, *hourly_fires(4, 5, 6)])
    assert report.verdict is Verdict.HOLDS
    strict = audit(
        history,
        [*hourly_fires(1, 2), slightly, *hourly_fires(4, 5, 6)],
        early_tolerance=timedelta(milliseconds=10),
    )
    assert kinds(strict) == [(FindingKind.EARLY, run_id("report", at(3)))]


def test_the_brokers_append_time_shows_an_early_fire_a_stepped_ticker_clock_hides() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    # The ticker's clock ran 5 s ahead: it fired 03:00 believing it due, the broker knew better.
    stepped = fire(at(3), fired_at=at(3), appended_at=at(3) - 5 * SECOND, offset=2)
    report = audit(history, [*hourly_fires(1, 2), stepped, *hourly_fires(4, 5, 6)])
    assert kinds(report) == [(FindingKind.EARLY, run_id("report", at(3)))]
    assert "by the broker's append time" in report.findings[0].detail


# -- outcomes ------------------------------------------------------------------------------------


def test_with_outcomes_a_refused_or_unfinished_run_is_a_breach() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    fires = hourly_fires(1, 2, 3, 4, 5, 6)
    events = [
        run_event(at(1), "started", 0),
        run_event(at(1), "succeeded", 1),
        run_event(at(2), "started", 2),  # never finished
        run_event(at(4), "started", 3),
        run_event(at(4), "failed", 4),
        run_event(at(4), "dead_lettered", 5),  # attempts exhausted: an outcome, not a breach
        run_event(at(5), "skipped", 6),  # overlap policy skip: an outcome too
    ]
    refused = AdmissionDeadLetter(3, 2, "JobParamsError", "unknown job kind", at(3))
    check = OutcomeCheck((refused,), grace=timedelta(hours=1))
    report = audit(history, fires, events, as_of=at(6, 30), outcomes=check)
    assert kinds(report) == [
        (FindingKind.UNREPORTED, run_id("report", at(2))),
        (FindingKind.DEAD_LETTERED, run_id("report", at(3))),
    ]
    reasons = [f.detail for f in report.findings]
    assert "its last run event is 'started'" in reasons[0]
    assert "JobParamsError: unknown job kind" in reasons[1]
    # 06:00 fired less than the grace before as_of: its executor may still be on it.
    assert report.verdict is Verdict.BREACH
    # Without the check, outcomes are counted, not judged.
    assert audit(history, fires, events, as_of=at(6, 30)).verdict is Verdict.HOLDS


# -- open transactions ---------------------------------------------------------------------------


OPEN = OpenTransaction("kairos.runs", 3, 40, 44, at(2, 59))


def test_a_run_hidden_by_an_open_transaction_is_not_lost_and_the_audit_is_inconclusive() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    hidden = fire(at(3), offset=41)
    report = audit(
        history, hourly_fires(1, 2, 4, 5, 6), unsettled=Unsettled((OPEN,), fires=(hidden,))
    )
    assert report.total("lost") == 0
    assert kinds(report) == [(FindingKind.HIDDEN, run_id("report", at(3)))]
    assert "runs partition 3 (offset 41)" in report.findings[0].detail
    assert report.verdict is Verdict.INCONCLUSIVE
    assert report.open_transactions == (OPEN,)


def test_a_skip_hidden_by_an_open_transaction_is_not_lost_either() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    skip = run_event(at(3), "skipped", 7)
    report = audit(history, hourly_fires(1, 2, 4, 5, 6), unsettled=Unsettled((), events=(skip,)))
    assert kinds(report) == [(FindingKind.HIDDEN, run_id("report", at(3)))]
    assert "run-events partition 3" in report.findings[0].detail


def test_an_open_transaction_that_could_commit_a_second_fire_leaves_the_audit_undecided() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    again = fire(at(3), offset=42)
    report = audit(
        history, hourly_fires(1, 2, 3, 4, 5, 6), unsettled=Unsettled((OPEN,), fires=(again,))
    )
    assert kinds(report) == [(FindingKind.HIDDEN, run_id("report", at(3)))]
    assert "a second commit of this run" in report.findings[0].detail
    assert report.verdict is Verdict.INCONCLUSIVE


def test_a_fresh_fire_in_flight_is_pending_and_a_breach_beside_an_open_transaction_wins() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    in_flight = fire(at(6), offset=43)
    report = audit(
        history,
        hourly_fires(1, 2, 3, 4, 5),
        unsettled=Unsettled((OPEN,), fires=(in_flight,)),
        as_of=at(6, 0) + 5 * SECOND,
    )
    assert (report.verdict, report.total("pending"), report.findings) == (Verdict.HOLDS, 1, [])
    lost = audit(
        history, hourly_fires(1, 2, 4, 5, 6), unsettled=Unsettled((OPEN,), fires=(fire(at(6)),))
    )
    assert lost.verdict is Verdict.BREACH
    assert kinds(lost) == [
        (FindingKind.LOST, run_id("report", at(3))),
        (FindingKind.HIDDEN, run_id("report", at(6))),
    ]


def test_lost_and_duplicated_runs_are_findings_too() -> None:
    history = [event(0, at(0, 30), schedule(), "upserted")]
    fires = [*hourly_fires(1, 2, 4, 5, 6), fire(at(2), offset=8)]
    report = audit(history, fires)
    assert kinds(report) == [
        (FindingKind.DUPLICATE, run_id("report", at(2))),
        (FindingKind.LOST, run_id("report", at(3))),
    ]
    assert "partition 3 offset 1, partition 3 offset 8" in report.findings[0].detail


def test_every_finding_names_its_schedule_run_and_instants() -> None:
    occurrence = ExpectedOccurrence(run_id("report", at(3)), "report", at(3), at(3), 0)
    report = verify(
        {"report": [occurrence]},
        [],
        [],
        start=at(0),
        end=at(7),
        as_of=at(12),
        grace=SECOND,
    )
    (finding,) = report.findings
    assert (finding.kind, finding.schedule_id, finding.run_id) == (
        FindingKind.LOST,
        "report",
        occurrence.run_id,
    )
    assert (finding.nominal, finding.due_at, finding.fired_at) == (at(3), at(3), None)
