"""The ticker's own decision path against the brute-force account of what calendars owe.

Random schedules (`exclude`, `roll` either way, `business_day`, blackouts skipping or
deferring), random calendars in New York, Lord Howe and Chatham, and random calendar changes
over 25 days across clock changes. The ticker is driven as a healthy one runs: each schedule
looked at when its indexed instant comes, a calendar change read at once and the schedules
naming it indexed again (`OwnedPartition.forget_decoded`). What it decides must be exactly what
`kairos.core.calendar_owed` (which shares none of the rules' code) says is owed: nothing owed
skipped or missing, nothing decided twice or unowed, each decided where the calendars then in
force put it (never early; late only when a change put it in the past).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kairos.core.business_calendar import BusinessCalendar, parse_calendar
from kairos.core.calendar_owed import BEGINNING, Era, OwedRun, owed_between, owed_runs
from kairos.core.calendar_rules import latest
from kairos.core.calendar_versions import CalendarVersion
from kairos.core.firing import Action, ScheduleState, decide_due, upserted
from kairos.core.quotas import Trigger, peak_fires_per_minute
from kairos.core.schedule import Schedule, parse_schedule

pytestmark = pytest.mark.unit

ZONES = ("America/New_York", "Australia/Lord_Howe", "Pacific/Chatham")
START = datetime(2027, 3, 12, tzinfo=UTC)
"""Spanning New York's spring forward (March 14) and Lord Howe's and Chatham's autumn clock
changes (April 4)."""
WINDOW = timedelta(days=25)
CALENDAR_IDS = ("desk", "market")
WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


@dataclass(frozen=True)
class Decided:
    nominal: datetime
    skipped: bool
    at: datetime
    due: datetime
    """Where its calendars put it when it was decided (its fire instant)."""


def calendar_versions(calendar_id: str) -> st.SearchStrategy[BusinessCalendar]:
    day = st.integers(-3, 28).map(lambda n: (START + timedelta(days=n)).date())
    window = st.tuples(st.integers(0, 25 * 24), st.integers(1, 40)).map(
        lambda hours: {
            "name": "freeze",
            "start": _wall(START + timedelta(hours=hours[0])),
            "end": _wall(START + timedelta(hours=hours[0] + hours[1])),
        }
    )
    week = st.one_of(
        st.just(WEEKDAYS[:5]),
        st.lists(st.sampled_from(WEEKDAYS), min_size=1, max_size=6, unique=True).map(tuple),
    )
    return st.builds(
        lambda zone, days, holidays, windows: parse_calendar(
            {
                "id": calendar_id,
                "owner": "ops",
                "timezone": zone,
                "business_days": list(days),
                "holidays": [{"date": d.isoformat(), "name": "closed"} for d in holidays],
                "windows": windows,
            }
        ),
        st.sampled_from(ZONES),
        week,
        st.lists(day, max_size=5, unique=True),
        st.lists(window, max_size=2),
    )


def _wall(instant: datetime) -> str:
    return instant.replace(tzinfo=None).isoformat(timespec="minutes")


def calendar_fields() -> st.SearchStrategy[dict[str, Any]]:
    named = st.lists(st.sampled_from(CALENDAR_IDS), min_size=1, max_size=2, unique=True)
    rolled = st.builds(
        lambda ids, roll: {"exclude": ids, "roll": roll},
        named,
        st.sampled_from(["next_business_day", "previous_business_day"]),
    )
    business_day = st.builds(
        lambda ids, n, cron: {"exclude": ids, "business_day": n, "cron": cron},
        named,
        st.sampled_from([1, 2, 5, -1, -2]),
        st.sampled_from(["0 18 * * *", "0 9,17 * * *", "30 2 * * *"]),
    )
    blackout = st.builds(
        lambda ids, action: {"blackout": ids, "blackout_action": action},
        named,
        st.sampled_from(["skip", "defer"]),
    )
    return st.one_of(named.map(lambda ids: {"exclude": ids}), rolled, business_day, blackout)


schedules = st.builds(
    lambda fields, cron, zone, misfire: parse_schedule(
        {"id": "s", "cron": cron, "timezone": zone, "misfire": misfire, **fields}
    ),
    calendar_fields(),
    st.sampled_from(["0 9,17 * * *", "*/45 * * * *", "30 2 * * *", "0 0 * * MON", "15 23 * * *"]),
    st.sampled_from(ZONES),
    st.sampled_from(["all", "skip"]),
)


@st.composite
def histories(draw: st.DrawFn) -> list[Era]:
    first: dict[str, BusinessCalendar | None] = {
        calendar_id: draw(calendar_versions(calendar_id)) for calendar_id in CALENDAR_IDS
    }
    eras = [Era(BEGINNING, first)]
    # Odd instants: never the very millisecond an occurrence is due.
    offsets = draw(st.lists(st.integers(1, 25 * 24 * 60), max_size=4, unique=True))
    for minutes in sorted(offsets):
        calendar_id = draw(st.sampled_from(CALENDAR_IDS))
        version = draw(st.none() | calendar_versions(calendar_id))
        since = START + timedelta(minutes=minutes, seconds=17)
        eras.append(Era(since, {**eras[-1].calendars, calendar_id: version}))
    return eras


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
    database=None,
)
@given(schedule=schedules, eras=histories(), created_after=st.integers(0, 36 * 60))
def test_a_healthy_ticker_decides_exactly_what_the_calendars_owe(
    schedule: Schedule, eras: list[Era], created_after: int
) -> None:
    start = START + timedelta(minutes=created_after, seconds=31)
    end = start + WINDOW
    decided = decide_as_a_ticker(schedule, eras, start, end)
    nominals = [d.nominal for d in decided]
    assert len(nominals) == len(set(nominals)), "an occurrence decided twice"
    owed = owed_runs(schedule.id, schedule, eras, start, end)
    # Occurrences decided at one instant may be listed in any order.
    assert sorted(map(_said, decided)) == sorted(map(_said, owed))
    # The quota bounds the fires due in a minute; a change that puts occurrences in the past
    # runs them at once, as a catch-up after downtime does.
    due = Counter(d.due.replace(second=0, microsecond=0) for d in decided if not d.skipped)
    worst = max(due.values(), default=0)
    assert worst <= peak_fires_per_minute(Trigger.of(schedule)), "the quota counts too few"


def decide_as_a_ticker(
    schedule: Schedule, eras: list[Era], start: datetime, end: datetime
) -> list[Decided]:
    """Each decision with the instant a ticker that is up makes it."""
    changes = [era for era in eras if era.since > start]
    versions: dict[str, CalendarVersion] = {}
    for era in eras[: len(eras) - len(changes)]:
        versions = _versions(versions, era)
    outcome = upserted(None, schedule, 0, start, start, calendars=latest(versions))
    state = outcome.state
    assert state is not None
    decided: list[Decided] = []
    now = start
    while True:
        due = state.due_at
        at = None if due is None else max(due, now)
        if changes and (at is None or changes[0].since <= at):
            era = changes.pop(0)
            versions = _versions(versions, era)
            state, now = replace(state, calendars=latest(versions)), era.since
            continue
        if at is None or at >= end:
            return decided
        state = _decide(state, at, decided)
        now = at


def _decide(state: ScheduleState, now: datetime, decided: list[Decided]) -> ScheduleState:
    outcome = decide_due(state, until=now, now=now, limit=None)
    assert outcome.decisions, "looked at when due, it decides"
    decided += [
        Decided(d.nominal, d.action is Action.SKIP, now, d.fire_at) for d in outcome.decisions
    ]
    assert outcome.state is not None
    return outcome.state


def _versions(before: dict[str, CalendarVersion], era: Era) -> dict[str, CalendarVersion]:
    """The versions in force in `era`: a calendar it left as it was keeps its `changed_at`."""
    versions = {}
    for calendar_id, calendar in era.calendars.items():
        kept = before.get(calendar_id)
        if calendar is None:
            continue
        versions[calendar_id] = (
            kept
            if kept is not None and kept.calendar is calendar
            else CalendarVersion(calendar, 1, era.since, "ops")
        )
    return versions


def _said(run: Decided | OwedRun) -> str:
    action = "skip" if run.skipped else "fire"
    return f"{run.at:%m-%d %H:%M:%S}: {run.nominal:%m-%d %H:%M} {action}"


def test_a_roll_on_a_cron_firing_twice_a_day_holds_up_nothing_and_skips_nothing() -> None:
    """Review H3: Saturday's 17:00, rolled to Monday, held Monday's own 09:00 until 17:00, and
    `misfire: skip` then skipped it."""
    schedule = parse_schedule(
        {
            "id": "s",
            "cron": "0 9,17 * * *",
            "timezone": "America/New_York",
            "exclude": ["desk"],
            "roll": "next_business_day",
            "misfire": "skip",
        }
    )
    week = parse_calendar({"id": "desk", "owner": "ops", "timezone": "America/New_York"})
    friday = datetime(2027, 5, 7, 12, tzinfo=UTC)
    eras = [Era(BEGINNING, {"desk": week})]
    decided = decide_as_a_ticker(schedule, eras, friday, friday + timedelta(days=4))
    assert sorted(map(_said, decided)) == sorted(
        map(_said, owed_runs("s", schedule, eras, friday, friday + timedelta(days=4)))
    )
    assert not [d for d in decided if d.skipped]
    monday = [d for d in decided if d.at.date() == datetime(2027, 5, 10).date()]
    assert [d.at.hour for d in monday] == [13, 13, 13, 21, 21, 21], "each at its wall time"


@pytest.mark.parametrize(
    ("holidays_before", "holidays_after", "changed", "expected"),
    [
        # A holiday removed on Dec 30 at 10:00: the close moves to Dec 31, once.
        (["2027-12-31"], [], datetime(2027, 12, 30, 15, tzinfo=UTC), "12-31 18:00"),
        # A holiday added on Dec 31 at 10:00, after Dec 30's 18:00: the close runs at its old
        # instant, late rather than never.
        ([], ["2027-12-31"], datetime(2027, 12, 31, 15, tzinfo=UTC), "12-31 18:00"),
        # Added on Dec 29: Dec 30 is still ahead, the close moves there.
        ([], ["2027-12-31"], datetime(2027, 12, 29, 15, tzinfo=UTC), "12-30 18:00"),
    ],
    ids=["holiday-removed", "holiday-added-too-late", "holiday-added-in-time"],
)
def test_a_month_end_close_runs_once_whatever_the_calendar_does(
    holidays_before: list[str], holidays_after: list[str], changed: datetime, expected: str
) -> None:
    """Review H4: the month-end close ran twice (two run ids) or never."""
    schedule = parse_schedule(
        {
            "id": "close",
            "cron": "0 18 * * *",
            "timezone": "America/New_York",
            "business_day": -1,
            "exclude": ["desk"],
        }
    )

    def desk(holidays: list[str]) -> BusinessCalendar:
        named = [{"date": day, "name": "closed"} for day in holidays]
        return parse_calendar({"id": "desk", "owner": "ops", "holidays": named})

    eras = [
        Era(BEGINNING, {"desk": desk(holidays_before)}),
        Era(changed, {"desk": desk(holidays_after)}),
    ]
    start, end = datetime(2027, 11, 1, tzinfo=UTC), datetime(2028, 1, 2, tzinfo=UTC)
    decided = decide_as_a_ticker(schedule, eras, start, end)
    december = [d for d in decided if d.nominal.astimezone(schedule.zone).month == 12]
    assert [f"{d.nominal.astimezone(schedule.zone):%m-%d %H:%M}" for d in december] == [expected]
    assert not december[0].skipped
    assert sorted(map(_said, decided)) == sorted(
        map(_said, owed_runs("close", schedule, eras, start, end))
    )


def test_a_minutely_roll_onto_a_monday_only_week_gathers_a_week_a_minute_within_the_quota() -> None:
    """Review H3: 8,641 runs were decided in Monday's last minute, counted as one a minute."""
    schedule = parse_schedule(
        {"id": "s", "cron": "* * * * *", "exclude": ["desk"], "roll": "next_business_day"}
    )
    mondays = parse_calendar({"id": "desk", "owner": "ops", "business_days": ["MON"]})
    eras = [Era(BEGINNING, {"desk": mondays})]
    start = datetime(2027, 5, 4, tzinfo=UTC)
    end = start + timedelta(days=8)
    decided = decide_as_a_ticker(schedule, eras, start, end)
    assert sorted(map(_said, decided)) == sorted(
        map(_said, owed_runs("s", schedule, eras, start, end))
    )
    per_minute = Counter(d.due for d in decided)
    assert max(per_minute.values()) == 7, "Tuesday to Sunday's occurrences beside Monday's own"
    assert max(per_minute.values()) <= peak_fires_per_minute(Trigger.of(schedule))


