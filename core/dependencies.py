"""Waiting for other schedules: which upstream period a run waits for, and what `apply` refuses.

A schedule names upstream schedules (`upstream`); each run starts once the matching period of
every upstream has succeeded. The rules (docs/defaults.md states them in full):

- `latest_before` (the default): the upstream's latest occurrence at or before the run's
  nominal instant. It matches any pair of triggers once the upstream has begun.
- `same_instant`: the upstream's occurrence at the run's very nominal instant.
- `same_local_date`: the upstream's last occurrence on the run's local date, read on the
  run's own clock (its `timezone`). It may lie after the run: a 02:00 run of a day waits for
  that day's 22:00 period.
- Occurrences are nominal instants within the upstream's `start_at`/`end_at`: calendars move
  and skip runs, not periods, except that a `business_day` trigger's occurrences are the
  business days. A run with no matching period is skipped, with the reason.
- A schedule may wait for its own team's schedules, and for another team's schedule whose
  `downstream_teams` names its team.
- `kairos apply` refuses an upstream that does not exist, one that does not grant the team, a
  cycle (a schedule that would wait for itself), and a rule that matches none of the next
  `RUNS_LOOKED_AT` occurrences.

Pure: no clock and no I/O; `now` and the calendars come from the caller.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from kairos.core.calendar_rules import CalendarLookup, next_occurrence
from kairos.core.data_interval import previous_occurrence
from kairos.core.run_id import format_instant
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import PeriodMatch

RUNS_LOOKED_AT = 32
"""Occurrences of a downstream checked for a match at apply: a month of a daily schedule, so a
weekday or monthly upstream matches some of them, and a rule that matches none is a mistake."""

_TICK = timedelta(microseconds=1)
"""The finest step between datetimes: "strictly before `t + _TICK`" is "at or before `t`"."""

_DAY = timedelta(days=1)


def upstream_period(
    upstream: Schedule,
    match: PeriodMatch,
    nominal: datetime,
    zone: ZoneInfo,
    calendars: CalendarLookup | None = None,
) -> datetime | None:
    """The nominal instant (UTC) of the upstream occurrence that the downstream run at `nominal`
    waits for under `match`, or `None` when there is none; `zone` is the downstream's clock.

    `latest_before` takes the period that has ended by the run (at or before it) so that the
    run sees finished data whatever the two triggers are. `same_instant` is for schedules that
    share a trigger: anything else would pair a run with a neighbour's period. `same_local_date`
    is read on the downstream's clock because the run's local date is the business day its
    owners mean ("today's settlement"), and it takes the date's last period, the one that
    completes the day, even when that is later than the run.
    """
    if nominal.utcoffset() is None:
        raise ValueError(f"{nominal.isoformat()} is naive; pass an aware instant")
    match = PeriodMatch(match)
    nominal = nominal.astimezone(UTC)
    if match is PeriodMatch.SAME_INSTANT:
        return nominal if _occurs_at(upstream, nominal, calendars) else None
    if match is PeriodMatch.LATEST_BEFORE:
        return _last_before(upstream, nominal + _TICK, calendars)
    day_start, day_end = _local_day(nominal.astimezone(zone).date(), zone)
    found = _last_before(upstream, day_end, calendars)
    return found if found is not None and found >= day_start else None


def _occurs_at(schedule: Schedule, instant: datetime, calendars: CalendarLookup | None) -> bool:
    fire = next_occurrence(schedule, instant - _TICK, calendars)
    return fire is not None and fire.nominal == instant


def _last_before(
    schedule: Schedule, bound: datetime, calendars: CalendarLookup | None
) -> datetime | None:
    """The schedule's last occurrence strictly before `bound`, within its bounds."""
    one_shot = schedule.at
    if one_shot is not None:
        # `previous_occurrence` gives a one-shot none (its data interval is its own), but a
        # run after it still has its one period to wait for.
        if one_shot < bound and _occurs_at(schedule, one_shot, calendars):
            return one_shot.astimezone(UTC)
        return None
    found = previous_occurrence(schedule, bound, calendars)
    return None if found is None else found.astimezone(UTC)


def _local_day(day: date, zone: ZoneInfo) -> tuple[datetime, datetime]:
    """The UTC instants [start, end) of `day` on `zone`'s clock.

    Where a spring-forward jump skips midnight (Havana, Santiago, Beirut), fold=0 reads the
    missing wall time with the offset before the jump, which lands on the jump: the date's
    first instant. Where a fall-back repeats midnight, fold=0 is its first pass.
    """

    def midnight(of: date) -> datetime:
        return datetime.combine(of, time(0), tzinfo=zone).astimezone(UTC)

    return midnight(day), midnight(day + _DAY)


