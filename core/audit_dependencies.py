"""Which upstream period a waiting run waits for, worked out apart for the audit, by brute force.

`kairos.core.dependencies` tells executors and `kairos apply` which period of an upstream a run
waits for; the audit must not share that code, or both could be wrong together and agree. So
this module reads the rules (docs/defaults.md) literally, walking the upstream's occurrences one
at a time with `kairos.core.calendar.next_fire` (`kairos.core.calendar_rules.next_occurrence`
for a `business_day` trigger, whose occurrences its calendars make), from a bounded look-back:

- `latest_before`: the last occurrence at or before the run's nominal instant;
- `same_instant`: the run's nominal instant, when the upstream has an occurrence there;
- `same_local_date`: the last occurrence whose instant, read on the downstream's clock, falls on
  the run's local date (it may be after the run).

Occurrences are the upstream trigger's within its `start_at`/`end_at`: calendars move and skip
runs, not periods (except a `business_day` trigger's). What the walk cannot settle within its
bounds (`LOOK_BACKS`, `MOST_STEPS`) it says is undecided, never "none": the audit then judges
nothing about that upstream.

Which upstreams a run waits for, how long and with what timeout, is taken from the definition
of its schedule that owed it (`owing_definition`, `definition_waiting`), not from its record:
the record's own wait is only compared with it (`carries`), so a ticker that fires a run
without its wait, or with another, cannot hide it from the audit (`resolve_periods`).

Pure: no clock and no I/O; calendars come in through the lookup the caller holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kairos.core.calendar import Fire, next_fire
from kairos.core.calendar_rules import CalendarLookup, next_occurrence
from kairos.core.run_id import rerun_request_of
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import DEFAULT_UPSTREAM_WAIT, PeriodMatch

if TYPE_CHECKING:  # `kairos.core.audit` reads `RunWaiting` from here
    from kairos.core.audit import FiredRun, HistoryEvent, RequestedRerun

_MS = timedelta(milliseconds=1)

LOOK_BACKS = (
    timedelta(hours=1),
    timedelta(days=1),
    timedelta(days=8),
    timedelta(days=32),
    timedelta(days=367),
)
"""How far before a run `latest_before` looks for the upstream's last occurrence, nearest
first: the first span holding one is walked occurrence by occurrence (a dense upstream costs
one short span, a weekly one a week, a yearly one a year). An upstream quiet for more than the
last one, a year, before the run is not judged."""

MOST_STEPS = 200_000
"""Occurrences walked for one period before the walk gives up (undecided): every 5 seconds for
the two days a `same_local_date` walk covers, far denser than any upstream worth waiting for."""

_LOCAL_DAY_REACH = timedelta(days=2)
"""How far on either side of a run its local date can reach: a local day is at most 26 hours
long and holds the run, so 2 days on either side hold all of it."""

_TICK = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class RunWaiting:
    """What a run waits for: as its `RunRequested` says (`run_waiting`), or as the definition
    that owed it says (`definition_waiting`), which is what the audit holds it to."""

    upstream: tuple[tuple[str, str], ...]
    """(upstream schedule id, its `PeriodMatch` as written), in the order named."""
    wait: timedelta
    """`upstream_wait`: how long after its nominal instant the run may wait."""
    timeout: str
    """`upstream_timeout` as written: `fail` or `skip`."""
    timezone: str | None = None
    """The downstream's zone, whose local date `same_local_date` reads (`None`: not recorded)."""
    fired_periods: tuple[datetime | None, ...] = ()
    """The period of each upstream as the ticker that fired the run resolved it (`None`: it
    named none), in the order of `upstream`; empty when the record does not carry them. Shown
    beside the audit's own when they differ, never used in its place."""


def run_waiting(
    upstream: Sequence[dict[str, Any]],
    wait_ms: int | None,
    timeout: str,
    timezone: str | None,
) -> RunWaiting | None:
    """The waiting fields of a `RunRequested` record, or `None` when it waits for nothing."""
    if not upstream:
        return None
    named = tuple((str(entry["schedule_id"]), str(entry["match"])) for entry in upstream)
    wait = DEFAULT_UPSTREAM_WAIT if wait_ms is None else timedelta(milliseconds=wait_ms)
    fired = tuple(entry.get("period_at") for entry in upstream)
    return RunWaiting(named, wait, timeout, timezone, fired)