@pytest.mark.parametrize(
    ("zone", "jump_day", "at_the_jump"),
    [
        ("America/New_York", datetime(2027, 3, 14), 2 * 61 + 1),  # 02:00 jumps to 03:00
        ("Australia/Lord_Howe", datetime(2027, 10, 3), 2 * 31 + 1),  # 02:00 jumps to 02:30
        ("Pacific/Chatham", datetime(2027, 9, 26), 2 * 61 + 1),  # 02:45 jumps to 03:45
    ],
)
def test_wall_times_rolled_into_a_spring_forward_gap_run_at_the_jump_within_the_quota(
    zone: str, jump_day: datetime, at_the_jump: int
) -> None:
    """Friday's and Saturday's minutely occurrences roll to a Sunday whose clock jumps: those
    at wall times the clock skips, and at the one it resumes at, run at the jump, as the
    schedule's own would (`dst_gap`); the quota counts them (it counted 30)."""
    schedule = parse_schedule(
        {
            "id": "s",
            "cron": "* * * * *",
            "timezone": zone,
            "exclude": ["desk"],
            "roll": "next_business_day",
        }
    )
    sundays = parse_calendar({"id": "desk", "owner": "ops", "business_days": ["SUN"]})
    eras = [Era(BEGINNING, {"desk": sundays})]
    start = (jump_day - timedelta(days=2)).replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
    end = start + timedelta(days=3)
    decided = decide_as_a_ticker(schedule, eras, start, end)
    assert sorted(map(_said, decided)) == sorted(
        map(_said, owed_runs("s", schedule, eras, start, end))
    )
    per_minute = Counter(d.due.replace(second=0) for d in decided)
    assert max(per_minute.values()) == at_the_jump
    assert max(per_minute.values()) <= peak_fires_per_minute(Trigger.of(schedule))