def dependency_cycle(
    upstreams_of: Mapping[str, Collection[str]], schedule_id: str
) -> tuple[str, ...] | None:
    """The cycle through `schedule_id`, as the path from it back to it along upstream edges
    (("a", "b", "c", "a"): a waits for b, b for c, c for a), or `None` when it is on none.

    A run on a cycle waits for a period of its own that can only follow it, so it never
    starts. A depth-first walk from the schedule checks every edge of every schedule it
    reaches once: an edge back to the start closes the cycle, and the walk's stack is the path
    to it. The stack is explicit (a chain of 100,000 schedules is no recursion limit), and
    upstreams are taken in sorted order, so the same graph always names the same cycle.
    """
    path = [schedule_id]
    pending = [iter(sorted(upstreams_of.get(schedule_id, ())))]
    seen = {schedule_id}
    while pending:
        following = next(pending[-1], None)
        if following is None:
            pending.pop()
            path.pop()
        elif following == schedule_id:
            return (*path, schedule_id)
        elif following not in seen:
            seen.add(following)
            path.append(following)
            pending.append(iter(sorted(upstreams_of.get(following, ()))))
    return None


def may_wait_for(downstream_owner: str | None, upstream: Schedule) -> bool:
    """Whether a schedule of team `downstream_owner` may wait for `upstream`.

    Waiting makes a team's runs depend on another team's schedule, which that team may then
    not change or delete freely: so it takes the upstream team's consent, its
    `downstream_teams`. A team's own schedules need none, and neither do schedules of a
    deployment without owners (`None` on both sides).
    """
    if downstream_owner == upstream.owner:
        return True
    return downstream_owner is not None and downstream_owner in upstream.downstream_teams


def unmatched_reason(
    downstream: Schedule,
    upstream: Schedule,
    match: PeriodMatch,
    now: datetime,
    calendars: CalendarLookup | None = None,
) -> str | None:
    """Why `match` pairs none of the downstream's next `RUNS_LOOKED_AT` occurrences after `now`
    with an upstream period, or `None` when it pairs one (or the downstream has none).

    Every such run would be skipped, so the definition is refused while it can still be fixed.
    A rule that matches only some occurrences (a weekday upstream, a daily downstream) is
    accepted: the others are skipped with the reason when they come.
    """
    match = PeriodMatch(match)
    runs = _next_nominals(downstream, now, calendars)
    if not runs:
        return None
    zone = downstream.zone
    if any(upstream_period(upstream, match, run, zone, calendars) is not None for run in runs):
        return None
    first = runs[0]
    nearest = _nearest_occurrence(upstream, first, calendars)
    rule = f"{match.value} never matches"
    if nearest is None:
        return (
            f"{rule}: upstream {upstream.id} never fires (no occurrence within its start_at and "
            "end_at); fix its trigger or remove it"
        )
    if match is PeriodMatch.LATEST_BEFORE:
        return (
            f"{rule}: upstream {upstream.id} first runs at {format_instant(nearest)}, after this "
            f"schedule's next {len(runs)} runs ({format_instant(first)} to "
            f"{format_instant(runs[-1])}); set this schedule's start_at at or after it"
        )
    if match is PeriodMatch.SAME_INSTANT:
        return (
            f"{rule}: upstream {upstream.id} runs at {format_instant(nearest)}, this schedule "
            f"at {format_instant(first)}; use latest_before or same_local_date"
        )
    return (
        f"{rule}: upstream {upstream.id} runs at {format_instant(nearest)} "
        f"({_local_date(nearest, zone)} in {downstream.timezone}), this schedule at "
        f"{format_instant(first)} ({_local_date(first, zone)}); use latest_before"
    )


def _next_nominals(
    schedule: Schedule, after: datetime, calendars: CalendarLookup | None
) -> list[datetime]:
    nominals: list[datetime] = []
    fire = next_occurrence(schedule, after, calendars)
    while fire is not None and len(nominals) < RUNS_LOOKED_AT:
        nominals.append(fire.nominal)
        fire = next_occurrence(schedule, fire.nominal, calendars)
    return nominals


