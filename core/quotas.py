"""Team quotas: at most N schedules and at most M fires a minute, judged where changes pass.

Pure: the ticker says what it holds and what a change would make it hold; this module decides
whether the change keeps the team within its quota. docs/teams.md states the rules for users:

- A team's use is its schedules (paused ones too: they may resume at any moment, or by
  themselves at `pause_until`) and the fires a minute they may be due at, each schedule counted
  at its most in any 60 seconds: one for a `cron` or `at` schedule, `ceil(60 s / every)` for an
  `every` shorter than a minute; times `ROLL_PEAK` with `roll` (a business day takes the
  occurrences of up to 15 days at each wall time, two of a day whose clock goes back), and
  twice with `blackout_action: defer` (one deferred to a window's end beside one of its own).
  So the quota bounds the fires due in the team's worst minute, whatever its schedules'
  calendars say (a calendar change that puts occurrences in the past runs them at once, as a
  catch-up does), and a fire is never refused: only the change that would exceed it.
- A quota is enforced per schedules partition, each holding a share of it: `ceil(limit /
  partitions)`. The verdict on a change then depends on nothing but its own partition's state,
  which every owner of the partition restores to the same, so it is the same on every ticker
  and after every restore. The price: the team holds at most its limit rounded up to a
  multiple of the partitions, and one partition filling first refuses before the whole is used.
- A change that does not raise the team's use (a delete, a pause, a redefinition as frequent
  as before) is taken even over the quota, so a team over a lowered quota can always shrink.
- Re-runs count against the fires a minute: a request is fired at once, so its runs must fit,
  beside the re-runs of the team the partition fired in the last minute, in what the team's
  schedules there leave of the partition's share (`rerun_quota_refusal`). Its verdict depends on
  what the ticker fired in the last minute, which a ticker taking the partition over does not
  know: docs/teams.md states what holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from itertools import pairwise
from zoneinfo import ZoneInfo

from kairos.core.calendar_rules import LONGEST_ROLL_DAYS
from kairos.core.cron import parse_cron
from kairos.core.schedule import Schedule
from kairos.core.schedule_calendars import BlackoutAction

_MINUTE = timedelta(minutes=1)
MAX_LIMIT = 2**31 - 1
"""The largest limit a team registration carries (an Avro `int`)."""


@dataclass(frozen=True)
class Quota:
    """A team's limits; `None`: not limited."""

    max_schedules: int | None = None
    max_fires_per_minute: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_schedules", "max_fires_per_minute"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= MAX_LIMIT:
                raise QuotaDefinitionError(
                    f"{name} {value}: give a limit from 0 to {MAX_LIMIT}, or none for no limit"
                )

    @property
    def limited(self) -> bool:
        return self.max_schedules is not None or self.max_fires_per_minute is not None


UNLIMITED = Quota()


class QuotaDefinitionError(ValueError):
    """A quota that cannot be registered; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class Use:
    """What a team's schedules take of its quota (on one partition, or in all)."""

    schedules: int = 0
    fires_per_minute: int = 0

    def __add__(self, other: Use) -> Use:
        return Use(self.schedules + other.schedules, self.fires_per_minute + other.fires_per_minute)

    def __sub__(self, other: Use) -> Use:
        return Use(self.schedules - other.schedules, self.fires_per_minute - other.fires_per_minute)


NO_USE = Use()


ROLL_PEAK = 2 * (LONGEST_ROLL_DAYS + 1)
"""How many occurrences a roll may put on one wall minute of a business day, per occurrence a
day has there: the business day's own and those of up to `LONGEST_ROLL_DAYS` days rolled to it,
each twice on a day whose clock goes back (a wildcard cron fires in both passes)."""
LONGEST_CLOCK_JUMP = timedelta(hours=1)
"""The longest a clock jumps forward under the rules in force (daylight saving time: an hour,
Lord Howe's half an hour; Samoa's skipped day of 2011 is history)."""


@dataclass(frozen=True, slots=True)
class Trigger:
    """What of a schedule its peak depends on: `every` (`None` for `cron` or `at`), a roll, a
    deferral, and how many of one day's occurrences a clock jumping forward puts at the jump
    once rolled (`at_a_jump`: 0 without a roll or where clocks never jump)."""

    every: timedelta | None = None
    rolls: bool = False
    defers: bool = False
    at_a_jump: int = 0

    @classmethod
    def of(cls, schedule: Schedule) -> Trigger:
        defers = bool(schedule.blackout) and schedule.blackout_action is BlackoutAction.DEFER
        return cls.of_fields(
            schedule.every, schedule.cron, schedule.timezone, schedule.roll is not None, defers
        )

    @classmethod
    def of_fields(
        cls, every: timedelta | None, cron: str | None, timezone: str, rolls: bool, defers: bool
    ) -> Trigger:
        """From a definition's fields (a stored record's, without building the schedule)."""
        jumps = rolls and clock_jumps_forward(timezone)
        return cls(every, rolls, defers, _within_a_jump(every, cron) if jumps else 0)


