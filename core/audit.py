"""The audit: what a deployment owed, from the schedule history alone, and what it did about it.

Pure: the history, the runs and the run events come in as plain records read by
`kairos.streams.readers.history`; the instant the audit speaks for (`as_of`) is passed in.

What is owed follows the ticker's own rules (`kairos.core.firing`), replayed with the same
functions: a schedule owes the occurrences whose nominal instant is at or after the `changed_at`
of the event that created, edited or resumed it, under the definition in force at each moment;
a change first settles what the old definition owed before it; a pause or a delete stops the
debt; decisions never go back to an occurrence at or before the last one decided.

One difference, on purpose: the ticker clamps a `changed_at` that lies in its own future (a
producer whose clock runs ahead) to its clock; the audit cannot know that clock and uses the
event's `changed_at` as written. A producer clock ahead by more than a schedule's period can
make the two disagree on the first occurrence after a change; the audit reports a fire it did
not expect as `unexpected` so the disagreement is visible.

The one input the history lacks is when a ticker saw each change. A ticker that sees an edit
late has already decided occurrences of the old definition after it, and never goes back to an
instant at or before its last decision. The runs topic shows this: every `RunRequested` names
the version (`schedule_offset`) that owed it, so the audit extends the old definition's debt
through its last fire. A skip carries no version, so a change seen late whose only late
decisions were policy skips is not recognised: the new definition's occurrences up to those
skips are then reported lost, a false alarm rather than a hidden loss.

A delete or a pause is different: it is the user saying "do not run these". Nothing is owed
inside one (`stopped_spans`), however late the ticker saw it, so a fire there is a breach that
`kairos.core.audit_verdict` names, not a debt.

What the topics then show about each owed occurrence is judged by `kairos.core.audit_verdict`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from kairos.core.audit_calendars import calendar_debts
from kairos.core.audit_dependencies import RunWaiting
from kairos.core.calendar_owed import Era
from kairos.core.calendar_rules import CalendarLookup, next_occurrence
from kairos.core.firing import Decision, ScheduleState, deleted, upserted
from kairos.core.rerun_request import RerunRequest
from kairos.core.reruns import completed, judge_rerun, rerun_occurrences
from kairos.core.run_id import rerun_id, run_id
from kairos.core.schedule import Schedule

_JUST_BEFORE = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    """One valid record of the schedules topic, in topic order for its schedule.

    `definition` is the whole definition after the change, or `None` when the schedule is gone
    (a `deleted` event, or a tombstone, whose `changed_at` is the record's timestamp as the
    ticker reads it). `offset` is the record's offset in its partition: the definition's version.
    """

    schedule_id: str
    partition: int
    offset: int
    change: str
    definition: Schedule | None
    changed_at: datetime
    changed_by: str | None = None
    """Who the publisher says made the change: free text, never checked."""
    reason: str | None = None
    revision: int = 0
    signed_by: str | None = None
    """The team whose signature a signed ticker verified when it took the change; `None` when
    none did (taken unsigned, in open mode, or not judged yet)."""


@dataclass(frozen=True, slots=True)
class RequestedRerun:
    """A re-run request read from the schedules topic, at `offset` of its schedule's partition,
    appended by the broker at `appended_at` (the record's timestamp)."""

    partition: int
    offset: int
    request: RerunRequest
    appended_at: datetime


@dataclass(frozen=True, slots=True)
class ExpectedOccurrence:
    """An occurrence a schedule owed; `version` is the offset of the definition that owed it."""

    run_id: str
    schedule_id: str
    nominal: datetime
    due_at: datetime
    version: int
    calendar_skipped: bool | None = None
    """Whether the calendars in force skip it, when `kairos.core.calendar_owed` worked it out
    (`None`: the schedule names no calendar, so no calendar may skip it)."""


@dataclass(frozen=True, slots=True)
class StopSpan:
    """A time a schedule owed nothing because a change deleted or paused it.

    From the stopping change's `changed_at` (included) to the next change's (excluded; `None`
    when none followed). A run whose nominal instant falls in one was fired against the user's
    explicit "stop": a breach, even when the ticker saw the change late.
    """

    schedule_id: str
    deleted: bool
    """`False`: paused."""
    start: datetime
    end: datetime | None
    offset: int
    """The stopping change's offset in its partition."""
    changed_by: str | None = None
    """Who its publisher says made it (free text)."""
    signed_by: str | None = None
    """The team whose signature a signed ticker verified on it, if one did."""

    def holds(self, instant: datetime) -> bool:
        return self.start <= instant and (self.end is None or instant < self.end)


def changed_by_text(changed_by: str | None, signed_by: str | None) -> str:
    """How reports name who made a change: " by X (signed by team T)", each part only when
    known (the publisher's free text, the team a signed ticker verified); "" for neither."""
    by = f" by {changed_by}" if changed_by else ""
    return by + (f" (signed by team {signed_by})" if signed_by else "")


def stopped_spans(history: Iterable[HistoryEvent]) -> dict[str, list[StopSpan]]:
    """Each schedule's deletes and pauses, oldest first; only schedules that had one."""
    spans: dict[str, list[StopSpan]] = {}
    stopped: dict[str, StopSpan] = {}
    for event in history:
        sid = event.schedule_id
        ending = stopped.pop(sid, None)
        if ending is not None:
            spans.setdefault(sid, []).append(replace(ending, end=event.changed_at))
        if event.definition is None or event.definition.paused:
            deleted_now = event.definition is None
            stopped[sid] = StopSpan(
                sid,
                deleted_now,
                event.changed_at,
                None,
                event.offset,
                event.changed_by,
                event.signed_by,
            )
    for sid, span in stopped.items():
        spans.setdefault(sid, []).append(span)
    return spans


def expected_occurrences(
    history: Iterable[HistoryEvent],
    start: datetime,
    end: datetime,
    fired_through: Mapping[tuple[str, int], datetime] | None = None,
    *,
    calendars: CalendarLookup | None = None,
    eras: Sequence[Era] = (),
    reruns: Sequence[RequestedRerun] = (),
) -> dict[str, list[ExpectedOccurrence]]:
    """Every occurrence owed with `start <= nominal < end`, per schedule, oldest first.

    `history` holds each schedule's events in topic order (events of different schedules may
    interleave). Every schedule met in the history has an entry, possibly empty.

    `fired_through` maps (schedule id, version) to the latest nominal instant the runs topic
    shows fired under that version (`fired_through` below). A ticker that sees an edit late
    (it was down, or fired just before the change reached it) has already decided the old
    definition's occurrences after the change, and decisions never go back: the old definition
    owes up to that fire, the new one from after it. Without it, the audit assumes every
    change was seen at once. Seen late or not, nothing is owed inside a delete or a pause
    (`stopped_spans`): a fire there is a breach, not a debt.

    `calendars` gives the shared calendars in force at each occurrence (`as_of_history`), for
    the re-runs of schedules that name some. `eras` are the same history as `calendar_eras`
    makes them: what a definition naming calendars owes (which business days count, where rolls
    and deferrals move an occurrence, what they skip) is worked out from them by
    `kairos.core.calendar_owed`, which shares none of the ticker's calendar code. What they
    skip is owed as a decision like any other (the skip record says why).

    `reruns` are the re-run requests the schedules topic holds: each the ticker takes
    (`kairos.core.reruns.judge_rerun`, judged here as the ticker judges it) owes the runs
    `kairos.core.reruns.take_rerun` names under the definition in force at its offset (pauses
    and deletes after it do not cancel them), listed after the schedule's occurrences. Only
    those in the window are built, so memory follows the window, not the requests' ranges.
    """
    events: dict[str, list[HistoryEvent]] = {}
    for event in history:
        events.setdefault(event.schedule_id, []).append(event)
    fired = fired_through or {}
    owed: dict[str, list[ExpectedOccurrence]] = {}
    for sid, schedule_events in events.items():
        stops = stopped_spans(schedule_events).get(sid, [])
        replayed = _owed(schedule_events, start, end, fired, calendars)
        if eras:
            replayed = _by_calendars(
                sid, schedule_events, replayed, (start, end), fired=fired, eras=eras
            )
        owed[sid] = [
            occurrence
            for occurrence in replayed
            if not any(stop.holds(occurrence.nominal) for stop in stops)
        ]
    _add_reruns(owed, events, reruns, calendars, (start, end))
    return owed


def _add_reruns(
    owed: dict[str, list[ExpectedOccurrence]],
    events: Mapping[str, Sequence[HistoryEvent]],
    reruns: Sequence[RequestedRerun],
    calendars: CalendarLookup | None,
    window: tuple[datetime, datetime],
) -> None:
    requests: dict[str, list[RequestedRerun]] = {}
    for rerun in reruns:
        requests.setdefault(rerun.request.schedule_id, []).append(rerun)
    for sid, asked in requests.items():
        owed.setdefault(sid, []).extend(_rerun_owed(events.get(sid, []), asked, calendars, window))


def _by_calendars(
    sid: str,
    events: Sequence[HistoryEvent],
    replayed: list[ExpectedOccurrence],
    window: tuple[datetime, datetime],
    *,
    fired: Mapping[tuple[str, int], datetime],
    eras: Sequence[Era],
) -> list[ExpectedOccurrence]:
    """`replayed`, with what each definition naming calendars owes worked out apart."""
    floors: dict[int, datetime] = {}
    for occurrence in replayed:
        floors[occurrence.version] = max(
            occurrence.nominal, floors.get(occurrence.version, occurrence.nominal)
        )
    debts = calendar_debts(events, floors, window, fired, eras)
    kept = [occurrence for occurrence in replayed if occurrence.version not in debts]
    worked_out = [
        ExpectedOccurrence(
            run_id(sid, run.nominal), sid, run.nominal, run.at, version, run.calendar_skipped
        )
        for version, runs in debts.items()
        for run in runs
    ]
    return sorted([*kept, *worked_out], key=lambda occurrence: occurrence.nominal)


def _rerun_owed(
    events: Sequence[HistoryEvent],
    reruns: Sequence[RequestedRerun],
    calendars: CalendarLookup | None,
    window: tuple[datetime, datetime],
) -> list[ExpectedOccurrence]:
    """The runs each request owes with a nominal instant in `window` (start included, end
    not), replayed as the ticker takes them: in topic order, under the definition in force, a
    retry of a request the schedule completed owing nothing, a request over the bounds none."""
    ordered: list[HistoryEvent | RequestedRerun] = sorted(
        [*events, *reruns], key=lambda record: record.offset
    )
    state: ScheduleState | None = None
    owed: list[ExpectedOccurrence] = []
    for record in ordered:
        if isinstance(record, HistoryEvent):
            if record.definition is None:
                state = None  # deleted: a re-created id remembers no request
            else:
                done = () if state is None else state.reruns_done
                state = ScheduleState(
                    record.definition, record.offset, None, reruns_done=done, calendars=calendars
                )
            continue
        if state is None:
            continue  # the ticker dead-letters a request for a schedule it does not hold
        verdict = judge_rerun(state, record.request, record.appended_at)
        if verdict is None or verdict.refusal is not None:
            continue  # a retry of a completed request, or one the ticker refuses
        owed += _rerun_runs(state, record.request, window)
        state = completed(state, record.request)
    return owed


def _rerun_runs(
    state: ScheduleState, request: RerunRequest, window: tuple[datetime, datetime]
) -> list[ExpectedOccurrence]:
    """The runs `request` owes under `state` with a nominal instant in `window`."""
    start, end = window
    runs = []
    after = start - _JUST_BEFORE
    for nominal in rerun_occurrences(state.schedule, request, after, state.calendars):
        if nominal >= end:
            break
        runs.append(
            ExpectedOccurrence(
                run_id=rerun_id(state.schedule_id, nominal, request.request_id),
                schedule_id=state.schedule_id,
                nominal=nominal,
                due_at=request.requested_at,
                version=state.version,
            )
        )
    return runs


def fired_through(fired: Iterable[FiredRun]) -> dict[tuple[str, int], datetime]:
    """The latest nominal instant fired under each (schedule id, version), for the floor rule."""
    latest: dict[tuple[str, int], datetime] = {}
    for run in fired:
        key = (run.schedule_id, run.schedule_offset)
        if run.attempt == 1 and (key not in latest or run.nominal > latest[key]):
            latest[key] = run.nominal
    return latest


def _owed(
    events: Sequence[HistoryEvent],
    start: datetime,
    end: datetime,
    fired: Mapping[tuple[str, int], datetime],
    calendars: CalendarLookup | None,
) -> list[ExpectedOccurrence]:
    state: ScheduleState | None = None
    floor: datetime | None = None
    owed: list[ExpectedOccurrence] = []
    for event in events:
        if state is not None:
            state = _skip_to(state, start)
        if event.changed_at >= end:
            # Nothing the change brings is owed before it, and so not before `end`: only what
            # the definition in force owed up to the window's end is left to settle (below).
            break
        last = fired.get((event.schedule_id, state.version)) if state is not None else None
        if state is not None and last is not None and last >= event.changed_at:
            # Seen late: the old definition owes through its last fire (the ticker's floor).
            through = last + _JUST_BEFORE
            outcome = upserted(state, state.schedule_with_id(), state.version, through, now=through)
            owed += _occurrences(state, outcome.decisions)
            state = outcome.state
        # `now` is the change itself: the ticker's clamp to its clock is not known (see above).
        if event.definition is None:
            if state is not None:
                outcome = deleted(state, event.changed_at, now=event.changed_at)
                owed += _occurrences(state, outcome.decisions)
                floor = outcome.floor  # as the ticker keeps it: the id created again owes after
            state = None
            continue
        outcome = upserted(
            state,
            event.definition,
            event.offset,
            event.changed_at,
            now=event.changed_at,
            floor=floor if state is None else None,
            calendars=calendars,
        )
        if state is not None:
            owed += _occurrences(state, outcome.decisions)
        state = outcome.state
    if state is not None:
        state = _skip_to(state, start)
        owed += _occurrences(state, deleted(state, end, now=end).decisions)
    return [occurrence for occurrence in owed if start <= occurrence.nominal < end]


def _skip_to(state: ScheduleState, start: datetime) -> ScheduleState:
    """Move the first undecided occurrence up to `start`, without deciding those before it.

    Only occurrences before `start` are passed over, and they are outside the window. The floor
    (`last_decided_nominal`) is left as it was: a later change owes from its own `changed_at`,
    and the occurrences passed over are all before that instant or before `start`, so the first
    occurrence it owes at or after `start` is the same. This keeps an audit of a recent window
    fast for a schedule created long ago.
    """
    nominal = state.next_nominal
    if nominal is None or nominal >= start:
        return state
    fire = next_occurrence(state.schedule, start - _JUST_BEFORE, state.calendars)
    return replace(state, next_nominal=fire.nominal if fire is not None else None)


def _occurrences(state: ScheduleState, decisions: list[Decision]) -> list[ExpectedOccurrence]:
    # Skip decisions count too: which occurrences a misfire policy skips depends on when the
    # ticker decided them, which only the run-events topic knows.
    return [
        ExpectedOccurrence(
            run_id=decision.run_id,
            schedule_id=decision.schedule_id,
            nominal=decision.nominal,
            due_at=decision.fire_at,
            version=state.version,
        )
        for decision in decisions
    ]


def changed_fields(before: Schedule | None, after: Schedule | None) -> dict[str, tuple[Any, Any]]:
    """Each field whose value differs, as (before, after) in JSON form; `None` where absent."""
    old = before.model_dump(mode="json") if before is not None else {}
    new = after.model_dump(mode="json") if after is not None else {}
    return {
        name: (old.get(name), new.get(name))
        for name in sorted(old.keys() | new.keys())
        if old.get(name) != new.get(name)
    }


# -- what the topics hold -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FiredRun:
    """One `RunRequested` committed to the runs topic, with where it was read."""

    run_id: str
    schedule_id: str
    nominal: datetime
    due_at: datetime
    fired_at: datetime
    lateness_ms: int
    attempt: int
    ticker_instance: str
    schedule_offset: int
    partition: int
    offset: int
    owner: str | None = None
    appended_at: datetime | None = None
    """The broker's append time, when the runs topic stamps records with it (LogAppendTime):
    a witness of when the fire happened that does not depend on the ticker's clock."""
    waiting: RunWaiting | None = None
    """The upstream periods the run waits for, as fired (`None`: it waits for none)."""


@dataclass(frozen=True, slots=True)
class RunEventRecord:
    """One event of the run-events topic: an executor's step, or a ticker's policy skip."""

    run_id: str
    schedule_id: str
    kind: str
    attempt: int
    source: str
    """The executor (or, for a policy skip, the ticker) instance that published it."""
    nominal: datetime
    fired_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    reason: str | None
    next_attempt_at: datetime | None
    partition: int
    offset: int
    appended_at: datetime | None = None
    """The broker's append time, when the run-events topic stamps records with it
    (LogAppendTime): when a `released` event, which carries no instant of its own, was
    published; `None` otherwise."""


@dataclass(frozen=True, slots=True)
class AdmissionDeadLetter:
    """A `DeadLetter` whose source is a record of the runs topic: an executor refused it."""

    source_partition: int
    source_offset: int
    error_class: str
    reason: str
    dead_lettered_at: datetime


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A partition whose last stable offset was below its high watermark when it was read.

    A read_committed reader stops at the last stable offset: the records from there to the high
    watermark (`pending` of them, control records included) are in a transaction still open,
    or behind one, and may yet be committed or aborted. `since` is the append time of the first
    of them, the transaction's first write, when it could be read.
    """

    topic: str
    partition: int
    last_stable_offset: int
    high_watermark: int
    since: datetime | None

    @property
    def pending(self) -> int:
        return self.high_watermark - self.last_stable_offset