def _nearest_occurrence(
    schedule: Schedule, instant: datetime, calendars: CalendarLookup | None
) -> datetime | None:
    """The occurrence nearest `instant` on either side, the earlier on a tie."""
    before = _last_before(schedule, instant + _TICK, calendars)
    fire = next_occurrence(schedule, instant, calendars)
    after = None if fire is None else fire.nominal
    if before is None or after is None:
        return before or after
    return before if instant - before <= after - instant else after


def _local_date(instant: datetime, zone: ZoneInfo) -> str:
    return instant.astimezone(zone).date().isoformat()


def dependency_problems(
    schedules: Mapping[str, Schedule],
    changed: Iterable[Schedule],
    now: datetime,
    calendars: CalendarLookup | None = None,
) -> list[tuple[str, str]]:
    """What `kairos apply` refuses about the changed schedules' upstreams, as (schedule id,
    problem) pairs: by schedule id, then each upstream in the order named, then a cycle.

    `schedules` holds every schedule as it will stand after the apply, the changed ones
    included. Each problem is one a run would otherwise meet at run time, as a skipped or
    failed run, long after whoever wrote the definition could fix it.
    """
    checked = sorted({schedule.id: schedule for schedule in changed}.items(), key=_first)
    upstreams_of = {key: _named(schedule) for key, schedule in schedules.items()}
    upstreams_of.update((key, _named(schedule)) for key, schedule in checked)
    looping = _reaching_cycles(upstreams_of)
    problems: list[tuple[str, str]] = []
    for schedule_id, schedule in checked:
        problems.extend(
            (schedule_id, problem)
            for problem in _upstream_problems(schedule, schedules, now, calendars)
        )
        cycle = dependency_cycle(upstreams_of, schedule_id) if schedule_id in looping else None
        if cycle is not None:
            problems.append(
                (
                    schedule_id,
                    f"waits for itself through the cycle {' -> '.join(cycle)}, so none of its "
                    "runs could start; remove one of these upstreams",
                )
            )
    return problems


def _first(item: tuple[str, Schedule]) -> str:
    return item[0]


def _named(schedule: Schedule) -> list[str]:
    return [entry.schedule for entry in schedule.upstream]


def _upstream_problems(
    schedule: Schedule,
    schedules: Mapping[str, Schedule],
    now: datetime,
    calendars: CalendarLookup | None,
) -> Iterator[str]:
    for entry in schedule.upstream:
        upstream = schedules.get(entry.schedule)
        if upstream is None:
            yield f"upstream {entry.schedule} does not exist; create it first or remove it"
            continue
        if not may_wait_for(schedule.owner, upstream):
            yield _not_granted(schedule.owner, upstream)
        reason = unmatched_reason(schedule, upstream, entry.match, now, calendars)
        if reason is not None:
            yield reason


def _not_granted(owner: str | None, upstream: Schedule) -> str:
    theirs = "no team" if upstream.owner is None else f"team {upstream.owner}"
    if owner is None:
        return (
            f"upstream {upstream.id} belongs to {theirs}, and this schedule to no team; give "
            f"this schedule an owner: {upstream.owner} or a team that {upstream.id} names in "
            "its downstream_teams"
        )
    # An unowned schedule is changed by an administrators' team (docs/teams.md).
    who = "an administrator" if upstream.owner is None else theirs
    return (
        f"upstream {upstream.id} belongs to {theirs}, which does not let team {owner} wait for "
        f"it; {who} adds {owner} to the downstream_teams of {upstream.id}"
    )


def _reaching_cycles(upstreams_of: Mapping[str, Collection[str]]) -> set[str]:
    """The schedules from which a cycle is reachable (on one, or waiting for one): what is
    left once schedules whose upstreams are all settled are peeled off (Kahn's algorithm).

    One pass over the graph, so the common acyclic apply looks for no cycle at all, instead of
    walking each changed schedule's upstreams anew.
    """
    unsettled: dict[str, int] = {}
    downstreams: dict[str, list[str]] = {}
    for schedule_id, named in upstreams_of.items():
        distinct = set(named)
        unsettled[schedule_id] = len(distinct)
        for upstream_id in distinct:
            downstreams.setdefault(upstream_id, []).append(schedule_id)
    settled = [schedule_id for schedule_id, count in unsettled.items() if count == 0]
    settled.extend(upstream_id for upstream_id in downstreams if upstream_id not in unsettled)
    while settled:
        for schedule_id in downstreams.get(settled.pop(), ()):
            unsettled[schedule_id] -= 1
            if unsettled[schedule_id] == 0:
                settled.append(schedule_id)
    return {schedule_id for schedule_id, count in unsettled.items() if count > 0}
