"""A run that waits for upstream periods must not start before they succeed, nor be left waiting
past its wait, nor be fired without the wait its definition names: the audit's findings, over
histories built as the topics hold them.

`extract` runs daily at 00:00 UTC; `report` runs hourly and waits for extract's latest period
(the 00:00 one, older than the 05:00-06:00 window audited), `upstream_wait` 1 h.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kairos.cli.audit import as_document
from kairos.core.audit import (
    FiredRun,
    HistoryEvent,
    RequestedRerun,
    RunEventRecord,
    expected_occurrences,
    fired_through,
    stopped_spans,
)
from kairos.core.audit_dependencies import (
    RunWaiting,
    RunWaits,
    UpstreamPeriod,
    earliest_period,
    resolve_periods,
)
from kairos.core.audit_report import AuditReport, FindingKind, Verdict
from kairos.core.audit_upstream import CLOCK_TOLERANCE, WAIT_GRACE
from kairos.core.audit_verdict import Unsettled, verify
from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.run_id import rerun_id, run_id
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import PeriodMatch, Upstream

DAY = datetime(2027, 1, 4, tzinfo=UTC)
SECOND = timedelta(seconds=1)
START, END = DAY.replace(hour=5), DAY.replace(hour=6)
"""The window audited: report@05:00 only."""
PERIOD = DAY
"""extract@00:00, the period report@05:00 waits for."""
REPORT_AT = START
WAIT = timedelta(hours=1)


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute, second=second)


NOON = at(12)
EXTRACT = Schedule.model_validate({"id": "extract", "cron": "0 0 * * *"})
REPORT = Schedule.model_validate(
    {
        "id": "report",
        "cron": "0 * * * *",
        "upstream": [{"schedule": "extract"}],
        "upstream_wait": "1h",
        "upstream_timeout": "skip",
    }
)
HISTORY = [
    HistoryEvent("extract", 1, 0, "upserted", EXTRACT, DAY - timedelta(days=3)),
    HistoryEvent("report", 0, 0, "upserted", REPORT, DAY - timedelta(days=3)),
]
WAITING = RunWaiting((("extract", "latest_before"),), WAIT, "skip", "UTC")


def fire(nominal: datetime = REPORT_AT, *, waiting: RunWaiting | None = WAITING) -> FiredRun:
    return FiredRun(
        run_id=run_id("report", nominal),
        schedule_id="report",
        nominal=nominal,
        due_at=nominal,
        fired_at=nominal + 40 * timedelta(milliseconds=1),
        lateness_ms=40,
        attempt=1,
        ticker_instance="ticker-a",
        schedule_offset=0,
        partition=0,
        offset=0,
        waiting=waiting,
    )


def run_event(
    run: str,
    kind: str,
    *,
    started: datetime | None = None,
    finished: datetime | None = None,
    offset: int = 0,
    reason: str | None = None,
    appended: datetime | None = None,
) -> RunEventRecord:
    schedule_id, _, rest = run.partition("@")
    nominal = datetime.fromisoformat(rest.split("~")[0].replace("Z", "+00:00"))
    return RunEventRecord(
        run_id=run,
        schedule_id=schedule_id,
        kind=kind,
        attempt=0 if kind == "skipped" else 1,
        source="exec-up" if schedule_id == "extract" else "exec-down",
        nominal=nominal,
        fired_at=nominal,
        started_at=started,
        finished_at=finished,
        reason=reason,
        next_attempt_at=None,
        partition=1 if schedule_id == "extract" else 0,
        offset=offset,
        appended_at=appended,
    )


EXTRACT_RUN = run_id("extract", PERIOD)
REPORT_RUN = run_id("report", REPORT_AT)


def extract_succeeded(finished: datetime, run: str = EXTRACT_RUN) -> list[RunEventRecord]:
    return [
        run_event(run, "started", started=finished - 60 * SECOND, offset=10),
        run_event(run, "succeeded", started=finished - 60 * SECOND, finished=finished, offset=11),
    ]


def report_started(started: datetime) -> list[RunEventRecord]:
    return [run_event(REPORT_RUN, "started", started=started, offset=20)]


def audit(
    fired: list[FiredRun],
    events: list[RunEventRecord],
    *,
    as_of: datetime = NOON,
    history: list[HistoryEvent] = HISTORY,
    **options: Any,
) -> AuditReport:
    """`kairos audit verify` of 05:00..06:00 over these records, as the CLI wires it."""
    owed = expected_occurrences(history, START, END, fired_through(fired))
    periods = resolve_periods(
        fired, history, wanted=lambda run: START <= run.nominal < END, calendars=None
    )
    return verify(
        owed,
        fired,
        events,
        start=START,
        end=END,
        as_of=as_of,
        grace=10 * SECOND,
        stops=stopped_spans(history),
        periods=periods,
        **options,
    )


def kinds(report: AuditReport) -> list[tuple[FindingKind, str]]:
    return [(f.kind, f.run_id) for f in report.findings]


# -- which period ---------------------------------------------------------------------------------


def test_the_period_is_worked_out_under_the_upstreams_version_in_force() -> None:
    periods = resolve_periods([fire()], HISTORY, wanted=lambda run: True)
    # What it waits for is its definition's (schedules offset 0), the same as its record's.
    period = UpstreamPeriod("extract", "latest_before", PERIOD)
    assert periods == {REPORT_RUN: RunWaits(WAITING, (period,), 0)}
    assert earliest_period(periods) == PERIOD
    # An upstream made only after the run's instant has no version in force then: not judged.
    later = [replace(HISTORY[0], changed_at=at(5, 30)), HISTORY[1]]
    (found,) = resolve_periods([fire()], later, wanted=lambda run: True)[REPORT_RUN].periods
    assert found.period is None
    assert found.undecided == "it was not created yet at the run's instant"
    # A record that says it waits for nothing waits all the same: its definition names extract.
    assert resolve_periods([fire(waiting=None)], HISTORY, wanted=lambda run: True) == periods
    # A retry request is no fire; a run whose definition names no upstream waits for nothing,
    # whatever its record says.
    assert resolve_periods([replace(fire(), attempt=2)], HISTORY, wanted=lambda run: True) == {}
    alone = [HISTORY[0], replace(HISTORY[1], definition=REPORT.model_copy(update={"upstream": ()}))]
    assert resolve_periods([fire()], alone, wanted=lambda run: True) == {}


# -- started before its upstream ------------------------------------------------------------------


def test_a_run_started_10_s_before_its_upstream_succeeded_is_a_breach() -> None:
    events = [*extract_succeeded(at(5, 0, 11)), *report_started(at(5, 0, 1))]
    report = audit([fire()], events)
    assert report.verdict is Verdict.BREACH
    assert kinds(report) == [(FindingKind.STARTED_BEFORE_UPSTREAM, REPORT_RUN)]
    (finding,) = report.findings
    assert (finding.schedule_id, finding.nominal) == ("report", REPORT_AT)
    # In the report as every finding is: the console's audit page reads `kind` and `detail`.
    (document,) = as_document(report, [])["findings"]
    assert document == {
        "kind": "started_before_upstream",
        "schedule_id": "report",
        "run_id": REPORT_RUN,
        "nominal_at": "2027-01-04T05:00:00Z",
        "due_at": "2027-01-04T05:00:00Z",
        "fired_at": "2027-01-04T05:00:00.040Z",
        "detail": finding.detail,
    }
    assert finding.detail == (
        "started at 2027-01-04T05:00:01Z (attempt 1, exec-down), 10s before upstream extract's "
        "period 2027-01-04T00:00:00Z (latest_before) succeeded at 2027-01-04T05:00:11Z (run "
        "extract@2027-01-04T00:00:00Z, exec-up); clock tolerance 1s"
    )


def test_the_finding_shows_the_period_the_ticker_fired_it_for_when_not_the_audits() -> None:
    # The ticker resolved yesterday's period, which had succeeded: the executor released the
    # run on it, and the audit's own account of the rule shows the run did not wait.
    yesterday = PERIOD - timedelta(days=1)
    waiting = replace(WAITING, fired_periods=(yesterday,))
    events = [*extract_succeeded(at(5, 0, 11)), *report_started(at(5, 0, 1))]
    (finding,) = audit([fire(waiting=waiting)], events).findings
    assert finding.detail.endswith(
        "; the run was fired waiting for the period 2027-01-03T00:00:00Z"
    )
    (agreed,) = audit([fire(waiting=replace(WAITING, fired_periods=(PERIOD,)))], events).findings
    assert agreed.detail.endswith("clock tolerance 1s")


def test_a_run_started_after_its_upstream_succeeded_is_clean() -> None:
    events = [*extract_succeeded(at(0, 10)), *report_started(at(5, 0, 1))]
    report = audit([fire()], events)
    assert report.verdict is Verdict.HOLDS, report.findings


def test_a_start_within_the_clock_tolerance_is_clean() -> None:
    succeeded = at(5, 0, 10)
    events = [*extract_succeeded(succeeded), *report_started(succeeded - CLOCK_TOLERANCE)]
    assert audit([fire()], events).verdict is Verdict.HOLDS
    late = [*extract_succeeded(succeeded), *report_started(succeeded - 2 * CLOCK_TOLERANCE)]
    assert kinds(audit([fire()], late)) == [(FindingKind.STARTED_BEFORE_UPSTREAM, REPORT_RUN)]


def test_an_upstream_failed_then_rerun_succeeded_before_the_start_is_clean() -> None:
    rerun = rerun_id("extract", PERIOD, "fix")
    failed = [
        run_event(EXTRACT_RUN, "started", started=at(0, 1), offset=1),
        run_event(EXTRACT_RUN, "dead_lettered", finished=at(0, 9), offset=2, reason="exit 1"),
    ]
    events = [*failed, *extract_succeeded(at(5, 20), rerun), *report_started(at(5, 21))]
    assert audit([fire()], events).verdict is Verdict.HOLDS
    # Started before the re-run succeeded: the re-run's success is the one named.
    too_soon = [*failed, *extract_succeeded(at(5, 20), rerun), *report_started(at(5, 10))]
    (finding,) = audit([fire()], too_soon).findings
    assert finding.kind is FindingKind.STARTED_BEFORE_UPSTREAM
    assert f"(run {rerun}, exec-up)" in finding.detail


def test_a_run_started_though_its_upstream_period_never_succeeded_is_a_breach() -> None:
    failed = run_event(EXTRACT_RUN, "dead_lettered", finished=at(0, 9), offset=2, reason="exit 1")
    report = audit([fire()], [failed, *report_started(at(5, 0, 1))])
    (finding,) = report.findings
    assert finding.kind is FindingKind.STARTED_BEFORE_UPSTREAM
    assert finding.detail.endswith(
        "upstream extract's period 2027-01-04T00:00:00Z (latest_before) has no succeeded run event"
    )


def test_a_run_started_though_no_period_matches_is_a_breach() -> None:
    waiting = RunWaiting((("extract", "same_instant"),), WAIT, "skip", "UTC")
    same = REPORT.model_copy(
        update={"upstream": (Upstream(schedule="extract", match=PeriodMatch.SAME_INSTANT),)}
    )
    history = [HISTORY[0], replace(HISTORY[1], definition=same)]
    events = [*extract_succeeded(at(0, 10)), *report_started(START)]
    report = audit([fire(waiting=waiting)], events, history=history)
    (finding,) = report.findings
    assert finding.kind is FindingKind.STARTED_BEFORE_UPSTREAM
    assert "has no period matching same_instant" in finding.detail


def test_an_upstream_success_held_by_an_open_transaction_is_inconclusive() -> None:
    held = extract_succeeded(at(5))
    report = audit([fire()], report_started(at(5, 0, 30)), unsettled=Unsettled(events=tuple(held)))
    assert report.verdict is Verdict.INCONCLUSIVE
    assert kinds(report) == [(FindingKind.HIDDEN, REPORT_RUN)]


# -- waiting past its deadline --------------------------------------------------------------------


def test_a_run_never_started_nor_ended_past_its_wait_is_a_breach() -> None:
    deadline = REPORT_AT + WAIT
    report = audit([fire()], [], as_of=deadline + WAIT_GRACE + SECOND)
    assert report.verdict is Verdict.BREACH
    assert kinds(report) == [(FindingKind.WAITING_PAST_DEADLINE, REPORT_RUN)]
    (finding,) = report.findings
    assert finding.detail == (
        "fired at 2027-01-04T05:00:00.040Z to wait for upstream extract (latest_before) period "
        "2027-01-04T00:00:00Z, not succeeded; its wait of 3600s ended at "
        "2027-01-04T06:00:00Z (upstream_timeout: skip), yet 300s later it was not released, "
        "and no run event says it started, succeeded, failed, was dead-lettered or skipped"
    )
    # Within the grace, it may still be ending.
    assert audit([fire()], [], as_of=deadline + WAIT_GRACE).verdict is Verdict.HOLDS


def test_a_run_ended_at_its_deadline_is_clean() -> None:
    reason = "upstream extract period 2027-01-04T00:00:00Z did not succeed within 1h"
    for kind in ("skipped", "failed", "dead_lettered"):
        ended = run_event(REPORT_RUN, kind, finished=REPORT_AT + WAIT, offset=20, reason=reason)
        report = audit([fire()], [ended])
        assert report.verdict is Verdict.HOLDS, (kind, report.findings)


def test_a_run_fired_after_its_wait_gets_the_grace_from_its_fire() -> None:
    fired = replace(fire(), fired_at=at(7), lateness_ms=2 * 3_600_000)
    assert audit([fired], [], as_of=at(7, 4)).verdict is Verdict.HOLDS
    assert kinds(audit([fired], [], as_of=at(7, 6))) == [
        (FindingKind.WAITING_PAST_DEADLINE, REPORT_RUN)
    ]


def test_an_ending_held_by_an_open_transaction_is_inconclusive() -> None:
    ended = run_event(REPORT_RUN, "skipped", finished=REPORT_AT + WAIT, offset=20)
    report = audit([fire()], [], unsettled=Unsettled(events=(ended,)))
    assert report.verdict is Verdict.INCONCLUSIVE
    assert kinds(report) == [(FindingKind.HIDDEN, REPORT_RUN)]


# -- fired without its wait -----------------------------------------------------------------------


def test_a_run_fired_without_the_wait_its_definition_names_is_a_breach_and_still_judged() -> None:
    # A faulty ticker fired report@05:00 without its upstream list: the executor ran it at once.
    events = [*extract_succeeded(at(5, 0, 11)), *report_started(at(5, 0, 1))]
    report = audit([fire(waiting=None)], events)
    assert report.verdict is Verdict.BREACH
    assert kinds(report) == [
        (FindingKind.FIRED_WITHOUT_ITS_WAIT, REPORT_RUN),
        (FindingKind.STARTED_BEFORE_UPSTREAM, REPORT_RUN),
    ]
    dropped, early = report.findings
    assert dropped.detail == (
        "its definition (schedules offset 0) names upstream extract (latest_before), "
        "upstream_wait 3600s, upstream_timeout skip; the record ticker ticker-a fired (under "
        "schedules offset 0) carries no upstream"
    )
    assert early.detail.startswith(
        "started at 2027-01-04T05:00:01Z (attempt 1, exec-down), 10s before upstream extract's "
        "period 2027-01-04T00:00:00Z (latest_before) succeeded"
    )
    # Started after its period succeeded, it waited by luck: its record is a breach all the same.
    lucky = [*extract_succeeded(at(0, 10)), *report_started(at(5, 0, 1))]
    assert kinds(audit([fire(waiting=None)], lucky)) == [
        (FindingKind.FIRED_WITHOUT_ITS_WAIT, REPORT_RUN)
    ]


def test_a_commit_without_the_wait_on_another_partition_is_found_beside_the_tickers() -> None:
    # The ticker's record (with its wait) on partition 0 at a lower offset than a record a
    # foreign producer put on partition 3 without it: offsets of two partitions say nothing of
    # which came first, and every commit must carry the wait.
    tickers = replace(fire(), offset=2)
    forged = replace(fire(waiting=None), partition=3, offset=40, ticker_instance="forger")
    events = [*extract_succeeded(at(5, 0, 11)), *report_started(at(5, 0, 1))]
    for commits in ([tickers, forged], [forged, tickers]):
        found = audit(commits, events).findings
        dropped = [f for f in found if f.kind is FindingKind.FIRED_WITHOUT_ITS_WAIT]
        assert [f.run_id for f in dropped] == [REPORT_RUN], found
        assert "the record ticker forger fired" in dropped[0].detail


def test_a_record_carrying_another_wait_than_its_definitions_is_a_breach() -> None:
    events = [*extract_succeeded(at(0, 10)), *report_started(at(5, 0, 1))]
    for waiting in (
        replace(WAITING, upstream=(("extract", "same_local_date"),)),
        replace(WAITING, upstream=(("extract", "latest_before"), ("load", "latest_before"))),
        replace(WAITING, wait=2 * WAIT),
        replace(WAITING, timeout="fail"),
    ):
        (finding,) = audit([fire(waiting=waiting)], events).findings
        assert finding.kind is FindingKind.FIRED_WITHOUT_ITS_WAIT, waiting
    # Neither the zone (read from the definition) nor the ticker's periods are the wait.
    same = replace(WAITING, timezone=None, fired_periods=(PERIOD,))
    assert audit([fire(waiting=same)], events).verdict is Verdict.HOLDS


def test_a_run_is_held_to_its_definition_in_force_at_its_nominal_instant() -> None:
    # report named no upstream until an edit at 04:00 (offset 1): a ticker that fired 05:00 under
    # the old version (offset 0), without the wait, is held to the new one.
    bare = replace(HISTORY[1], definition=REPORT.model_copy(update={"upstream": ()}))
    history = [HISTORY[0], bare, replace(HISTORY[1], offset=1, changed_at=at(4))]
    events = [*extract_succeeded(at(0, 10)), *report_started(at(5, 0, 1))]
    (finding,) = audit([fire(waiting=None)], events, history=history).findings
    assert finding.kind is FindingKind.FIRED_WITHOUT_ITS_WAIT
    assert finding.detail.startswith("its definition (schedules offset 1) names upstream extract")
    assert finding.detail.endswith("(under schedules offset 0) carries no upstream")
    # Its 03:00 run, owed by the version before the edit, waits for nothing.
    early = replace(fire(at(3), waiting=None), run_id=run_id("report", at(3)))
    assert resolve_periods([early], history, wanted=lambda run: True) == {}


def test_a_rerun_waits_as_its_definition_when_its_request_was_taken() -> None:
    # The request (offset 1) was taken under the version naming extract; the edit removing it
    # (offset 2) came after: the re-run, fired without its wait, is held to the wait.
    request = RerunRequest(
        "fix", "report", RerunKind.TRIGGER, START, START, None, "ops", at(9), None
    )
    bare = replace(HISTORY[1], offset=2, changed_at=at(10))
    bare = replace(bare, definition=REPORT.model_copy(update={"upstream": ()}))
    history = [*HISTORY, bare]
    rerun = replace(fire(waiting=None), run_id=rerun_id("report", START, "fix"), fired_at=at(11))
    asked = [RequestedRerun(0, 1, request, at(9))]
    (waits,) = resolve_periods([rerun], history, wanted=lambda run: True, reruns=asked).values()
    assert (waits.version, waits.waiting.upstream) == (0, (("extract", "latest_before"),))
    # A request taken after the edit owes a re-run that waits for nothing.
    later = [RequestedRerun(0, 3, request, at(11))]
    assert resolve_periods([rerun], history, wanted=lambda run: True, reruns=later) == {}


# -- released, then held back; released too soon ----------------------------------------------


def released(appended: datetime | None, offset: int = 15) -> RunEventRecord:
    return replace(run_event(REPORT_RUN, "released", offset=offset, appended=appended), attempt=0)


def test_a_run_released_in_time_and_held_back_is_late_not_left_waiting() -> None:
    # extract succeeded at 05:30, report was released at once, then held by its concurrency
    # group past its wait and the grace: late, which the promise allows.
    events = [*extract_succeeded(at(5, 30)), released(at(5, 30, 2))]
    past = REPORT_AT + WAIT + WAIT_GRACE + 60 * SECOND
    assert audit([fire()], events, as_of=past).verdict is Verdict.HOLDS
    # It started after its wait had ended: still clean.
    started = run_event(REPORT_RUN, "started", started=at(6, 20), offset=20)
    assert audit([fire()], [*events, started]).verdict is Verdict.HOLDS
    # Released only after its wait and the grace, and never started nor ended: left waiting.
    late = [*extract_succeeded(at(6, 30)), released(at(6, 30, 2))]
    (finding,) = audit([fire()], late).findings
    assert finding.kind is FindingKind.WAITING_PAST_DEADLINE
    assert "yet 300s later it was released only at 2027-01-04T06:30:02Z (exec-down), and no" in (
        finding.detail
    )
    # A release without the broker's append time is not known to be in time.
    (untimed,) = audit([fire()], [*extract_succeeded(at(5, 30)), released(None)]).findings
    assert untimed.kind is FindingKind.WAITING_PAST_DEADLINE
    assert "has no broker append time" in untimed.detail


def test_a_run_released_before_its_upstream_succeeded_is_a_breach() -> None:
    started = run_event(REPORT_RUN, "started", started=at(5, 0, 20), offset=20)
    events = [*extract_succeeded(at(5, 0, 11)), released(at(5, 0, 1)), started]
    report = audit([fire()], events)
    assert report.verdict is Verdict.BREACH
    # The start came after the success: only the release was too soon.
    assert kinds(report) == [(FindingKind.RELEASED_BEFORE_UPSTREAM, REPORT_RUN)]
    assert report.findings[0].detail == (
        "released (its run event appended at 2027-01-04T05:00:01Z, exec-down), 10s before "
        "upstream extract's period 2027-01-04T00:00:00Z (latest_before) succeeded at "
        "2027-01-04T05:00:11Z (run extract@2027-01-04T00:00:00Z, exec-up); clock tolerance 1s"
    )
    # Within the tolerance of the success's end (its run event appended later): clean.
    near = [*extract_succeeded(at(5, 0, 11)), released(at(5, 0, 10)), started]
    assert audit([fire()], near).verdict is Verdict.HOLDS
    # Released though the period never succeeded; or with its success in an open transaction.
    (never,) = audit([fire()], [released(at(5, 0, 1))], as_of=at(5, 1)).findings
    assert never.kind is FindingKind.RELEASED_BEFORE_UPSTREAM
    assert never.detail.endswith("(latest_before) has no succeeded run event")
    held = Unsettled(events=tuple(extract_succeeded(at(5, 0, 1))))
    report = audit([fire()], [released(at(5, 0, 1))], as_of=at(5, 1), unsettled=held)
    assert kinds(report) == [(FindingKind.HIDDEN, REPORT_RUN)]