def definition_waiting(definition: Schedule) -> RunWaiting | None:
    """What a run of `definition` must wait for, as the definition says (not as any record
    says); `None` when it names no upstream."""
    if not definition.upstream:
        return None
    named = tuple((upstream.schedule, upstream.match.value) for upstream in definition.upstream)
    return RunWaiting(
        named, definition.upstream_wait, definition.upstream_timeout.value, definition.timezone
    )


def carries(fired: RunWaiting | None, owed: RunWaiting) -> bool:
    """Whether a fired record carries the wait its definition owes: the same upstreams with the
    same rules (in any order), `upstream_wait` (to the millisecond, as records carry it) and
    `upstream_timeout`. The periods the ticker resolved are not compared: the audit works
    them out itself."""
    return (
        fired is not None
        and sorted(fired.upstream) == sorted(owed.upstream)
        and fired.wait // _MS == owed.wait // _MS
        and fired.timeout == owed.timeout
    )


def waiting_text(waiting: RunWaiting | None) -> str:
    """How a finding names a wait: "upstream a (latest_before), upstream_wait 3600s,
    upstream_timeout fail", or "no upstream"."""
    if waiting is None:
        return "no upstream"
    named = ", ".join(f"{schedule_id} ({match})" for schedule_id, match in waiting.upstream)
    return (
        f"upstream {named}, upstream_wait {waiting.wait.total_seconds():g}s, "
        f"upstream_timeout {waiting.timeout}"
    )


@dataclass(frozen=True, slots=True)
class PeriodAnswer:
    """The upstream period (its nominal instant, UTC) a run waits for.

    `period` is `None` with `undecided` `None` when the rule names none (the run is to be
    skipped); with `undecided` set, the walk could not tell within its bounds, and says why.
    """

    period: datetime | None
    undecided: str | None = None


def brute_upstream_period(
    upstream: Schedule,
    match: PeriodMatch,
    nominal: datetime,
    zone: ZoneInfo,
    calendars: CalendarLookup | None = None,
) -> PeriodAnswer:
    """The period of `upstream` the run at `nominal` waits for under `match`; `zone` is the
    downstream's clock (for `same_local_date`)."""
    if nominal.utcoffset() is None:
        raise ValueError(f"{nominal.isoformat()} is naive; pass an aware instant")
    nominal = nominal.astimezone(UTC)
    try:
        if match is PeriodMatch.SAME_INSTANT:
            walked = list(_occurrences(upstream, nominal - _TICK, nominal, calendars))
            return PeriodAnswer(nominal if nominal in walked else None)
        if match is PeriodMatch.SAME_LOCAL_DATE:
            return PeriodAnswer(_same_local_date(upstream, nominal, zone, calendars))
        return _latest_before(upstream, nominal, calendars)
    except _TooDenseError:
        return PeriodAnswer(None, f"more than {MOST_STEPS} occurrences to walk")


def _latest_before(
    upstream: Schedule, nominal: datetime, calendars: CalendarLookup | None
) -> PeriodAnswer:
    for back in LOOK_BACKS:
        found = None
        for instant in _occurrences(upstream, nominal - back, nominal, calendars):
            found = instant
        if found is not None:
            return PeriodAnswer(found)
        if _begins_after(upstream, nominal - back):
            return PeriodAnswer(None)  # nothing can come before the span: proven none
    return PeriodAnswer(None, f"no occurrence within {LOOK_BACKS[-1].days} days before the run")


def _begins_after(upstream: Schedule, instant: datetime) -> bool:
    """Whether the upstream has no occurrence at or before `instant` (its bounds say so)."""
    start, at = upstream.start_at, upstream.at
    return (start is not None and start > instant) or (at is not None and at > instant)