def test_a_pause_runs_nothing_a_roll_back_left_after_it_and_an_edit_loses_nothing() -> None:
    """Friday 09:00 ran Saturday's and Sunday's 09:00 too (rolled back); a pause at noon runs
    neither Friday's 17:00 nor Saturday's (their nominal instants are in the pause), and an
    edit at noon decides them (at once) rather than owe them to neither definition."""
    fields = {
        "id": "s",
        "cron": "0 9,17 * * *",
        "timezone": "America/New_York",
        "exclude": ["desk"],
        "roll": "previous_business_day",
    }
    week = latest(
        {"desk": CalendarVersion(parse_calendar({"id": "desk", "owner": "ops"}), 1, BEGINNING, "o")}
    )
    created, noon = datetime(2027, 5, 6, 12, tzinfo=UTC), datetime(2027, 5, 7, 16, tzinfo=UTC)
    state = upserted(None, parse_schedule(fields), 0, created, created, calendars=week).state
    assert state is not None
    state = decide_due(state, until=noon, now=noon, limit=None).state
    assert state is not None
    paused = upserted(
        state, parse_schedule({**fields, "paused": True}), 1, noon, noon, calendars=week
    )
    assert paused.decisions == []
    edited = upserted(
        state, parse_schedule({**fields, "jitter": "1s"}), 1, noon, noon, calendars=week
    )
    local = [
        f"{d.nominal.astimezone(ZoneInfo(fields['timezone'])):%a %H:%M}" for d in edited.decisions
    ]
    assert local == ["Fri 17:00", "Sat 17:00"]


