"""The audit's proof that waiting runs waited: no run started before its upstream periods
succeeded, and none was left waiting past its wait without an outcome.

A run that names upstream schedules (`RunWaiting`, as its `RunRequested` carries them) may not
start until the matching period of each has succeeded: a run of the upstream with that nominal
instant, the scheduled one or any re-run of it, reported `succeeded`. When its wait
(`upstream_wait` after its nominal instant) ends first, an executor ends it (`dead_lettered`
or `failed`, or `skipped`, as `upstream_timeout` says). Two findings follow, both breaches
(docs/audit.md):

- `started_before_upstream`: the run's first `started` event is stamped more than
  `CLOCK_TOLERANCE` before the earliest `succeeded` event (by `finished_at`) of an upstream's
  period, or it started though that period never succeeded, or though the rule names no period;
- `waiting_past_deadline`: the run was fired, its wait and `WAIT_GRACE` have passed by the
  audit's as-of instant (or its fire came later, and the grace after it passed), and no run
  event says it started or ended (`ENDING_KINDS`).

Which period a run waits for is worked out by `kairos.core.audit_dependencies`, apart from the
code the executors use, under the upstream's definition in force at the run's nominal instant
in the schedule history. A period the walk cannot settle, or an upstream with no definition
then, is not judged. Pure: the records come in read and `as_of` is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kairos.core.audit import FiredRun, HistoryEvent, RunEventRecord
from kairos.core.audit_dependencies import RunWaiting, brute_upstream_period
from kairos.core.audit_margin import CLOCK_MARGIN
from kairos.core.audit_report import Finding, FindingKind, ScheduleAudit
from kairos.core.calendar_rules import CalendarLookup
from kairos.core.run_id import RunIdError, format_instant, parse_run_id
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import PeriodMatch

CLOCK_TOLERANCE = timedelta(seconds=1)
"""How much earlier than its upstream period's success a run's start may be stamped before it
counts as started too soon. The two instants come from two executors' clocks (the downstream's
`started_at`, the upstream's `finished_at`), each truncated to the millisecond on the wire, and
hosts kept by NTP agree to within milliseconds: a second is far more than they drift apart. A
run that really did not wait starts on its own trigger, seconds to hours before its upstream
period ends, which this leaves visible."""

WAIT_GRACE = CLOCK_MARGIN
"""How long after its wait ends (or after its fire, when fired later) a waiting run may go
without a `started` or ending event before the audit reports it: the audit's clock margin
(`kairos.core.audit_margin`, 5 minutes), the same allowance the audit already gives the
producers' clocks. The executor ending it reads its own clock, which may lag the audit's, then
publishes through its outbox: seconds normally, well inside it."""

ENDING_KINDS = frozenset({"succeeded", "failed", "dead_lettered", "skipped"})
"""Run events after which a run is no longer waiting: it ran, or was ended (the schema has no
other ending kind; `retrying` and `deadline_missed` follow a start or say nothing of one)."""

STARTED_KINDS = frozenset({"started"})


@dataclass(frozen=True, slots=True)
class UpstreamPeriod:
    """One upstream period a fired run waits for, as the audit works it out."""

    upstream_id: str
    match: str
    """The `PeriodMatch` as the run was fired with it."""
    period: datetime | None
    """The upstream's nominal instant whose success the run waits for; `None` when the rule
    names none (the run is to be skipped) or the audit cannot tell (`undecided`)."""
    undecided: str | None = None
    """Why the audit cannot tell which period it is; `None` when it can."""


UpstreamPeriods = Mapping[str, tuple[UpstreamPeriod, ...]]
"""The periods each waiting run of the window waits for, by its run id."""


def resolve_periods(
    fired: Iterable[FiredRun],
    history: Sequence[HistoryEvent],
    *,
    wanted: Callable[[FiredRun], bool],
    calendars: CalendarLookup | None = None,
) -> dict[str, tuple[UpstreamPeriod, ...]]:
    """The upstream periods of every first fire `wanted` accepts that waits for some, by run
    id; each upstream's under its definition in force at the run's nominal instant."""
    resolver = _Resolver(history, calendars)
    periods: dict[str, tuple[UpstreamPeriod, ...]] = {}
    for run in fired:
        if run.waiting is None or run.attempt != 1 or run.run_id in periods or not wanted(run):
            continue
        periods[run.run_id] = resolver.periods_of(run, run.waiting)
    return periods


class _Resolver:
    """Works out upstream periods, each (upstream version, rule, instant, zone) once: the runs
    of many downstreams of one upstream share them."""

    def __init__(self, history: Sequence[HistoryEvent], calendars: CalendarLookup | None) -> None:
        self._versions: dict[str, list[HistoryEvent]] = {}
        for event in history:
            self._versions.setdefault(event.schedule_id, []).append(event)
        self._calendars = calendars
        self._known: dict[tuple[str, int, str, datetime, str], UpstreamPeriod] = {}

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
    """The downstream's zone: as fired, else its version that fired the run, else UTC."""
    if waiting.timezone:
        return waiting.timezone
    version = next((e for e in own if e.offset == run.schedule_offset), None)
    if version is not None and version.definition is not None:
        return version.definition.timezone
    return "UTC"


