"""Kairos reads every five-field expression croniter accepts, with croniter's meaning.

Random expressions (numbers, names, ranges that wrap, steps, lists, `?`, `L`, `nW`, `#`, `Ln`)
are compared on random zones and instants away from DST transitions, where croniter has no
rules of its own to differ on. croniter runs with `implement_cron_bug=True`: cronie's rule that
a day field starting with `*` makes the two day fields AND instead of OR, which Kairos keeps.

Left out on purpose, each a place where Kairos follows cron or Quartz instead (docs/defaults.md):
equal ranges (`1-1` is one value, croniter widens it to the field), `nW` past a month's end
(`31W` skips April, croniter takes the 30th), `#`/`W`/`L` with the other day field restricted
(cron's OR; croniter intersects), a day field naming every day without starting with `*`
(`0,*/1`: cron ORs it with the other day field; croniter folds it to `*` and ANDs), and the
extensions croniter lacks (`L-n`, `LW`, `FRIL`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kairos.core.calendar import next_fires
from kairos.core.cron import CronSyntaxError, parse_cron
from kairos.core.schedule import Schedule

pytestmark = pytest.mark.unit

STEADY_ZONES = ("UTC", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Tokyo", "America/Phoenix")
CHANGING_ZONES = ("America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Chatham")
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
FIRES = 6
NAMED = {name: str(number) for names in (MONTHS, DAYS) for number, name in enumerate(names)}
NAMED |= {name: str(number) for number, name in enumerate(MONTHS, start=1)}


def value(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    numbers = st.integers(low, high).map(str)
    if not names:
        return numbers
    return numbers | st.sampled_from(names) | st.sampled_from(names).map(str.lower)


def item(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    one = value(low, high, names)
    steps = st.integers(1, max(1, (high - low) // 2)).map(str)
    ranges = st.tuples(one, one).filter(lambda pair: pair[0].upper() != pair[1].upper())
    return st.one_of(
        st.just("*"),
        steps.map(lambda step: f"*/{step}"),
        one,
        ranges.map("-".join),
        st.tuples(ranges, steps).map(lambda parts: f"{'-'.join(parts[0])}/{parts[1]}"),
        st.tuples(one, steps).map("/".join),
    )


def field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    return st.lists(item(low, high, names), min_size=1, max_size=3).map(",".join)


def _left_out(text: str) -> bool:
    try:
        expr = parse_cron(text)
    except CronSyntaxError:
        return False  # kept: the test fails if croniter accepts what Kairos refuses
    if (not expr.dom_star and expr.days_of_month == set(range(1, 32))) or (
        not expr.dow_star and expr.days_of_week == set(range(7))
    ):
        return True
    return any(_equal_range(part) for part in text.replace(" ", ",").split(","))


def _equal_range(part: str) -> bool:
    bounds = [NAMED.get(bound.upper(), bound) for bound in part.partition("/")[0].split("-")]
    return len(bounds) == 2 and bounds[0] == bounds[1]


plain_days = st.tuples(field(1, 31), field(0, 7, DAYS)) | st.tuples(st.just("?"), field(0, 7, DAYS))
# An extension on one day field, the other unrestricted (see the module docstring).
extended_days = st.one_of(
    st.tuples(st.sampled_from(["L", "l", "L,15", "1,L"]), st.sampled_from(["*", "?"])),
    st.tuples(st.integers(1, 28).map(lambda day: f"{day}W"), st.sampled_from(["*", "?"])),
    st.tuples(
        st.sampled_from(["*", "?"]),
        st.lists(
            st.tuples(value(0, 7, DAYS), st.integers(1, 5)).map(lambda p: f"{p[0]}#{p[1]}"),
            min_size=1,
            max_size=2,
        ).map(",".join),
    ),
    st.tuples(st.sampled_from(["*", "?"]), st.integers(0, 7).map(lambda day: f"L{day}")),
)
expressions = st.builds(
    lambda minute, hour, days, month: f"{minute} {hour} {days[0]} {month} {days[1]}",
    field(0, 59),
    field(0, 23),
    plain_days | extended_days,
    field(1, 12, MONTHS),
).filter(lambda text: not _left_out(text))
starts = st.integers(
    int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()),
    int(datetime(2028, 1, 1, tzinfo=UTC).timestamp()),
).map(lambda seconds: datetime.fromtimestamp(seconds, UTC))


def _steady_until(zone: ZoneInfo, start: datetime) -> datetime | None:
    """The instant two days before the zone's next offset change, or `None` if it has none soon.

    `None` also when the last change was less than two days before `start`.
    """
    offset = start.astimezone(zone).utcoffset()
    at = start - timedelta(days=2)
    while at < start + timedelta(days=400):
        at += timedelta(hours=1)
        if at.astimezone(zone).utcoffset() != offset:
            return at - timedelta(days=2) if at > start + timedelta(days=2) else start
    return None


def croniter_fires(expression: str, zone: ZoneInfo, start: datetime) -> list[datetime]:
    runner = croniter(expression, start.astimezone(zone), implement_cron_bug=True)
    return [runner.get_next(datetime).astimezone(UTC) for _ in range(FIRES)]


@settings(max_examples=400, deadline=None)
@given(
    expression=expressions, zone_name=st.sampled_from(STEADY_ZONES + CHANGING_ZONES), start=starts
)
def test_kairos_reads_what_croniter_accepts_as_croniter_does(
    expression: str, zone_name: str, start: datetime
) -> None:
    assume(croniter.is_valid(expression))
    assume(not parse_cron(expression).never_matches)
    zone = ZoneInfo(zone_name)
    until = _steady_until(zone, start)
    schedule = Schedule.model_validate({"id": "agree", "cron": expression, "timezone": zone_name})
    ours = [fire.nominal for fire in next_fires(schedule, start, FIRES)]
    theirs = croniter_fires(expression, zone, start)
    if until is not None:
        ours = [instant for instant in ours if instant < until]
        theirs = [instant for instant in theirs if instant < until]
    assert ours == theirs


@pytest.mark.parametrize(
    "expression",
    [
        "0 9 * JAN-MAR MON-FRI",
        "0 9 * jan,Feb,MAR mon,WED,fri",
        "0 9 1 APR-JAN SAT-MON",
        "0 9 * DEC/2 SUN",
    ],
)
def test_names_work_wherever_numbers_do(expression: str) -> None:
    numbers = (
        expression.upper()
        .replace("JAN", "1")
        .replace("FEB", "2")
        .replace("MAR", "3")
        .replace("APR", "4")
        .replace("DEC", "12")
    )
    for name, number in zip(DAYS, range(7), strict=True):
        numbers = numbers.replace(name, str(number))
    named, numbered = parse_cron(expression), parse_cron(numbers)
    assert (named.months, named.days_of_week) == (numbered.months, numbered.days_of_week)