@pytest.mark.parametrize("change", ["pause-and-resume", "edit"])
def test_a_business_day_month_begun_keeps_its_day_through_a_pause_or_an_edit(change: str) -> None:
    """Dec 30 09:00 began December's close (Dec 31 a holiday); the holiday is then removed. A
    pause and resume, or an edit, at 11:00 must not run December again on Dec 31."""
    fields = {
        "id": "close",
        "cron": "0 9,17 * * *",
        "timezone": "America/New_York",
        "business_day": -1,
        "exclude": ["desk"],
    }
    closed = [{"date": "2027-12-31", "name": "closed"}]
    desk = parse_calendar({"id": "desk", "owner": "ops", "holidays": closed})
    reopened = parse_calendar({"id": "desk", "owner": "ops"})
    removed_at = datetime(2027, 12, 30, 15, 30, tzinfo=UTC)
    eras = [Era(BEGINNING, {"desk": desk}), Era(removed_at, {"desk": reopened})]
    before = latest({"desk": CalendarVersion(desk, 1, BEGINNING, "ops")})
    after = latest({"desk": CalendarVersion(reopened, 2, removed_at, "ops")})
    created, eleven = datetime(2027, 12, 1, tzinfo=UTC), datetime(2027, 12, 30, 16, tzinfo=UTC)
    state = upserted(None, parse_schedule(fields), 0, created, created, calendars=before).state
    assert state is not None
    state = decide_due(state, until=eleven, now=eleven, limit=None).state
    assert state is not None
    state = replace(state, calendars=after)
    paused = {**fields, "paused": True}
    versions = [paused, fields] if change == "pause-and-resume" else [{**fields, "jitter": "1s"}]
    for version, definition in enumerate(versions, start=1):
        changed = upserted(
            state, parse_schedule(definition), version, eleven, eleven, calendars=after
        )
        assert changed.state is not None
        state = changed.state
    decided = decide_due(state, until=datetime(2028, 1, 2, tzinfo=UTC), now=eleven, limit=None)
    zone = ZoneInfo(fields["timezone"])
    local = [f"{d.nominal.astimezone(zone):%m-%d %H:%M}" for d in decided.decisions]
    assert local[0] == "12-30 17:00" and not [day for day in local if day.startswith("12-31")]
    new_year = datetime(2028, 1, 2, tzinfo=UTC)
    began = datetime(2027, 12, 30, 14, tzinfo=UTC)
    owed = owed_between(
        "close", parse_schedule(versions[-1]), eras, eleven, new_year, decided_day=began
    )
    assert [run.nominal for run in owed] == [d.nominal for d in decided.decisions]
