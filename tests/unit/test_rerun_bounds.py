"""Re-run requests bounded where they are taken, whoever publishes them, and judged the same by
the audit; re-runs against the fires-a-minute quota; default request ids new after a re-create."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.audit import (
    FiredRun,
    HistoryEvent,
    RequestedRerun,
    expected_occurrences,
    stopped_spans,
)
from kairos.core.audit_report import Verdict
from kairos.core.audit_verdict import verify
from kairos.core.firing import ScheduleState
from kairos.core.quotas import Quota, Use, rerun_quota_refusal
from kairos.core.rerun_request import RerunKind, RerunProgress, RerunRequest
from kairos.core.reruns import (
    CLOCK_GRACE,
    MAX_BACKFILL_RUNS,
    judge_rerun,
    rerun_request,
    take_rerun,
)
from kairos.core.run_id import rerun_request_of
from kairos.core.schedule import Schedule
from kairos.services.ticker.quotas import RecentReruns

NOW = datetime(2027, 3, 14, 12, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
EVERY_SECOND = Schedule(id="g", every=SECOND, start_at=datetime(1970, 1, 1, tzinfo=UTC))


def backfill(start: datetime, end: datetime, request_id: str = "r") -> RerunRequest:
    return RerunRequest(request_id, "g", RerunKind.BACKFILL, start, end, None, "growth", NOW, None)


def state() -> ScheduleState:
    return ScheduleState(EVERY_SECOND, version=0, next_nominal=NOW)


def test_a_request_from_1970_to_9899_is_refused_at_once_for_reaching_past_now() -> None:
    flood = backfill(datetime(1970, 1, 1, tzinfo=UTC), datetime(9899, 12, 31, tzinfo=UTC))
    verdict = judge_rerun(state(), flood, appended_at=NOW)
    assert verdict is not None and verdict.refusal is not None
    assert "past when it was appended" in verdict.refusal
    assert "request a range that ends by now" in verdict.refusal


def test_a_request_naming_more_runs_than_the_maximum_is_refused_after_counting_one_more() -> None:
    began = time.perf_counter()
    long_ago = backfill(datetime(1970, 1, 1, tzinfo=UTC), NOW)
    verdict = judge_rerun(state(), long_ago, appended_at=NOW)
    assert verdict is not None and verdict.refusal is not None
    assert f"more than {MAX_BACKFILL_RUNS} occurrences" in verdict.refusal
    assert "split it into backfills" in verdict.refusal
    assert verdict.runs == MAX_BACKFILL_RUNS + 1
    assert time.perf_counter() - began < 1.0, "judging must not walk the whole range"


def test_the_maximum_and_an_end_within_the_clock_grace_are_taken() -> None:
    most = backfill(NOW - (MAX_BACKFILL_RUNS - 1) * SECOND, NOW)
    verdict = judge_rerun(state(), most, appended_at=NOW)
    assert verdict is not None and verdict.refusal is None and verdict.runs == MAX_BACKFILL_RUNS
    ahead = backfill(NOW, NOW + CLOCK_GRACE)
    taken = judge_rerun(state(), ahead, appended_at=NOW)
    assert taken is not None and taken.refusal is None
    beyond = judge_rerun(state(), backfill(NOW, NOW + CLOCK_GRACE + SECOND), appended_at=NOW)
    assert beyond is not None and beyond.refusal is not None


def test_a_request_starting_before_1970_is_refused() -> None:
    early = backfill(datetime(1, 1, 1, tzinfo=UTC), datetime(1, 1, 2, tzinfo=UTC))
    verdict = judge_rerun(state(), early, appended_at=NOW)
    assert verdict is not None and verdict.refusal is not None
    assert "before 1970-01-01T00:00:00Z" in verdict.refusal


def test_a_retry_and_a_request_part_way_through_are_not_judged_again() -> None:
    asked = backfill(NOW - 10 * SECOND, NOW)
    done = take_rerun(state(), asked, NOW).state
    assert judge_rerun(done, asked, appended_at=NOW) is None
    halfway = replace(state(), rerun=RerunProgress("r", NOW - 5 * SECOND))
    assert judge_rerun(halfway, asked, appended_at=NOW) is None


# -- the audit judges as the ticker does, and builds only the window ---------------------------

CREATED = HistoryEvent("g", 0, 0, "upserted", EVERY_SECOND, datetime(1970, 1, 1, tzinfo=UTC))


def _owed(reruns: list[RequestedRerun], start: datetime, end: datetime) -> list[str]:
    owed = expected_occurrences([CREATED], start, end, reruns=reruns)
    return [o.run_id for o in owed["g"] if rerun_request_of(o.run_id) is not None]


def test_the_audit_owes_nothing_to_a_request_the_ticker_refuses() -> None:
    day = backfill(NOW - timedelta(days=1), NOW, "a-day")  # 86,401 runs
    assert _owed([RequestedRerun(0, 1, day, NOW)], NOW - timedelta(hours=1), NOW) == []
    future = backfill(NOW - SECOND, NOW + timedelta(hours=1), "ahead")
    assert _owed([RequestedRerun(0, 2, future, NOW)], NOW - timedelta(hours=1), NOW) == []


def test_the_audit_owes_only_the_runs_of_a_request_inside_its_window() -> None:
    asked = backfill(NOW - (MAX_BACKFILL_RUNS - 1) * SECOND, NOW, "most")
    window = (NOW - timedelta(minutes=10), NOW - timedelta(minutes=9))
    owed = _owed([RequestedRerun(0, 1, asked, NOW)], *window)
    assert len(owed) == 60
    assert owed[0] == "g@2027-03-14T11:50:00Z~rerun-most"
    assert owed[-1] == "g@2027-03-14T11:50:59Z~rerun-most"


def test_a_refused_request_fired_anyway_is_a_breach() -> None:
    day = backfill(NOW - timedelta(days=1), NOW, "a-day")
    nominal = NOW - timedelta(minutes=5)
    fired = FiredRun(
        run_id="g@2027-03-14T11:55:00Z~rerun-a-day",
        schedule_id="g",
        nominal=nominal,
        due_at=NOW,
        fired_at=NOW,
        lateness_ms=0,
        attempt=1,
        ticker_instance="t",
        schedule_offset=0,
        partition=0,
        offset=0,
    )
    start, end = NOW - timedelta(minutes=6), NOW - timedelta(minutes=4)
    owed = expected_occurrences([CREATED], start, end, reruns=[RequestedRerun(0, 1, day, NOW)])
    owed["g"] = [o for o in owed["g"] if rerun_request_of(o.run_id) is not None]  # re-runs only
    report = verify(
        owed,
        [fired],
        [],
        start=start,
        end=end,
        as_of=NOW + timedelta(minutes=1),
        grace=SECOND,
        stops=stopped_spans([CREATED]),
    )
    assert report.verdict is Verdict.BREACH and report.total("unexpected") == 1


# -- ids after a delete and re-create -------------------------------------------------------------


def _ask(definition_offset: int, request_id: str | None = None) -> RerunRequest:
    return rerun_request(
        "g",
        RerunKind.BACKFILL,
        (NOW - timedelta(hours=1), NOW),
        request_id=request_id,
        overlap=None,
        reason=None,
        requested=("ops", NOW),
        definition_offset=definition_offset,
    )


def test_the_default_request_id_is_the_same_for_one_definition_and_new_after_a_change() -> None:
    first = _ask(41)
    assert first.request_id == "backfill-20270314T110000Z-20270314T120000Z-v41"
    assert _ask(41).request_id == first.request_id, "a retried command is one request"
    assert _ask(57).request_id != first.request_id, "re-created: its runs need new ids"
    assert _ask(57, "incident-1").request_id == "incident-1"
    longest = _ask(2**63 - 1)
    assert len(longest.request_id) <= 64


def test_the_same_backfill_after_a_delete_and_re_create_is_owed_again_without_duplicates() -> None:
    deleted = HistoryEvent("g", 0, 2, "deleted", None, NOW - timedelta(minutes=30))
    again = HistoryEvent("g", 0, 3, "upserted", EVERY_SECOND, NOW - timedelta(minutes=20))
    window = (NOW - timedelta(hours=1), NOW - timedelta(minutes=59, seconds=58))
    before, after = _ask(0), _ask(3)
    reruns = [RequestedRerun(0, 1, before, NOW), RequestedRerun(0, 4, after, NOW)]
    owed = expected_occurrences([CREATED, deleted, again], *window, reruns=reruns)
    ids = [o.run_id for o in owed["g"] if rerun_request_of(o.run_id) is not None]
    assert len(ids) == 4 and len(set(ids)) == 4, ids


# -- re-runs against the fires-a-minute quota -------------------------------------------------


def test_a_request_must_fit_what_the_schedules_and_the_last_minutes_reruns_leave() -> None:
    quota = Quota(max_fires_per_minute=240)  # 60 a partition of 4
    held = Use(schedules=2, fires_per_minute=20)

    def refusal(recent: int, asked: int) -> str | None:
        return rerun_quota_refusal(
            "growth", quota, held, (recent, asked), partition=1, partitions=4
        )

    assert refusal(0, 40) is None
    assert refusal(10, 30) is None
    refused = refusal(10, 31)
    assert refused is not None and "leaves 30" in refused and "split the backfill" in refused
    assert (
        rerun_quota_refusal(
            "g", Quota(max_schedules=1), held, (0, 10**6), partition=0, partitions=4
        )
        is None
    )


def test_recent_reruns_count_the_last_minute_per_partition_and_team() -> None:
    recent = RecentReruns()
    recent.add(1, "growth", NOW, 30)
    recent.add(1, "growth", NOW + timedelta(seconds=30), 5)
    recent.add(2, "growth", NOW, 7)
    assert recent.fired(1, "growth", NOW + timedelta(seconds=59)) == 35
    assert recent.fired(1, "growth", NOW + timedelta(seconds=60)) == 5
    assert recent.fired(1, "payments", NOW) == 0
    assert recent.fired(2, "growth", NOW + timedelta(minutes=2)) == 0


@pytest.mark.parametrize("runs", [1, MAX_BACKFILL_RUNS])
def test_a_request_within_the_bounds_is_fired_whole_in_one_call(runs: int) -> None:
    asked = backfill(NOW - (runs - 1) * SECOND, NOW)
    taken = take_rerun(state(), asked, NOW)
    assert len(taken.decisions) == runs