def _same_local_date(
    upstream: Schedule, nominal: datetime, zone: ZoneInfo, calendars: CalendarLookup | None
) -> datetime | None:
    day = nominal.astimezone(zone).date()
    found = None
    walk = _occurrences(upstream, nominal - _LOCAL_DAY_REACH, nominal + _LOCAL_DAY_REACH, calendars)
    for instant in walk:
        if instant.astimezone(zone).date() == day:
            found = instant
    return found


class _TooDenseError(Exception):
    """More than `MOST_STEPS` occurrences in one walk."""


def _occurrences(
    upstream: Schedule, after: datetime, until: datetime, calendars: CalendarLookup | None
) -> Iterator[datetime]:
    """Every occurrence with `after < nominal <= until`, one at a time, in order."""
    fire = _next(upstream, after, calendars)
    steps = 0
    while fire is not None and fire.nominal <= until:
        steps += 1
        if steps > MOST_STEPS:
            raise _TooDenseError
        yield fire.nominal
        fire = _next(upstream, fire.nominal, calendars)


def _next(upstream: Schedule, after: datetime, calendars: CalendarLookup | None) -> Fire | None:
    if upstream.business_day is not None:
        return next_occurrence(upstream, after, calendars)
    return next_fire(upstream, after)


# -- what each fired run waits for ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UpstreamPeriod:
    """One upstream period a fired run waits for, as the audit works it out."""

    upstream_id: str
    match: str
    """The `PeriodMatch` as the run's definition names it."""
    period: datetime | None
    """The upstream's nominal instant whose success the run waits for; `None` when the rule
    names none (the run is to be skipped) or the audit cannot tell (`undecided`)."""
    undecided: str | None = None
    """Why the audit cannot tell which period it is; `None` when it can."""


@dataclass(frozen=True, slots=True)
class RunWaits:
    """What one fired run of the window must wait for, as the audit works it out."""

    waiting: RunWaiting
    """The upstreams, wait, timeout and zone of the definition that owed the run (`version`);
    the fired record's own when no definition was in force (the run owed nothing then)."""
    periods: tuple[UpstreamPeriod, ...]
    """The period of each upstream, in the order `waiting` names them."""
    version: int | None = None
    """The schedules offset of the definition `waiting` is from; `None`: the record's."""


def resolve_periods(
    fired: Iterable[FiredRun],
    history: Sequence[HistoryEvent],
    *,
    wanted: Callable[[FiredRun], bool],
    calendars: CalendarLookup | None = None,
    reruns: Sequence[RequestedRerun] = (),
) -> dict[str, RunWaits]:
    """What every first fire `wanted` accepts must wait for, by run id, when its definition
    (`owing_definition`; `reruns` are the requests the re-runs were fired for) names upstreams:
    each upstream's period under its definition in force at the run's nominal instant."""
    resolver = _Resolver(history, calendars, reruns)
    periods: dict[str, RunWaits] = {}
    seen: set[str] = set()
    for run in fired:
        if run.attempt != 1 or run.run_id in seen or not wanted(run):
            continue
        seen.add(run.run_id)
        waits = resolver.waits_of(run)
        if waits is not None:
            periods[run.run_id] = waits
    return periods


def owing_definition(
    run: FiredRun,
    versions: Sequence[HistoryEvent],
    requests: Mapping[tuple[str, str], RequestedRerun],
) -> HistoryEvent | None:
    """The change of the run's schedule (`versions`, in topic order) whose definition owed it:
    for a re-run, the last before its request (`requests`, by schedule and request id), as the
    ticker takes one; else the last made at or before its nominal instant. The ticker's
    `schedule_offset` is not taken for it: a ticker naming another version cannot hide a wait
    (an edit it saw late is then judged by the version in force, and the finding says which
    version the record names)."""
    request_id = rerun_request_of(run.run_id)
    asked = None if request_id is None else requests.get((run.schedule_id, request_id))
    if asked is None:
        return _in_force(versions, run.nominal)
    return next((e for e in reversed(versions) if e.offset < asked.offset), None)


