"""Properties of the calendar, checked against an independent real-time oracle.

The engine works day by day on wall-clock times; the oracle walks real time minute by minute and
applies the stated rules to what a wall clock shows, so the two share no logic but the rules.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.calendar import fires_between, next_fire, next_fires
from kairos.core.cron import CronExpr, parse_cron
from kairos.core.run_id import parse_run_id, run_id
from kairos.core.schedule import Schedule

pytestmark = pytest.mark.unit

ZONES = (
    "America/New_York",
    "Europe/London",
    "Europe/Berlin",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "UTC",
)
MINUTE = timedelta(minutes=1)


def _transitions() -> list[datetime]:
    found = []
    for name in ZONES:
        zone = ZoneInfo(name)
        at = datetime(2026, 1, 1, tzinfo=UTC)
        while at < datetime(2028, 1, 1, tzinfo=UTC):
            step = at + timedelta(minutes=15)
            if step.astimezone(zone).utcoffset() != at.astimezone(zone).utcoffset():
                found.append(step)
            at = step
    return found


TRANSITIONS = _transitions()

crons = st.builds(
    " ".join,
    st.tuples(
        st.sampled_from(["*", "*/15", "0", "30", "0,30", "45", "15-45/15", "*/7"]),
        st.sampled_from(["*", "*/2", "0", "1", "2", "3", "23", "1-3", "0,2"]),
        st.sampled_from(["*", "1", "13", "*/2", "1-7", "4-6"]),
        st.sampled_from(["*", "3,4,9,10", "*/2"]),
        st.sampled_from(["*", "0", "1-5", "SAT,SUN", "*/3"]),
    ),
)
starts = st.builds(
    lambda transition, shift: transition + timedelta(seconds=shift),
    st.sampled_from(TRANSITIONS),
    st.integers(min_value=-30 * 3600, max_value=6 * 3600),
)
gaps = st.sampled_from(["run_at_transition", "skip"])
repeats = st.sampled_from(["first", "both", "last"])


def schedule_of(
    cron: str, zone: str, gap: str = "run_at_transition", repeat: str = "first"
) -> Schedule:
    return Schedule.model_validate(
        {"id": "prop", "cron": cron, "timezone": zone, "dst_gap": gap, "dst_repeat": repeat}
    )


def oracle(
    expr: CronExpr, zone: ZoneInfo, start: datetime, end: datetime, *, gap: str, repeat: str
) -> dict[datetime, bool]:
    """Fires in (start, end] by walking real time; the value says whether a DST gap moved it."""
    found: dict[datetime, bool] = {}
    at = start.replace(second=0, microsecond=0) + MINUTE
    while at <= end:
        wall = at.astimezone(zone)
        shown = wall.replace(tzinfo=None)
        repeated = wall.replace(fold=1 - wall.fold).utcoffset() != wall.utcoffset()
        chosen_pass = {"first": 0, "last": 1}.get(repeat)
        if expr.matches(shown) and (
            expr.wildcard or not repeated or chosen_pass in (None, wall.fold)
        ):
            found[at] = False
        before = (at - MINUTE).astimezone(zone)
        if (
            not expr.wildcard
            and gap == "run_at_transition"
            and at not in found
            and wall.utcoffset() > before.utcoffset()
        ):  # type: ignore[operator]
            skipped = before.replace(tzinfo=None) + MINUTE
            while skipped < shown:
                if expr.matches(skipped):
                    found[at] = True
                    break
                skipped += MINUTE
        at += MINUTE
    return found


@settings(max_examples=150, deadline=None)
@given(cron=crons, zone=st.sampled_from(ZONES), gap=gaps, repeat=repeats, start=starts)
def test_fires_agree_with_real_time_oracle(
    cron: str, zone: str, gap: str, repeat: str, start: datetime
) -> None:
    schedule = schedule_of(cron, zone, gap, repeat)
    end = start + timedelta(hours=40)
    got = {fire.nominal: fire.moved_by_dst_gap for fire in fires_between(schedule, start, end)}
    assert got == oracle(parse_cron(cron), ZoneInfo(zone), start, end, gap=gap, repeat=repeat)


@settings(max_examples=150, deadline=None)
@given(cron=crons, zone=st.sampled_from(ZONES), gap=gaps, repeat=repeats, start=starts)
def test_fires_increase_match_the_expression_and_have_unique_stable_run_ids(
    cron: str, zone: str, gap: str, repeat: str, start: datetime
) -> None:
    schedule = schedule_of(cron, zone, gap, repeat)
    expr = parse_cron(cron)
    found = next_fires(schedule, start, 40)
    instants = [fire.nominal for fire in found]
    assert instants == sorted(set(instants))
    assert all(instant > start for instant in instants)
    tz = ZoneInfo(zone)
    for fire in found:
        assert fire.wall.astimezone(UTC) == fire.nominal and fire.wall.tzinfo is tz
        if fire.moved_by_dst_gap:
            assert not expr.wildcard and gap == "run_at_transition"
            assert expr.matches(fire.requested_wall)
            requested = fire.requested_wall.replace(tzinfo=tz)
            # The requested wall time does not exist: it does not survive a round trip.
            assert (
                requested.astimezone(UTC).astimezone(tz).replace(tzinfo=None) != fire.requested_wall
            )
        else:
            assert expr.matches(fire.wall.replace(tzinfo=None))
            assert fire.requested_wall == fire.wall.replace(tzinfo=None)
    ids = [run_id(schedule.id, instant) for instant in instants]
    assert len(set(ids)) == len(ids)
    assert ids == [run_id(schedule.id, fire.nominal) for fire in next_fires(schedule, start, 40)]
    assert [parse_run_id(text) for text in ids] == [(schedule.id, i) for i in instants]


@settings(max_examples=100, deadline=None)
@given(cron=crons, zone=st.sampled_from(ZONES), start=starts)
def test_stepping_one_fire_at_a_time_equals_a_window(cron: str, zone: str, start: datetime) -> None:
    schedule = schedule_of(cron, zone)
    stepped, after = [], start
    for _ in range(10):
        fire = next_fire(schedule, after)
        assert fire is not None
        stepped.append(fire)
        after = fire.nominal
    assert stepped == list(fires_between(schedule, start, stepped[-1].nominal))


@settings(max_examples=200, deadline=None)
@given(
    anchor=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
    ).map(lambda at: at.replace(microsecond=at.microsecond // 1000 * 1000)),
    every_ms=st.integers(min_value=1000, max_value=40 * 86_400_000),
    offset=st.timedeltas(min_value=timedelta(days=-30), max_value=timedelta(days=3000)),
    zone=st.sampled_from(ZONES),
)
def test_every_counts_elapsed_time_from_start_at(
    anchor: datetime, every_ms: int, offset: timedelta, zone: str
) -> None:
    every = timedelta(milliseconds=every_ms)
    schedule = Schedule.model_validate(
        {"id": "e", "every": every, "start_at": anchor, "timezone": zone}
    )
    after = anchor + offset
    found = next_fires(schedule, after, 5)
    assert len(found) == 5
    assert found[0].nominal > after
    assert found[0].nominal == anchor or found[0].nominal - every <= after
    for fire in found:
        assert (fire.nominal - anchor) % every == timedelta(0)
        assert not fire.moved_by_dst_gap
    assert all(b.nominal - a.nominal == every for a, b in pairwise(found))
    ids = [run_id("e", fire.nominal) for fire in found]
    assert len(set(ids)) == 5
    assert [parse_run_id(text)[1] for text in ids] == [fire.nominal for fire in found]