def _in_force(events: Sequence[HistoryEvent], instant: datetime) -> HistoryEvent | None:
    """The schedule's last change, in topic order, made at or before `instant`."""
    return next((e for e in reversed(events) if e.changed_at <= instant), None)


def needed_periods(periods: UpstreamPeriods) -> frozenset[tuple[str, datetime]]:
    """(upstream id, nominal instant) of every period whose success the check looks for."""
    return frozenset(
        (p.upstream_id, p.period)
        for found in periods.values()
        for p in found
        if p.period is not None
    )


def earliest_period(periods: UpstreamPeriods) -> datetime | None:
    """The earliest upstream period instant: run events are read from a margin before it."""
    return min((instant for _, instant in needed_periods(periods)), default=None)


# -- the findings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Outcomes:
    """What the run events say of the periods and the waiting runs."""

    successes: Mapping[tuple[str, datetime], RunEventRecord]
    """The earliest committed `succeeded` (by `finished_at`) of each period, by run id parts."""
    unsettled: Sequence[RunEventRecord]
    """Run events past a last stable offset: in a transaction still open."""
    as_of: datetime


def dependency_findings(
    periods: UpstreamPeriods,
    commits: Mapping[str, Sequence[FiredRun]],
    events: Sequence[RunEventRecord],
    unsettled: Sequence[RunEventRecord],
    *,
    as_of: datetime,
) -> list[Finding]:
    """Every waiting run of the window (`commits`: its committed first fires by run id) that
    started before an upstream period succeeded, or was left waiting past its wait. `events`
    are the committed run events read (the window's runs', and the successes of upstream
    periods before the window too), `unsettled` those past a last stable offset: a record there
    that would settle a breach makes it `hidden`, not a breach."""
    outcomes = _Outcomes(_successes(events), unsettled, as_of)
    story: dict[str, list[RunEventRecord]] = {}
    for event in events:
        if event.run_id in periods:
            story.setdefault(event.run_id, []).append(event)
    found: list[Finding] = []
    for run_id, waits in periods.items():
        runs = commits.get(run_id)
        if not runs:
            continue
        first = min(runs, key=lambda run: run.offset)
        told = story.get(run_id, [])
        started = [e for e in told if e.kind in STARTED_KINDS]
        if started:
            start = min(started, key=lambda e: e.offset)
            if start.started_at is not None:
                found += _started_findings(first, start, start.started_at, waits, outcomes)
        elif not any(e.kind in ENDING_KINDS for e in told):
            found += _waiting_findings(first, waits, outcomes)
    return found


def _successes(events: Iterable[RunEventRecord]) -> dict[tuple[str, datetime], RunEventRecord]:
    earliest: dict[tuple[str, datetime], RunEventRecord] = {}
    for event in events:
        key = _period_of(event)
        if key is None:
            continue
        held = earliest.get(key)
        if held is None or _finished(event) < _finished(held):
            earliest[key] = event
    return earliest


def _period_of(event: RunEventRecord) -> tuple[str, datetime] | None:
    """(schedule id, nominal instant) of the period a timed `succeeded` event settles: the
    occurrence its run id names, a re-run's (`…~rerun-<id>`) included."""
    if event.kind != "succeeded" or event.finished_at is None:
        return None
    try:
        return parse_run_id(event.run_id)
    except RunIdError:
        return None


def _finished(event: RunEventRecord) -> datetime:
    assert event.finished_at is not None  # only timed successes are kept
    return event.finished_at


def _started_findings(
    run: FiredRun,
    start: RunEventRecord,
    began: datetime,
    waits: Sequence[UpstreamPeriod],
    outcomes: _Outcomes,
) -> list[Finding]:
    """The upstream periods the run's first start (`began`, by `start`) came too soon for."""
    found = []
    for wait in waits:
        if wait.undecided is not None:
            continue
        if wait.period is None:
            detail = (
                f"{_started(start)}, but upstream {wait.upstream_id} has no period matching "
                f"{wait.match} at this nominal instant: the run was to be skipped"
            )
            detail += _fired_for(run, wait)
            found.append(_finding(FindingKind.STARTED_BEFORE_UPSTREAM, run, detail))
            continue
        success = outcomes.successes.get((wait.upstream_id, wait.period))
        if success is not None and _finished(success) <= began + CLOCK_TOLERANCE:
            continue
        found.append(_too_soon(run, start, wait, success, outcomes))
    return found