def peak_fires_per_minute(trigger: Trigger) -> int:
    """The most fires one schedule may be due at in any 60 seconds: `every`'s, or one (`cron`
    names minutes, so it fires at most once in any of them; `at` fires once), as many times
    over as a roll and a deferral may gather there. A roll puts the wall times it moves into a
    spring-forward gap at the jump, as a cron's own are (docs/defaults.md), every gathered
    day's in one minute: that minute may hold more."""
    every = trigger.every
    peak = 1 if every is None or every >= _MINUTE else math.ceil(_MINUTE / every)
    rolled = max(ROLL_PEAK * peak, (LONGEST_ROLL_DAYS + 1) * trigger.at_a_jump)
    return (rolled if trigger.rolls else peak) * (2 if trigger.defers else 1)


def _within_a_jump(every: timedelta | None, cron: str | None) -> int:
    """The most occurrences one day has in a clock's jump and at its end: in any span of wall
    time `LONGEST_CLOCK_JUMP` long, ends included."""
    span = int(LONGEST_CLOCK_JUMP.total_seconds())
    if every is not None:
        return span // max(1, int(every.total_seconds())) + 1
    if cron is None:
        return 1
    seconds = parse_cron(cron).day_seconds
    most, first = 0, 0
    for last, second in enumerate(seconds):
        while second - seconds[first] > span:
            first += 1
        most = max(most, last - first + 1)
    return most


@lru_cache(maxsize=1024)
def clock_jumps_forward(timezone: str) -> bool:
    """Whether `timezone`'s clock jumps forward under its rules from 2020 to 2040 (a zone
    that keeps one offset never puts a wall time in a gap)."""
    zone = ZoneInfo(timezone)
    offsets = [
        datetime(year, month, 15, tzinfo=zone).utcoffset()
        for year in range(2020, 2041)
        for month in range(1, 13)
    ]
    return any(
        later is not None and earlier is not None and later > earlier
        for earlier, later in pairwise(offsets)
    )


def schedule_use(trigger: Trigger) -> Use:
    """What one schedule takes of its owner's quota."""
    return Use(1, peak_fires_per_minute(trigger))


def schedules_use(triggers: Iterable[Trigger]) -> Use:
    """What schedules take together."""
    total = NO_USE
    for trigger in triggers:
        total += schedule_use(trigger)
    return total


def partition_share(limit: int, partitions: int) -> int:
    """What each of `partitions` may hold of a team's `limit`: the same on every partition, so
    no partition's verdict depends on which partitions the team's schedules hash to."""
    return math.ceil(limit / partitions)


def quota_refusal(
    team: str,
    quota: Quota,
    used: Use,
    after: Use,
    *,
    partition: int,
    partitions: int,
) -> str | None:
    """Why moving `team`'s use of `partition` from `used` to `after` exceeds `quota`, or `None`.

    A limit a change does not raise use against never refuses it (see the module docstring).
    """
    checks = (
        (quota.max_schedules, used.schedules, after.schedules, "schedules"),
        (
            quota.max_fires_per_minute,
            used.fires_per_minute,
            after.fires_per_minute,
            "fires a minute",
        ),
    )
    for limit, before, wanted, what in checks:
        if limit is None or wanted <= before:
            continue
        share = partition_share(limit, partitions)
        if wanted > share:
            return (
                f"over the quota of team {team!r}, {limit} {what}: schedules partition "
                f"{partition} holds a share of {share} of it ({limit} over {partitions} "
                f"partitions, rounded up) and the team's schedules there would take {wanted} "
                f"(now {before}); delete or slow down some of them, or ask an administrator to "
                "raise the quota (`kairos teams set-quota`); `kairos teams quota "
                f"{team}` shows each partition's use"
            )
    return None


def rerun_quota_refusal(
    team: str,
    quota: Quota,
    held: Use,
    runs: tuple[int, int],
    *,
    partition: int,
    partitions: int,
) -> str | None:
    """Why a request of `runs[1]` runs of `team`'s schedule exceeds `quota`'s fires a minute on
    `partition`, or `None`: `held` is what the team's schedules there take, `runs[0]` the
    re-runs of the team fired there in the last minute."""
    limit = quota.max_fires_per_minute
    if limit is None:
        return None
    recent, asked = runs
    share = partition_share(limit, partitions)
    spare = share - held.fires_per_minute - recent
    if asked <= spare:
        return None
    return (
        f"over the quota of team {team!r}, {limit} fires a minute: the re-run asks for {asked} "
        f"runs at once, and schedules partition {partition}'s share of {share} leaves "
        f"{max(0, spare)} (the team's schedules there take {held.fires_per_minute}, its re-runs "
        f"fired there in the last minute {recent}); split the backfill, ask again in a minute, "
        "or ask an administrator to raise the quota (`kairos teams set-quota`)"
    )
