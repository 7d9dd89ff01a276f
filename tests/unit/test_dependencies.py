"""Waiting for other schedules: the upstream period of a run, checked against a brute-force walk
of the upstream's occurrences and by hand; cycles, grants and what `apply` refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.calendar import next_fire
from kairos.core.dependencies import (
    dependency_cycle,
    dependency_problems,
    may_wait_for,
    unmatched_reason,
    upstream_period,
)
from kairos.core.schedule import DstGapPolicy, DstRepeatPolicy, Schedule
from kairos.core.schedule_dependencies import PeriodMatch

NEW_YORK = ZoneInfo("America/New_York")
HAVANA = ZoneInfo("America/Havana")
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
LATEST_BEFORE, SAME_INSTANT, SAME_LOCAL_DATE = (
    PeriodMatch.LATEST_BEFORE,
    PeriodMatch.SAME_INSTANT,
    PeriodMatch.SAME_LOCAL_DATE,
)


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _brute_period(
    upstream: Schedule, match: PeriodMatch, nominal: datetime, zone: ZoneInfo
) -> datetime | None:
    """Every occurrence from ten days before the run to two after, one by one, then the rule
    read literally (no upstream of the property tests is quiet for more than three days)."""
    occurrences: list[datetime] = []
    fire = next_fire(upstream, nominal - 10 * DAY)
    while fire is not None and fire.nominal <= nominal + 2 * DAY:
        occurrences.append(fire.nominal)
        fire = next_fire(upstream, fire.nominal)
    if match is SAME_INSTANT:
        return nominal if nominal in occurrences else None
    if match is LATEST_BEFORE:
        return max((at for at in occurrences if at <= nominal), default=None)
    day = nominal.astimezone(zone).date()
    return max((at for at in occurrences if at.astimezone(zone).date() == day), default=None)


ZONES = ["America/New_York", "UTC", "Australia/Lord_Howe", "Pacific/Chatham", "America/Havana"]
TRIGGERS = [
    "0 22 * * *",
    "30 * * * *",
    "15 2 * * 1-5",  # inside Lord_Howe's half-hour jump
    "45 2 * * *",  # inside Chatham's jump
    "*/20 * * * *",
    "0 0 * * *",
    "30 1 * * 0,6",
    "every",
]
# Local dates around each zone's transitions of 2026-27 (and Havana's missing midnights).
TRANSITIONS = [
    _utc(text)
    for text in (
        "2026-11-01T06:00:00+00:00",
        "2027-03-14T07:00:00+00:00",
        "2027-11-07T06:00:00+00:00",
        "2026-10-03T15:30:00+00:00",
        "2027-04-03T15:00:00+00:00",
        "2026-09-26T14:00:00+00:00",
        "2027-04-03T14:00:00+00:00",
        "2027-03-14T05:00:00+00:00",
    )
]
INSTANTS = st.one_of(
    st.builds(
        lambda base, minutes: base + minutes * MINUTE,
        st.sampled_from(TRANSITIONS),
        st.integers(-3 * 24 * 60, 3 * 24 * 60),
    ),
    st.datetimes(
        min_value=datetime(2026, 6, 1), max_value=datetime(2027, 12, 31), timezones=st.just(UTC)
    ),
)


@st.composite
def upstreams(draw: st.DrawFn, around: datetime) -> Schedule:
    trigger = draw(st.sampled_from(TRIGGERS))
    minute = around.replace(second=0, microsecond=0)
    start_hours = draw(st.none() | st.integers(-96, 96))
    start = None if start_hours is None else minute + start_hours * HOUR
    end = None
    if start is not None and draw(st.booleans()):
        end = start + draw(st.integers(60, 8 * 24 * 60)) * MINUTE
    if trigger == "every":
        anchor = start or minute - 5 * DAY
        return Schedule(id="up", every=90 * MINUTE, start_at=anchor, end_at=end)
    return Schedule(
        id="up",
        cron=trigger,
        timezone=draw(st.sampled_from(ZONES)),
        dst_repeat=draw(st.sampled_from(DstRepeatPolicy)),
        dst_gap=draw(st.sampled_from(DstGapPolicy)),
        start_at=start,
        end_at=end,
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data(), instant=INSTANTS, zone=st.sampled_from(ZONES), snap=st.booleans())
def test_the_upstream_period_is_the_one_a_walk_of_its_occurrences_picks(
    data: st.DataObject, instant: datetime, zone: str, snap: bool
) -> None:
    upstream = data.draw(upstreams(instant))
    match = data.draw(st.sampled_from(list(PeriodMatch)))
    nominal = instant
    if snap:  # a run at one of the upstream's own instants, so same_instant can match
        fire = next_fire(upstream, instant)
        nominal = fire.nominal if fire is not None else instant
    found = upstream_period(upstream, match, nominal, ZoneInfo(zone))
    assert found == _brute_period(upstream, match, nominal, ZoneInfo(zone))
    assert found is None or found.tzinfo is UTC


def test_same_local_date_waits_for_the_days_period_even_after_the_run() -> None:
    settlement = Schedule(id="settlement", cron="0 22 * * *", timezone="America/New_York")
    run = _utc("2027-06-10T02:00:00-04:00")
    # The day's period is its 22:00 one, twenty hours after the run: intended, the run is for
    # the day and waits for the day's settlement.
    assert upstream_period(settlement, SAME_LOCAL_DATE, run, NEW_YORK) == _utc(
        "2027-06-10T22:00:00-04:00"
    )
    assert upstream_period(settlement, LATEST_BEFORE, run, NEW_YORK) == _utc(
        "2027-06-09T22:00:00-04:00"
    )
    assert upstream_period(settlement, SAME_INSTANT, run, NEW_YORK) is None


def test_a_fall_back_day_has_25_hours_and_keeps_the_passes_the_upstream_runs_in() -> None:
    hourly = Schedule(id="ticks", cron="0 * * * *", timezone="America/New_York")
    late_in_the_day = _utc("2027-11-07T23:30:00-05:00")
    assert upstream_period(hourly, SAME_LOCAL_DATE, late_in_the_day, NEW_YORK) == _utc(
        "2027-11-07T23:00:00-05:00"
    )
    # The day's first hour is repeated; its first pass is the day's first instant.
    day_start = _utc("2027-11-07T00:00:00-04:00")
    assert upstream_period(hourly, SAME_LOCAL_DATE, day_start, NEW_YORK) == _utc(
        "2027-11-07T23:00:00-05:00"
    )
    both = Schedule(
        id="night", cron="30 1 * * *", timezone="America/New_York", dst_repeat=DstRepeatPolicy.BOTH
    )
    first = both.model_copy(update={"dst_repeat": DstRepeatPolicy.FIRST})
    assert upstream_period(both, SAME_LOCAL_DATE, day_start, NEW_YORK) == _utc(
        "2027-11-07T06:30:00+00:00"
    )
    assert upstream_period(first, SAME_LOCAL_DATE, day_start, NEW_YORK) == _utc(
        "2027-11-07T05:30:00+00:00"
    )


def test_a_spring_forward_day_keeps_a_moved_occurrence_and_loses_a_skipped_one() -> None:
    moved = Schedule(id="gap", cron="30 2 * * *", timezone="America/New_York")
    skipped = moved.model_copy(update={"dst_gap": DstGapPolicy.SKIP})
    evening = _utc("2027-03-14T23:00:00-04:00")
    assert upstream_period(moved, SAME_LOCAL_DATE, evening, NEW_YORK) == _utc(
        "2027-03-14T03:00:00-04:00"
    )
    assert upstream_period(skipped, SAME_LOCAL_DATE, evening, NEW_YORK) is None
    assert upstream_period(skipped, LATEST_BEFORE, evening, NEW_YORK) == _utc(
        "2027-03-13T02:30:00-05:00"
    )


def test_an_hourly_upstream_gives_the_23_00_of_the_downstreams_date() -> None:
    hourly_utc = Schedule(id="ticks", cron="0 * * * *")
    morning = _utc("2027-06-10T09:00:00-04:00")
    assert upstream_period(hourly_utc, SAME_LOCAL_DATE, morning, NEW_YORK) == _utc(
        "2027-06-10T23:00:00-04:00"
    )
    assert upstream_period(hourly_utc, SAME_LOCAL_DATE, morning, ZoneInfo("UTC")) == _utc(
        "2027-06-10T23:00:00+00:00"
    )


def test_a_date_whose_midnight_does_not_exist_starts_at_the_jump() -> None:
    # Havana springs forward at midnight on 2027-03-14: the date begins at 01:00 CDT (05:00Z).
    at_five = Schedule(id="five", cron="0 5 * * *")
    noon = _utc("2027-03-14T12:00:00-04:00")
    assert upstream_period(at_five, SAME_LOCAL_DATE, noon, HAVANA) == _utc(
        "2027-03-14T05:00:00+00:00"
    )
    the_day_before = _utc("2027-03-13T12:00:00-05:00")
    assert upstream_period(at_five, SAME_LOCAL_DATE, the_day_before, HAVANA) == _utc(
        "2027-03-13T05:00:00+00:00"
    )
    halves = Schedule(id="halves", cron="*/30 * * * *")
    assert upstream_period(halves, SAME_LOCAL_DATE, noon, HAVANA) == _utc(
        "2027-03-15T03:30:00+00:00"
    )
    # 04:30Z is still 2027-03-13 in Havana (23:30 CST), the last half hour before the jump.
    assert upstream_period(halves, SAME_LOCAL_DATE, the_day_before, HAVANA) == _utc(
        "2027-03-14T04:30:00+00:00"
    )


def test_same_instant_needs_the_very_instant() -> None:
    at_half = Schedule(id="half", cron="30 * * * *")
    on_the_hour = Schedule(id="hour", cron="0 * * * *")
    run = _utc("2027-06-10T09:00:00+00:00")
    assert upstream_period(at_half, SAME_INSTANT, run, NEW_YORK) is None
    assert upstream_period(on_the_hour, SAME_INSTANT, run, NEW_YORK) == run
    assert upstream_period(on_the_hour, "same_instant", run, NEW_YORK) == run  # type: ignore[arg-type]


def test_latest_before_is_none_before_the_upstream_starts_and_at_or_before_the_run() -> None:
    start = _utc("2027-06-10T08:30:00+00:00")
    hourly = Schedule(id="hour", cron="0 * * * *", start_at=start)
    assert upstream_period(hourly, LATEST_BEFORE, start, NEW_YORK) is None
    assert upstream_period(hourly, LATEST_BEFORE, start + 29 * MINUTE, NEW_YORK) is None
    first = start + 30 * MINUTE
    assert upstream_period(hourly, LATEST_BEFORE, first, NEW_YORK) == first
    assert upstream_period(hourly, LATEST_BEFORE, first + 59 * MINUTE, NEW_YORK) == first
    ended = hourly.model_copy(update={"end_at": first + HOUR})
    assert upstream_period(ended, LATEST_BEFORE, first + 30 * DAY, NEW_YORK) == first + HOUR


def test_an_every_upstream_counts_from_its_start() -> None:
    start = _utc("2027-01-01T00:00:00+00:00")
    every = Schedule(id="every", every=90 * MINUTE, start_at=start)
    assert upstream_period(every, LATEST_BEFORE, start + 4 * HOUR, NEW_YORK) == start + 3 * HOUR
    assert upstream_period(every, SAME_INSTANT, start + 4.5 * HOUR, NEW_YORK) == start + 4.5 * HOUR
    assert upstream_period(every, SAME_INSTANT, start + 4 * HOUR, NEW_YORK) is None
    assert upstream_period(every, SAME_LOCAL_DATE, start + HOUR, ZoneInfo("UTC")) == _utc(
        "2027-01-01T22:30:00+00:00"
    )
    # New York's 2027-01-01 runs from 05:00Z to 05:00Z the next day.
    assert upstream_period(every, SAME_LOCAL_DATE, start + 6 * HOUR, NEW_YORK) == _utc(
        "2027-01-02T04:30:00+00:00"
    )


def test_a_one_shot_and_a_business_day_upstream() -> None:
    once = Schedule(id="once", at=_utc("2027-06-10T12:00:00+00:00"))
    assert upstream_period(once, LATEST_BEFORE, _utc("2027-09-01T00:00:00+00:00"), NEW_YORK) == (
        once.at
    )
    assert upstream_period(once, LATEST_BEFORE, _utc("2027-06-10T11:59:00+00:00"), NEW_YORK) is None
    assert upstream_period(once, SAME_LOCAL_DATE, _utc("2027-06-10T04:00:00+00:00"), NEW_YORK) == (
        once.at
    )
    # A one-shot at New York's midnight belongs to the date it opens, not the one it closes.
    midnight = Schedule(id="midnight", at=_utc("2027-06-10T00:00:00-04:00"))
    evening = _utc("2027-06-09T20:00:00-04:00")
    assert upstream_period(midnight, SAME_LOCAL_DATE, evening, NEW_YORK) is None
    assert upstream_period(midnight, SAME_LOCAL_DATE, evening + 5 * HOUR, NEW_YORK) == midnight.at
    assert upstream_period(midnight, LATEST_BEFORE, evening + 4 * HOUR, NEW_YORK) == midnight.at
    monthly = Schedule(id="month", cron="0 9 * * *", timezone="America/New_York", business_day=1)
    assert upstream_period(monthly, LATEST_BEFORE, _utc("2027-03-10T00:00:00+00:00"), NEW_YORK) == (
        _utc("2027-03-01T09:00:00-05:00")
    )


def test_a_naive_run_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="naive"):
        upstream_period(
            Schedule(id="x", cron="0 * * * *"), SAME_LOCAL_DATE, datetime(2027, 1, 1), NEW_YORK
        )


def test_cycles_are_named_from_the_start_in_sorted_order() -> None:
    assert dependency_cycle({"a": ["b"], "b": ["c"]}, "a") is None
    assert dependency_cycle({}, "a") is None
    ring = {"a": ["b"], "b": ["c"], "c": ["a"]}
    assert dependency_cycle(ring, "a") == ("a", "b", "c", "a")
    assert dependency_cycle(ring, "b") == ("b", "c", "a", "b")
    # Upstreams are visited in sorted order, whatever order they were given in.
    assert dependency_cycle({"a": {"d", "c", "b"}, "b": ["a"], "c": ["a"]}, "a") == ("a", "b", "a")
    # A dead end explored first does not hide a cycle behind it.
    assert dependency_cycle({"a": ["b", "c"], "b": ["x"], "c": ["b", "a"]}, "a") == ("a", "c", "a")


def test_a_schedule_that_only_reaches_a_cycle_is_on_none() -> None:
    graph = {"x": ["a"], "a": ["b"], "b": ["a"]}
    assert dependency_cycle(graph, "x") is None
    assert dependency_cycle(graph, "a") == ("a", "b", "a")


def test_a_chain_of_100_000_schedules_needs_no_recursion() -> None:
    names = [f"s{number}" for number in range(100_000)]
    chain: dict[str, list[str]] = {name: [after] for name, after in pairwise(names)}
    assert dependency_cycle(chain, names[0]) is None
    chain[names[-1]] = [names[0]]
    cycle = dependency_cycle(chain, names[0])
    assert cycle is not None
    assert len(cycle) == 100_001
    assert cycle[:2] == ("s0", "s1")
    assert cycle[-2:] == ("s99999", "s0")


def test_who_may_wait_for_whom() -> None:
    settlement = Schedule(id="settlement", cron="0 6 * * *", owner="payments")
    shared = settlement.model_copy(update={"downstream_teams": ("reporting",)})
    unowned = Schedule(id="unowned", cron="0 6 * * *")
    assert may_wait_for("payments", settlement)
    assert may_wait_for("reporting", shared)
    assert not may_wait_for("reporting", settlement)
    assert not may_wait_for("audit", shared)
    assert may_wait_for(None, unowned)
    assert not may_wait_for(None, settlement)
    assert not may_wait_for("reporting", unowned)


NOW = _utc("2027-03-15T00:00:00+00:00")


def _schedule(schedule_id: str, cron: str, *upstream: str, **fields: object) -> Schedule:
    match = fields.pop("match", "latest_before")
    named = [{"schedule": name, "match": match} for name in upstream]
    return Schedule.model_validate({"id": schedule_id, "cron": cron, "upstream": named, **fields})


def test_a_rule_that_never_matches_is_named_with_both_instants() -> None:
    settlement = _schedule("settlement", "30 6 * * *")
    report = _schedule("report", "0 7 * * *", "settlement", match="same_instant")
    assert unmatched_reason(report, settlement, SAME_INSTANT, NOW) == (
        "same_instant never matches: upstream settlement runs at 2027-03-15T06:30:00Z, "
        "this schedule at 2027-03-15T07:00:00Z; use latest_before or same_local_date"
    )
    assert unmatched_reason(report, settlement, LATEST_BEFORE, NOW) is None
    assert unmatched_reason(report, settlement, SAME_LOCAL_DATE, NOW) is None
    weekends = _schedule("weekends", "0 6 * * 0,6")
    weekdays = _schedule("weekdays", "0 7 * * 1-5")
    assert unmatched_reason(weekdays, weekends, SAME_LOCAL_DATE, NOW) == (
        "same_local_date never matches: upstream weekends runs at 2027-03-14T06:00:00Z "
        "(2027-03-14 in UTC), this schedule at 2027-03-15T07:00:00Z (2027-03-15); "
        "use latest_before"
    )


def test_a_partial_match_is_accepted() -> None:
    weekdays = _schedule("weekdays", "0 6 * * 1-5")
    daily = _schedule("daily", "0 6 * * *")
    assert unmatched_reason(daily, weekdays, SAME_INSTANT, NOW) is None
    assert unmatched_reason(daily, weekdays, SAME_LOCAL_DATE, NOW) is None


def test_an_upstream_that_has_not_begun_or_never_fires_is_named() -> None:
    later = _schedule("later", "0 6 * * *", start_at="2027-09-01T00:00:00Z")
    hourly = _schedule("hourly", "0 * * * *")
    reason = unmatched_reason(hourly, later, LATEST_BEFORE, NOW)
    assert reason is not None
    assert "upstream later first runs at 2027-09-01T06:00:00Z" in reason
    assert "start_at" in reason
    daily = _schedule("daily", "0 7 * * *")
    assert unmatched_reason(daily, later, LATEST_BEFORE, NOW) is not None  # 32 days, not yet
    never = Schedule(id="never", at=NOW - DAY, start_at=NOW)
    assert "upstream never never fires" in (
        unmatched_reason(hourly, never, LATEST_BEFORE, NOW) or ""
    )
    finished = Schedule(id="finished", at=NOW - DAY)
    assert unmatched_reason(hourly, finished, SAME_INSTANT, NOW) == (
        "same_instant never matches: upstream finished runs at 2027-03-14T00:00:00Z, "
        "this schedule at 2027-03-15T01:00:00Z; use latest_before or same_local_date"
    )
    ended = _schedule("ended", "0 7 * * *", end_at="2026-01-01T00:00:00Z")
    assert unmatched_reason(ended, finished, SAME_INSTANT, NOW) is None  # no run left to check


def test_apply_refuses_missing_ungranted_looping_and_unmatched_upstreams() -> None:
    settlement = _schedule("settlement", "30 6 * * *", owner="payments")
    report = _schedule(
        "report", "0 7 * * *", "settlement", "ghost", owner="reporting", match="same_instant"
    )
    a = _schedule("a", "0 6 * * *", "b")
    b = _schedule("b", "0 6 * * *", "c")
    c = _schedule("c", "0 6 * * *", "a")
    schedules = {s.id: s for s in (settlement, report, a, b, c)}
    problems = dependency_problems(schedules, [report, c, a], NOW)
    assert problems == [
        ("a", "waits for itself through the cycle a -> b -> c -> a, so none of its runs could "
         "start; remove one of these upstreams"),
        ("c", "waits for itself through the cycle c -> a -> b -> c, so none of its runs could "
         "start; remove one of these upstreams"),
        ("report", "upstream settlement belongs to team payments, which does not let team "
         "reporting wait for it; team payments adds reporting to the downstream_teams of "
         "settlement"),
        ("report", "same_instant never matches: upstream settlement runs at "
         "2027-03-15T06:30:00Z, this schedule at 2027-03-15T07:00:00Z; use latest_before or "
         "same_local_date"),
        ("report", "upstream ghost does not exist; create it first or remove it"),
    ]  # fmt: skip


def test_apply_accepts_granted_upstreams_and_a_schedule_downstream_of_a_cycle() -> None:
    settlement = _schedule(
        "settlement", "0 6 * * 1-5", owner="payments", downstream_teams=["reporting"]
    )
    report = _schedule("report", "0 6 * * *", "settlement", owner="reporting", match="same_instant")
    a, b = _schedule("a", "0 6 * * *", "b"), _schedule("b", "0 6 * * *", "a")
    tail = _schedule("tail", "0 7 * * *", "a")
    schedules = {s.id: s for s in (settlement, report, a, b, tail)}
    assert dependency_problems(schedules, [report, tail], NOW) == []
    assert [schedule for schedule, _ in dependency_problems(schedules, [b, a], NOW)] == ["a", "b"]


def test_an_unowned_schedule_is_told_to_take_an_owner() -> None:
    settlement = _schedule("settlement", "0 6 * * *", owner="payments")
    report = _schedule("report", "0 7 * * *", "settlement")
    problems = dependency_problems({"settlement": settlement, "report": report}, [report], NOW)
    assert problems == [
        (
            "report",
            "upstream settlement belongs to team payments, and this schedule to no team; give "
            "this schedule an owner: payments or a team that settlement names in its "
            "downstream_teams",
        )
    ]
