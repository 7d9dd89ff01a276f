"""When a schedule fires: cron on a zone's wall clock with cronie's DST rules, `every`, `at`.

Pure: every function takes the instant it reasons from. The rules (docs/defaults.md):

- A fixed-time cron job (neither minute nor hour field starts with `*`) whose wall time falls in
  a spring-forward gap runs once at the first instant after the jump (`dst_gap=skip`: not that
  day); in a repeated fall-back hour it runs in the first pass (`dst_repeat` = first|both|last).
- A wildcard cron job follows real time: nothing for skipped wall times, both passes of a
  repeated hour.
- `every` counts elapsed time from `start_at`; `at` is one instant.
- `start_at` and `end_at` are inclusive bounds on the nominal instant.

Speed: `compile_cron` returns one cached `CompiledCron` per (expression, zone, DST policies).
It remembers the UTC offsets of recent local dates and its recent answers, so for a herd of
schedules sharing expressions the next fire is a dictionary look-up, and otherwise a few look-ups
and a bisection over the expression's times of day.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from hashlib import blake2b
from itertools import islice
from zoneinfo import ZoneInfo

from kairos.core.cron import CronExpr, parse_cron
from kairos.core.errors import KairosError
from kairos.core.lru import LruCache
from kairos.core.run_id import format_instant, run_id
from kairos.core.schedule import DstGapPolicy, DstRepeatPolicy, Schedule

DAY = 86_400
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_ONE_DAY = timedelta(days=1)
_NO_JITTER = timedelta(0)

HORIZON_DAYS = 41 * 366
"""How far ahead a cron search looks before it concludes the schedule never fires.

