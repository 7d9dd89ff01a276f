"""What `kairos audit verify` reads from the topics for a window, and from where.

The schedules topic is read whole: it is the change history every occurrence is owed by, and
its size follows the changes, not the runs. The runs, run-events and dead-letter topics are read
from the records appended `read_margin` before the window's start (`kairos.core.audit_margin`
says why that is enough), or from their beginning with `whole_history`; either way to their end,
since a late fire under an old version moves where the next version starts owing. Of the fires
after the window only the latest under each version is kept, so memory follows the window.

A window whose runs wait for upstream periods also needs those periods' successes, which may be
older than the window (a weekly upstream's latest period before a run): the run events are then
read from the margin before the earliest such period (`kairos.core.audit_dependencies`), keeping
only the `succeeded` events of those periods besides the window's own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kairos.core.audit import FiredRun, HistoryEvent, RequestedRerun, RunEventRecord
from kairos.core.audit_dependencies import (
    RunWaits,
    earliest_period,
    needed_periods,
    resolve_periods,
)
from kairos.core.audit_margin import read_margin
from kairos.core.audit_upstream import UpstreamPeriods
from kairos.core.audit_verdict import OutcomeCheck, Unsettled
from kairos.core.calendar_rules import CalendarLookup
from kairos.streams.readers.history import HistoryReader
from kairos.streams.wire.history_records import RefusedChange


@dataclass(frozen=True)
class AuditRead:
    """What the audit read from the topics; `since` is where the time-indexed reads began."""

    history: list[HistoryEvent]
    reruns: list[RequestedRerun]
    fired: list[FiredRun]
    events: list[RunEventRecord]
    unsettled: Unsettled
    outcomes: OutcomeCheck | None
    rejected: int
    since: datetime | None
    periods: dict[str, RunWaits] = field(default_factory=dict)
    """What each waiting run of the window waits for (its definition's upstreams, wait and
    periods), by run id."""
    events_since: datetime | None = None
    """Where the run-events read began: earlier than `since` when an upstream period is."""


@dataclass(frozen=True)
class AuditWindow:
    start: datetime
    end: datetime
    schedule: str | None
    early_tolerance: timedelta
    outcome_grace: timedelta | None
    whole_history: bool = False
    margin: timedelta | None = None
    """How far before `start` to read; `read_margin` of the history when not given."""


class _LatestBeyond:
    """Keeps the fires of the window; of those after it, only the latest per version."""

    def __init__(self, window: AuditWindow) -> None:
        self._window = window
        self.latest: dict[tuple[str, int], FiredRun] = {}

    def in_window(self, run: FiredRun) -> bool:
        window = self._window
        return window.start <= run.nominal < window.end and window.schedule in (
            None,
            run.schedule_id,
        )

    def keep(self, run: FiredRun) -> bool:
        window = self._window
        if run.nominal < window.start or window.schedule not in (None, run.schedule_id):
            return False
        if run.nominal < window.end:
            return True
        key = (run.schedule_id, run.schedule_offset)
        held = self.latest.get(key)
        if run.attempt == 1 and (held is None or run.nominal > held.nominal):
            self.latest[key] = run
        return False


def read_audit_window(
    reader: HistoryReader, window: AuditWindow, calendars: CalendarLookup | None = None
) -> AuditRead:
    """The window's records; `calendars` are those in force at each instant, for the periods
    of upstreams that run on business days (`kairos.core.audit_dependencies.resolve_periods`)."""
    refusals = reader.refused_changes()
    history = reader.schedule_events(window.schedule, refusals)
    reruns = list(reader.reruns)
    since = None
    if not window.whole_history:
        since = window.start - _margin(window, history)
    beyond = _LatestBeyond(window)
    # Records past a last stable offset may yet be aborted: the window's only, never a floor.
    fired, unsettled_fires = reader.runs_and_unsettled(
        keep=beyond.keep,
        since=since,
        keep_unsettled=beyond.in_window,
        schedule_id=window.schedule,
    )
    fired += beyond.latest.values()
    waited_for = [*history, *_upstream_history(reader, window, history, fired, refusals)]
    periods = resolve_periods(
        fired, waited_for, wanted=beyond.in_window, calendars=calendars, reruns=reruns
    )
    events_since = _events_since(window, since, periods, waited_for)
    events, unsettled_events = _run_events(reader, window, events_since, periods)
    check = None
    if window.outcome_grace is not None:
        letters = tuple(reader.admission_dead_letters(since))
        check = OutcomeCheck(letters, window.outcome_grace)
    unsettled = Unsettled(
        tuple(reader.open_transactions), tuple(unsettled_fires), tuple(unsettled_events)
    )
    rejected = {(r.topic, r.partition, r.offset) for r in reader.rejected}
    return AuditRead(
        history,
        reruns,
        fired,
        events,
        unsettled,
        check,
        len(rejected),
        since,
        periods,
        events_since,
    )


def _margin(window: AuditWindow, history: Iterable[HistoryEvent]) -> timedelta:
    if window.margin is not None:
        return window.margin
    return read_margin((e.definition for e in history), window.early_tolerance)


def _upstream_history(
    reader: HistoryReader,
    window: AuditWindow,
    history: Sequence[HistoryEvent],
    fired: Iterable[FiredRun],
    refusals: list[RefusedChange],
) -> list[HistoryEvent]:
    """The histories of the upstreams the window's runs may wait for that `history` lacks:
    with `--schedule`, only that schedule's partition was read. Those any version of a
    schedule fired in the window names (what its runs wait for is its definition's), and those
    a fired record names (a run no definition owed is held to its record). Each is one
    partition's read."""
    held = {event.schedule_id for event in history}
    runs = [run for run in fired if window.start <= run.nominal < window.end]
    downstream = {run.schedule_id for run in runs}
    named = {
        upstream.schedule
        for event in history
        if event.schedule_id in downstream and event.definition is not None
        for upstream in event.definition.upstream
    }
    named |= {
        upstream for run in runs if run.waiting is not None for upstream, _ in run.waiting.upstream
    }
    return [
        event
        for upstream in sorted(named - held)
        for event in reader.schedule_events(upstream, refusals)
    ]


def _events_since(
    window: AuditWindow,
    since: datetime | None,
    periods: UpstreamPeriods,
    history: Iterable[HistoryEvent],
) -> datetime | None:
    """Where the run-events read begins: `since`, or earlier by as much as the window's
    earliest upstream period needs (a success is appended after that period's fire, and a fire
    no earlier than the read margin before its nominal instant)."""
    earliest = earliest_period(periods)
    if since is None or earliest is None or earliest >= window.start:
        return since
    return min(since, earliest - _margin(window, history))


def _run_events(
    reader: HistoryReader,
    window: AuditWindow,
    since: datetime | None,
    periods: UpstreamPeriods,
) -> tuple[list[RunEventRecord], list[RunEventRecord]]:
    """The run events of the window's runs, and the successes of the upstream periods its
    waiting runs wait for (of other schedules: read without the `--schedule` key filter)."""
    needed = needed_periods(periods)
    named = {upstream for upstream, _ in needed}

    def keep(event: RunEventRecord) -> bool:
        if window.start <= event.nominal < window.end and window.schedule in (
            None,
            event.schedule_id,
        ):
            return True
        return (
            event.kind == "succeeded"
            and event.schedule_id in named
            and (event.schedule_id, event.nominal) in needed
        )

    only = window.schedule if named <= {window.schedule} else None
    return reader.run_events_and_unsettled(keep=keep, since=since, schedule_id=only)