class _Resolver:
    """Works out upstream periods, each (upstream version, rule, instant, zone) once: the runs
    of many downstreams of one upstream share them."""

    def __init__(
        self,
        history: Sequence[HistoryEvent],
        calendars: CalendarLookup | None,
        reruns: Sequence[RequestedRerun],
    ) -> None:
        self._versions: dict[str, list[HistoryEvent]] = {}
        for event in history:
            self._versions.setdefault(event.schedule_id, []).append(event)
        self._waiters = {
            event.schedule_id
            for event in history
            if event.definition is not None and event.definition.upstream
        }
        """The schedules some version of which names upstreams: only their runs can owe waits."""
        self._requests: dict[tuple[str, str], RequestedRerun] = {}
        for rerun in sorted(reruns, key=lambda r: r.offset):
            key = (rerun.request.schedule_id, rerun.request.request_id)
            self._requests.setdefault(key, rerun)
        self._calendars = calendars
        self._known: dict[tuple[str, int, str, datetime, str], UpstreamPeriod] = {}

    def waits_of(self, run: FiredRun) -> RunWaits | None:
        """What `run` must wait for; `None` when the definition that owed it names nothing."""
        if run.schedule_id not in self._waiters and run.waiting is None:
            return None
        own = self._versions.get(run.schedule_id, ())
        owing = owing_definition(run, own, self._requests)
        if owing is not None and owing.definition is not None:
            waiting, version = definition_waiting(owing.definition), owing.offset
        else:
            waiting, version = run.waiting, None  # no definition owed it: the record's own
        if waiting is None:
            return None
        return RunWaits(waiting, self.periods_of(run, waiting), version)

    def periods_of(self, run: FiredRun, waiting: RunWaiting) -> tuple[UpstreamPeriod, ...]:
        zone = _zone(run, waiting, self._versions.get(run.schedule_id, ()))
        found = []
        for upstream_id, match in waiting.upstream:
            in_force = _in_force(self._versions.get(upstream_id, ()), run.nominal)
            version = -1 if in_force is None else in_force.offset
            key = (upstream_id, version, match, run.nominal, zone)
            if key not in self._known:
                self._known[key] = self._period(upstream_id, match, in_force, run.nominal, zone)
            found.append(self._known[key])
        return tuple(found)

    def _period(
        self,
        upstream_id: str,
        match: str,
        in_force: HistoryEvent | None,
        nominal: datetime,
        zone: str,
    ) -> UpstreamPeriod:
        definition: Schedule | None = None if in_force is None else in_force.definition
        if definition is None:
            why = "deleted" if in_force is not None else "not created yet"
            return UpstreamPeriod(upstream_id, match, None, f"it was {why} at the run's instant")
        try:
            rule = PeriodMatch(match)
            clock = ZoneInfo(zone)
        except (ValueError, ZoneInfoNotFoundError):
            return UpstreamPeriod(upstream_id, match, None, f"unknown rule or zone ({zone})")
        answer = brute_upstream_period(definition, rule, nominal, clock, self._calendars)
        return UpstreamPeriod(upstream_id, match, answer.period, answer.undecided)


def _zone(run: FiredRun, waiting: RunWaiting, own: Sequence[HistoryEvent]) -> str:
    """The downstream's zone: its definition's (or the record's), else the version the run was
    fired under, else UTC."""
    if waiting.timezone:
        return waiting.timezone
    version = next((e for e in own if e.offset == run.schedule_offset), None)
    if version is not None and version.definition is not None:
        return version.definition.timezone
    return "UTC"


def _in_force(events: Sequence[HistoryEvent], instant: datetime) -> HistoryEvent | None:
    """The schedule's last change, in topic order, made at or before `instant`."""
    return next((e for e in reversed(events) if e.changed_at <= instant), None)


def needed_periods(periods: Mapping[str, RunWaits]) -> frozenset[tuple[str, datetime]]:
    """(upstream id, nominal instant) of every period whose success the check looks for."""
    return frozenset(
        (p.upstream_id, p.period)
        for waits in periods.values()
        for p in waits.periods
        if p.period is not None
    )


def earliest_period(periods: Mapping[str, RunWaits]) -> datetime | None:
    """The earliest upstream period instant: run events are read from a margin before it."""
    return min((instant for _, instant in needed_periods(periods)), default=None)