The longest gap between matching dates of a cron expression is 40 years: a 29 February that is
a given weekday (`0 0 * 2 1#5`, the fifth Monday of February) recurs every 28 years, and 40
across a non-leap century year such as 2100. 41 years is never a false "never".
"""

_RECENT = 16
"""Fires each compiled expression keeps by instant: the herd needs a few."""

_COMPILED = 16_384
"""Compiled (expression, zone, DST policies) kept: a company's distinct ones, with room. Past
it each miss compiles again (a parse and a few day plans, tens of µs, no longer hundreds)."""
_MEMO = 8 * _COMPILED
"""Day plans, matching dates and searches remembered, shared by every compiled expression: a
few of each for every expression `compile_cron` keeps (a bounded total, about 50 MB at most)."""

# A fire of one local date before it is turned into a `Fire`:
# (POSIX second, date ordinal, hour, minute, moved by a DST gap, repeated-hour pass or 0).
_Entry = tuple[int, int, int, int, bool, int]


class CalendarError(KairosError, ValueError):
    """A calendar function was called with an unusable argument, such as a naive datetime."""


@dataclass(frozen=True, slots=True)
class Fire:
    """One occurrence of a schedule.

    `nominal` is the UTC instant the occurrence belongs to (run ids and bounds use it; jitter is
    added later). `wall` is the same instant on the schedule's wall clock. `requested_wall` is
    the naive wall time the trigger named; it differs from `wall` only when a DST gap moved the
    fire (`moved_by_dst_gap`). `repeated_hour_pass` is 1 or 2 when the wall time occurs twice
    that night (fall back) and says which pass this fire is in; otherwise `None`.

    Compare and order fires by `nominal`: by PEP 495, a `wall` inside a repeated hour compares
    unequal to every datetime in another zone, even the same instant.
    """

    nominal: datetime
    wall: datetime
    requested_wall: datetime
    moved_by_dst_gap: bool = False
    repeated_hour_pass: int | None = None


class _DayPlan:
    """The fires of one local date.

    On a date without a UTC-offset change (`base` is set: the instant of its midnight) the fires
    are `base` plus the expression's `day_seconds`, so no per-date list is kept. A date touched
    by a transition keeps its resolved fires in `entries`, sorted, one per instant.
    """

    __slots__ = ("base", "entries", "instants", "ordinal")

    def __init__(self, ordinal: int, base: int | None, entries: list[_Entry]) -> None:
        self.ordinal = ordinal
        self.base = base
        self.entries = entries
        self.instants = [entry[0] for entry in entries]

    @property
    def has_transition(self) -> bool:
        return self.base is None and bool(self.entries)

    def first(self, ts: float, inclusive: bool, day_seconds: tuple[int, ...]) -> _Entry | None:
        """This date's first fire after `ts` (or at it, when `inclusive`)."""
        search = bisect_left if inclusive else bisect_right
        if self.base is not None:
            index = search(day_seconds, ts - self.base)
            if index == len(day_seconds):
                return None
            hour, rest = divmod(day_seconds[index], 3600)
            return (self.base + day_seconds[index], self.ordinal, hour, rest // 60, False, 0)
        index = search(self.instants, ts)
        return self.entries[index] if index < len(self.entries) else None


_NO_FIRES = _DayPlan(0, None, [])


class CompiledCron:
    """A cron expression bound to a zone and DST policies, with recent dates cached.

    Memory stays small whatever the expression: ordinary dates are arithmetic over the
    expression's `day_seconds`; only dates with a transition keep a list. Safe to share between
    threads: its caches (bounded LRUs, functools' and `core.lru`'s) only hold equal values for
    a key.
    """

    def __init__(
        self, expr: CronExpr, zone: ZoneInfo, dst_gap: DstGapPolicy, dst_repeat: DstRepeatPolicy
    ) -> None:
        self.expr = expr
        self.zone = zone
        # Wildcard jobs follow real time, which is what the "skip" and "both" policies do.
        self.dst_gap = DstGapPolicy.SKIP if expr.wildcard else DstGapPolicy(dst_gap)
        self.dst_repeat = DstRepeatPolicy.BOTH if expr.wildcard else DstRepeatPolicy(dst_repeat)
        # The searches are memoized in functools' LRUs shared by every compiled expression
        # (`_day_plan`, `_matching_date`, `_answer`, below the class): a hit is answered in C,
        # and compiling costs no wrappers (three per-instance lru_caches were 60% of an intake
        # that met more expressions than `compile_cron` keeps). The fires are kept by instant,
        # not by what computes them: `LruCache`.
        self._fires: LruCache[int, Fire] = LruCache(_RECENT)

    def next_after(self, ts: float, *, inclusive: bool = False) -> Fire | None:
        """The first fire after POSIX time `ts` (or at it, when `inclusive`), or `None`."""
        # A herd asks the same question once per schedule: after the instant they all fired.
        return _answer(self, ts, inclusive)

    def _search(self, ts: float, inclusive: bool) -> Fire | None:
        seconds = self.expr.day_seconds
        # Local dates lie within a day of UTC dates; one more covers a clock set back across
        # midnight, where the previous date's second pass follows the next date's start.
        day = int(ts // DAY) - 2
        limit = day + HORIZON_DAYS
        while day <= limit:
            plan = _day_plan(self, day)
            if plan is _NO_FIRES:
                day = max(day + 1, _matching_date(self, day))
                continue
            entry = plan.first(ts, inclusive, seconds)
            if entry is None:
                day += 1
                continue
            following = _day_plan(self, day + 1)
            if plan.has_transition or following.has_transition:
                # Around a transition the next date can hold an earlier instant (or the same
                # one, reached without moving, which is the one to keep).
                other = following.first(ts, inclusive, seconds)
                if other is not None and (other[0], other[4]) < (entry[0], entry[4]):
                    entry = other
            return self._fire(entry)
        return None

    def _fire(self, entry: _Entry) -> Fire:
        fire = self._fires.get(entry[0])
        if fire is None:
            ts, ordinal, hour, minute, moved, repeat_pass = entry
            nominal = datetime.fromtimestamp(ts, UTC)
            requested = datetime.combine(date.fromordinal(ordinal), datetime.min.time())
            fire = self._fires.put(
                ts,
                Fire(
                    nominal=nominal,
                    wall=nominal.astimezone(self.zone),
                    requested_wall=requested.replace(hour=hour, minute=minute),
                    moved_by_dst_gap=moved,
                    repeated_hour_pass=repeat_pass or None,
                ),
            )
        return fire

    def _search_date(self, day: int) -> int:
        """The first local date at or after `day` (days since 1970-01-01) that the cron matches."""
        never = day + HORIZON_DAYS + 2
        if self.expr.never_matches:
            return never
        current = date.fromordinal(_EPOCH_ORDINAL + day)
        last = current + timedelta(days=HORIZON_DAYS)
        while current <= last:
            if current.month not in self.expr.months:
                current = date(current.year + current.month // 12, current.month % 12 + 1, 1)
            elif self.expr.matches_date(current):
                return current.toordinal() - _EPOCH_ORDINAL
            else:
                current += _ONE_DAY
        return never

    def _make_plan(self, day: int) -> _DayPlan:
        ordinal = _EPOCH_ORDINAL + day
        local = date.fromordinal(ordinal)
        if not self.expr.matches_date(local):
            return _NO_FIRES
        midnight = datetime(local.year, local.month, local.day, tzinfo=self.zone)
        next_midnight = midnight + _ONE_DAY
        offsets = {
            midnight.utcoffset(),
            midnight.replace(fold=1).utcoffset(),
            next_midnight.utcoffset(),
            next_midnight.replace(fold=1).utcoffset(),
        }
        if len(offsets) == 1:
            return _DayPlan(ordinal, day * DAY - _seconds(offsets.pop()), [])
        entries: list[_Entry] = []
        for second_of_day in self.expr.day_seconds:
            hour, rest = divmod(second_of_day, 3600)
            minute = rest // 60
            wall = midnight.replace(hour=hour, minute=minute)
            seconds = day * DAY + second_of_day
            # PEP 495: fold=0 reads a wall time with the offset before a transition and
            # fold=1 with the one after. Equal: an ordinary time. First earlier: the time
            # occurs twice. First later: the time falls in a gap.
            first = seconds - _seconds(wall.utcoffset())
            second = seconds - _seconds(wall.replace(fold=1).utcoffset())
            if first == second:
                entries.append((first, ordinal, hour, minute, False, 0))
            elif first < second:
                if self.dst_repeat is not DstRepeatPolicy.LAST:
                    entries.append((first, ordinal, hour, minute, False, 1))
                if self.dst_repeat is not DstRepeatPolicy.FIRST:
                    entries.append((second, ordinal, hour, minute, False, 2))
            elif self.dst_gap is DstGapPolicy.RUN_AT_TRANSITION:
                jump = transition_instant(self.zone, second, first)
                entries.append((jump, ordinal, hour, minute, True, 0))
        # Several gap times move to one transition instant, and a moved fire can meet a regular
        # one; one fire per instant, the regular one first.
        entries.sort(key=lambda entry: (entry[0], entry[4]))
        unique = [
            entry
            for position, entry in enumerate(entries)
            if position == 0 or entry[0] != entries[position - 1][0]
        ]
        return _DayPlan(ordinal, None, unique)


_day_plan: Callable[[CompiledCron, int], _DayPlan] = lru_cache(_MEMO)(CompiledCron._make_plan)
_matching_date: Callable[[CompiledCron, int], int] = lru_cache(_MEMO)(CompiledCron._search_date)
_answer: Callable[[CompiledCron, float, bool], Fire | None] = lru_cache(_MEMO)(CompiledCron._search)


def _seconds(offset: timedelta | None) -> int:
    assert offset is not None  # a ZoneInfo always has an offset
    return offset.days * DAY + offset.seconds


def transition_instant(zone: ZoneInfo, before: int, after: int) -> int:
    """The first POSIX second in (`before`, `after`] whose offset differs from `before`'s."""
    offset = datetime.fromtimestamp(before, zone).utcoffset()
    while after - before > 1:
        middle = (before + after) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == offset:
            before = middle
        else:
            after = middle
    return after


@lru_cache(maxsize=_COMPILED)
def compile_cron(
    cron: str,
    timezone: str,
    dst_gap: DstGapPolicy = DstGapPolicy.RUN_AT_TRANSITION,
    dst_repeat: DstRepeatPolicy = DstRepeatPolicy.FIRST,
) -> CompiledCron:
    """The shared compiled form of an expression in a zone; schedules with equal keys share it."""
    return CompiledCron(parse_cron(cron), ZoneInfo(timezone), dst_gap, dst_repeat)


def _timestamp(instant: datetime, name: str) -> float:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise CalendarError(
            f"{name} {instant.isoformat()} is naive; pass an aware datetime "
            "such as datetime(2027, 3, 14, tzinfo=UTC)"
        )
    return instant.timestamp()


def next_fire(schedule: Schedule, after: datetime) -> Fire | None:
    """The schedule's first fire strictly after `after`, within its bounds; `None` if none.

    `paused` is not considered: pausing stops runs, not the calendar.
    """
    ts = _timestamp(after, "after")
    start, end = schedule.start_at, schedule.end_at
    fire: Fire | None
    if schedule.cron is not None:
        compiled = compile_cron(
            schedule.cron, schedule.timezone, schedule.dst_gap, schedule.dst_repeat
        )
        fire = (
            compiled.next_after(start.timestamp(), inclusive=True)
            if start is not None and after < start
            else compiled.next_after(ts)
        )
    elif schedule.every is not None:
        assert start is not None  # the model requires start_at with every
        if after < start:
            nominal = start
        else:
            try:
                nominal = start + ((after - start) // schedule.every + 1) * schedule.every
            except OverflowError:
                return None
        fire = real_time_fire(nominal, schedule.zone)
    else:
        at = schedule.at
        if at is None or at <= after or (start is not None and at < start):
            return None
        fire = real_time_fire(at, schedule.zone)
    if fire is None or (end is not None and fire.nominal > end):
        return None
    return fire


def real_time_fire(nominal: datetime, zone: ZoneInfo) -> Fire:
    """The fire of an instant that is not a cron wall time (`every`, `at`, business days)."""
    wall = nominal.astimezone(zone)
    other = wall.replace(fold=1 - wall.fold)
    # A real instant never shows a gap time, so a wall time with two readings occurs twice.
    repeat_pass = wall.fold + 1 if other.utcoffset() != wall.utcoffset() else None
    return Fire(
        nominal=nominal.astimezone(UTC),
        wall=wall,
        requested_wall=wall.replace(tzinfo=None, fold=0),
        repeated_hour_pass=repeat_pass,
    )


def iter_fires(schedule: Schedule, after: datetime) -> Iterator[Fire]:
    """Every fire strictly after `after`, in order (endless unless the schedule ends)."""
    fire = next_fire(schedule, after)
    while fire is not None:
        yield fire
        fire = next_fire(schedule, fire.nominal)


def fires_between(schedule: Schedule, start: datetime, end: datetime) -> Iterator[Fire]:
    """The fires with `start < nominal <= end`, in order: the occurrences due in that window."""
    _timestamp(end, "end")
    for fire in iter_fires(schedule, start):
        if fire.nominal > end:
            return
        yield fire


def next_fires(schedule: Schedule, after: datetime, count: int) -> list[Fire]:
    """The next `count` fires strictly after `after` (fewer when the schedule ends)."""
    return list(islice(iter_fires(schedule, after), count))


def never_fires_reason(schedule: Schedule, after: datetime) -> str | None:
    """Why the schedule has no fire after `after`, or `None` when it has one."""
    if next_fire(schedule, after) is not None:
        return None
    if schedule.cron is not None and parse_cron(schedule.cron).never_matches:
        return f"cron {schedule.cron!r} matches no calendar date"
    if schedule.end_at is not None and schedule.end_at <= after:
        return f"it ended at {format_instant(schedule.end_at)}"
    if schedule.at is not None:
        return (
            f"its one instant {format_instant(schedule.at)} is not after "
            f"{format_instant(after)} or lies outside start_at/end_at"
        )
    return "no occurrence falls between start_at and end_at"


def fire_instant_with_jitter(schedule_id: str, schedule: Schedule, nominal: datetime) -> datetime:
    """When the occurrence at `nominal` of schedule `schedule_id` should start: `nominal` plus
    its jitter offset.

    The offset is in [0, jitter), in whole milliseconds, taken from a BLAKE2b hash of the run id,
    so the same run gets the same offset in every process and version and a herd spreads evenly.
    The id is given apart: a ticker's `schedule` is a definition shared by many ids.
    """
    if not schedule.jitter:  # checked here too: this runs once per fire of a herd
        return nominal
    return nominal + jitter_offset(schedule_id, schedule, nominal)


def jitter_offset(schedule_id: str, schedule: Schedule, nominal: datetime) -> timedelta:
    """The jitter of the occurrence at `nominal` (see `fire_instant_with_jitter`)."""
    jitter = schedule.jitter
    if not jitter:
        return _NO_JITTER
    return _jitter_offset(schedule_id, jitter // timedelta(milliseconds=1), nominal)


@lru_cache(maxsize=65_536)
def _jitter_offset(schedule_id: str, span_ms: int, nominal: datetime) -> timedelta:
    # Asked several times per fire (deciding it, the state's due instant, its store write); the
    # run id and its hash were 18% of a steady ticker's time before this cache.
    digest = blake2b(run_id(schedule_id, nominal).encode(), digest_size=8).digest()
    return timedelta(milliseconds=int.from_bytes(digest, "big") % span_ms)