def _too_soon(
    run: FiredRun,
    start: RunEventRecord,
    wait: UpstreamPeriod,
    success: RunEventRecord | None,
    outcomes: _Outcomes,
) -> Finding:
    assert start.started_at is not None and wait.period is not None
    began = start.started_at
    held = _held_back(
        outcomes,
        lambda e: (
            _period_of(e) == (wait.upstream_id, wait.period)
            and _finished(e) <= began + CLOCK_TOLERANCE
        ),
    )
    if held is not None:
        return _hidden(run, held, f"a success of upstream {wait.upstream_id}'s period")
    period = f"upstream {wait.upstream_id}'s period {_text(wait.period)} ({wait.match})"
    if success is None:
        detail = f"{_started(start)}, but {period} has no succeeded run event"
    else:
        early = _seconds(_finished(success) - began)
        detail = (
            f"{_started(start)}, {early} before {period} succeeded at "
            f"{_text(_finished(success))} (run {success.run_id}, {success.source}); clock "
            f"tolerance {_seconds(CLOCK_TOLERANCE)}"
        )
    return _finding(FindingKind.STARTED_BEFORE_UPSTREAM, run, detail + _fired_for(run, wait))


def _fired_for(run: FiredRun, wait: UpstreamPeriod) -> str:
    """What the ticker that fired the run resolved the period to, when not the audit's."""
    waiting = run.waiting
    assert waiting is not None  # only waiting runs have periods
    named = [upstream for upstream, _ in waiting.upstream]
    if len(waiting.fired_periods) != len(named) or wait.upstream_id not in named:
        return ""
    fired = waiting.fired_periods[named.index(wait.upstream_id)]
    if fired == wait.period:
        return ""
    said = "no period" if fired is None else f"the period {_text(fired)}"
    return f"; the run was fired waiting for {said}"


def _waiting_findings(
    run: FiredRun, waits: Sequence[UpstreamPeriod], outcomes: _Outcomes
) -> list[Finding]:
    assert run.waiting is not None  # only waiting runs have periods
    ended_by = max(run.nominal + run.waiting.wait, run.fired_at)
    if ended_by + WAIT_GRACE >= outcomes.as_of:
        return []
    held = _held_back(
        outcomes, lambda e: e.run_id == run.run_id and e.kind in STARTED_KINDS | ENDING_KINDS
    )
    if held is not None:
        return [_hidden(run, held, "its start or end")]
    upstreams = "; ".join(_wait_text(wait, outcomes) for wait in waits)
    detail = (
        f"fired at {_text(run.fired_at)} to wait for {upstreams}; its wait of "
        f"{_seconds(run.waiting.wait)} ended at {_text(ended_by)} (upstream_timeout: "
        f"{run.waiting.timeout}), yet {_seconds(WAIT_GRACE)} later no run event says it "
        "started, succeeded, failed, was dead-lettered or skipped"
    )
    return [_finding(FindingKind.WAITING_PAST_DEADLINE, run, detail)]


def _wait_text(wait: UpstreamPeriod, outcomes: _Outcomes) -> str:
    name = f"upstream {wait.upstream_id} ({wait.match})"
    if wait.undecided is not None:
        return f"{name}, period not worked out: {wait.undecided}"
    if wait.period is None:
        return f"{name}, which has no matching period"
    success = outcomes.successes.get((wait.upstream_id, wait.period))
    state = "not succeeded" if success is None else f"succeeded at {_text(_finished(success))}"
    return f"{name} period {_text(wait.period)}, {state}"


def _held_back(
    outcomes: _Outcomes, settles: Callable[[RunEventRecord], bool]
) -> RunEventRecord | None:
    """The first run event past a last stable offset that would settle the breach."""
    return next((e for e in outcomes.unsettled if settles(e)), None)


def _hidden(run: FiredRun, record: RunEventRecord, what: str) -> Finding:
    detail = (
        f"{what} is past the last stable offset of run-events partition {record.partition} "
        f"(offset {record.offset}): in a transaction still open, not yet committed or aborted"
    )
    return _finding(FindingKind.HIDDEN, run, detail)


def _finding(kind: FindingKind, run: FiredRun, detail: str) -> Finding:
    return Finding(kind, run.schedule_id, run.run_id, run.nominal, run.due_at, run.fired_at, detail)


def _started(start: RunEventRecord) -> str:
    assert start.started_at is not None
    return f"started at {_text(start.started_at)} (attempt {start.attempt}, {start.source})"


def with_findings(audits: Sequence[ScheduleAudit], found: Sequence[Finding]) -> list[ScheduleAudit]:
    """`audits`, each with its schedule's `found` among its findings, in the report's order."""
    by_schedule: dict[str, list[Finding]] = {}
    for finding in found:
        by_schedule.setdefault(finding.schedule_id, []).append(finding)
    return [
        replace(
            audit,
            findings=tuple(
                sorted(
                    [*audit.findings, *by_schedule[audit.schedule_id]],
                    key=lambda f: (f.nominal, f.run_id, f.kind),
                )
            ),
        )
        if audit.schedule_id in by_schedule
        else audit
        for audit in audits
    ]


def _text(instant: datetime) -> str:
    return format_instant(instant.astimezone(UTC))


def _seconds(duration: timedelta) -> str:
    return f"{duration.total_seconds():g}s"
