"""The audit: what a deployment owed, from the schedule history alone, and what it did about it.

Pure: the history, the runs and the run events come in as plain records read by
`kairos.streams.history`; the instant the audit speaks for (`as_of`) is passed in.

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

The one input the history lacks is when a ticker saw each change. A ticker that sees a change
late has already decided occurrences of the old definition after it, and never goes back to an
instant at or before its last decision. The runs topic shows this: every `RunRequested` names
the version (`schedule_offset`) that owed it, so the audit extends the old definition's debt
through its last fire. A skip carries no version, so a change seen late whose only late decisions
were policy skips is not recognised: the new definition's occurrences up to those skips are then
reported lost, a false alarm rather than a hidden loss.

Each owed occurrence in the window is then matched against the runs topic and the run-events
topic:

- **fired**: a `RunRequested` of attempt 1 with its run id was committed (lateness is that
  record's `lateness_ms`, fire minus due); further commits of the same run id are duplicates.
- **skipped**: the ticker recorded a `skipped` run event instead (misfire policy `skip` or
  `latest`, or `catchup_window`): skipped by policy, not lost.
- **pending**: neither, but the occurrence was due less than `grace` before `as_of`, so its
  commit may still be on its way.
- **lost**: neither, and it was due earlier than that.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kairos.core.calendar import fire_instant_with_jitter, next_fire
from kairos.core.durations import parse_duration
from kairos.core.errors import KairosError
from kairos.core.firing import Decision, ScheduleState, deleted, upserted
from kairos.core.schedule import Schedule

_JUST_BEFORE = timedelta(microseconds=1)


class TimeArgumentError(KairosError, ValueError):
    """A time argument could not be read; `text` is the input."""

    def __init__(self, text: str, problem: str) -> None:
        self.text = text
        self.problem = problem
        super().__init__(
            f"invalid time {text!r}: {problem}; give an ISO-8601 instant with an offset such as "
            "2027-03-14T07:00:00Z, 'now', or a time before now such as -10m or -2h30m"
        )


def parse_time(text: str, now: datetime) -> datetime:
    """An instant from `2027-03-14T07:00:00Z`, `now`, or `-10m` (ten minutes before `now`)."""
    value = text.strip()
    if value == "now":
        return now
    if value.startswith("-"):
        try:
            return now - parse_duration(value[1:])
        except ValueError as error:
            raise TimeArgumentError(text, str(error)) from None
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        raise TimeArgumentError(text, "not an ISO-8601 instant") from None
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise TimeArgumentError(text, "it has no UTC offset, so it is not an instant")
    return instant.astimezone(UTC)


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
    reason: str | None = None
    revision: int = 0


@dataclass(frozen=True, slots=True)
class ExpectedOccurrence:
    """An occurrence a schedule owed; `version` is the offset of the definition that owed it."""

    run_id: str
    schedule_id: str
    nominal: datetime
    due_at: datetime
    version: int


def expected_occurrences(
    history: Iterable[HistoryEvent],
    start: datetime,
    end: datetime,
    fired_through: Mapping[tuple[str, int], datetime] | None = None,
) -> dict[str, list[ExpectedOccurrence]]:
    """Every occurrence owed with `start <= nominal < end`, per schedule, oldest first.

    `history` holds each schedule's events in topic order (events of different schedules may
    interleave). Every schedule met in the history has an entry, possibly empty.

    `fired_through` maps (schedule id, version) to the latest nominal instant the runs topic
    shows fired under that version (`fired_through` below). A ticker that sees a change late
    (it was down, or fired just before the change reached it) has already decided the old
    definition's occurrences after the change, and decisions never go back: the old definition
    owes up to that fire, the new one from after it. Without it, the audit assumes every
    change was seen at once.
    """
    events: dict[str, list[HistoryEvent]] = {}
    for event in history:
        events.setdefault(event.schedule_id, []).append(event)
    fired = fired_through or {}
    return {
        sid: _owed(schedule_events, start, end, fired) for sid, schedule_events in events.items()
    }


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
) -> list[ExpectedOccurrence]:
    state: ScheduleState | None = None
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
            outcome = upserted(state, state.schedule, state.version, through, now=through)
            owed += _occurrences(state, outcome.decisions)
            state = outcome.state
        # `now` is the change itself: the ticker's clamp to its clock is not known (see above).
        if event.definition is None:
            if state is not None:
                outcome = deleted(state, event.changed_at, now=event.changed_at)
                owed += _occurrences(state, outcome.decisions)
            state = None
            continue
        outcome = upserted(
            state, event.definition, event.offset, event.changed_at, now=event.changed_at
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
    fire = next_fire(state.schedule, start - _JUST_BEFORE)
    return replace(state, next_nominal=fire.nominal if fire is not None else None)


def _occurrences(state: ScheduleState, decisions: list[Decision]) -> list[ExpectedOccurrence]:
    # Skip decisions count too: which occurrences a misfire policy skips depends on when the
    # ticker decided them, which only the run-events topic knows.
    return [
        ExpectedOccurrence(
            run_id=decision.run_id,
            schedule_id=decision.schedule_id,
            nominal=decision.nominal,
            due_at=fire_instant_with_jitter(state.schedule, decision.nominal),
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


# -- matching ------------------------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class LatenessSummary:
    """Nearest-rank percentiles of fire lateness (due to committed fire) in milliseconds."""

    count: int
    p50: int
    p90: int
    p99: int
    max: int

    @classmethod
    def of(cls, values: Iterable[int]) -> LatenessSummary | None:
        ordered = sorted(values)
        if not ordered:
            return None

        def rank(q: float) -> int:
            return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

        return cls(len(ordered), rank(0.5), rank(0.9), rank(0.99), ordered[-1])


@dataclass(frozen=True)
class ScheduleAudit:
    """One schedule's verdict over the window. The run id lists are in nominal order."""

    schedule_id: str
    expected: int = 0
    fired: int = 0
    skipped: int = 0
    pending: int = 0
    lateness_ms: tuple[int, ...] = ()
    """Lateness of each fired occurrence, from its first commit."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Fired occurrences by their latest run event's kind; `unreported` without any."""
    lost_runs: tuple[ExpectedOccurrence, ...] = ()
    duplicate_runs: dict[str, int] = field(default_factory=dict)
    """Run id to the number of its extra commits, beyond the first."""
    unexpected_runs: tuple[str, ...] = ()
    """Runs fired in the window that the history did not owe."""
    skipped_runs: tuple[tuple[str, str | None], ...] = ()
    """(run id, the recorded reason) of each occurrence skipped by policy."""

    @property
    def lost(self) -> int:
        return len(self.lost_runs)

    @property
    def duplicates(self) -> int:
        return sum(self.duplicate_runs.values())

    @property
    def unexpected(self) -> int:
        return len(self.unexpected_runs)

    @property
    def lateness(self) -> LatenessSummary | None:
        return LatenessSummary.of(self.lateness_ms)


@dataclass(frozen=True)
class AuditReport:
    """The verdict over `[start, end)` (nominal instants) as of `as_of`."""

    start: datetime
    end: datetime
    as_of: datetime
    grace: timedelta
    schedules: tuple[ScheduleAudit, ...]

    def total(self, name: str) -> int:
        """The sum over schedules of one count: expected, fired, skipped, lost, pending, …"""
        return sum(int(getattr(audit, name)) for audit in self.schedules)

    @property
    def lateness(self) -> LatenessSummary | None:
        return LatenessSummary.of(value for a in self.schedules for value in a.lateness_ms)

    @property
    def outcomes(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for audit in self.schedules:
            totals.update(audit.outcomes)
        return dict(sorted(totals.items()))

    @property
    def ok(self) -> bool:
        """Late, never lost, never fired twice: no occurrence lost and none committed twice."""
        return self.total("lost") == 0 and self.total("duplicates") == 0


def verify(
    expected: Mapping[str, Sequence[ExpectedOccurrence]],
    fired: Iterable[FiredRun],
    events: Iterable[RunEventRecord],
    *,
    start: datetime,
    end: datetime,
    as_of: datetime,
    grace: timedelta,
    schedule_id: str | None = None,
) -> AuditReport:
    """Match each expected occurrence against the fires and run events read from the topics.

    `fired` and `events` may hold anything the topics had: only records whose nominal instant is
    in the window (and of `schedule_id`, when given) are considered. Retry requests (attempt
    above 1) are an executor's business, not fires, so they count neither as fires nor as
    duplicates. The report lists each schedule that owed or fired something in the window.
    """

    def wanted(sid: str, nominal: datetime) -> bool:
        return start <= nominal < end and (schedule_id is None or sid == schedule_id)

    commits: dict[str, list[FiredRun]] = {}
    for run in fired:
        if run.attempt == 1 and wanted(run.schedule_id, run.nominal):
            commits.setdefault(run.run_id, []).append(run)
    story: dict[str, list[RunEventRecord]] = {}
    for event in events:
        if wanted(event.schedule_id, event.nominal):
            story.setdefault(event.run_id, []).append(event)
    owed_ids = {o.run_id for occurrences in expected.values() for o in occurrences}
    unexpected: dict[str, list[str]] = {}
    duplicates: dict[str, dict[str, int]] = {}
    for run_id, runs in sorted(commits.items()):
        sid = runs[0].schedule_id
        if run_id not in owed_ids:
            unexpected.setdefault(sid, []).append(run_id)
        if len(runs) > 1:
            duplicates.setdefault(sid, {})[run_id] = len(runs) - 1
    sids = {sid for sid, occurrences in expected.items() if occurrences} | unexpected.keys()
    if schedule_id is not None:
        sids &= {schedule_id}
    audits = [
        _audit_one(
            sid,
            expected.get(sid, ()),
            commits,
            story,
            unexpected=unexpected.get(sid, []),
            duplicates=duplicates.get(sid, {}),
            settled_before=as_of - grace,
        )
        for sid in sorted(sids)
    ]
    return AuditReport(start, end, as_of, grace, tuple(audits))


def _audit_one(
    schedule_id: str,
    owed: Sequence[ExpectedOccurrence],
    commits: Mapping[str, list[FiredRun]],
    story: Mapping[str, list[RunEventRecord]],
    *,
    unexpected: list[str],
    duplicates: dict[str, int],
    settled_before: datetime,
) -> ScheduleAudit:
    fired = 0
    lateness: list[int] = []
    outcomes: Counter[str] = Counter()
    lost: list[ExpectedOccurrence] = []
    skipped: list[tuple[str, str | None]] = []
    pending = 0
    for occurrence in owed:
        runs = commits.get(occurrence.run_id)
        events = story.get(occurrence.run_id, [])
        if runs:
            fired += 1
            # Commits of one run id share its key and so its partition: the first is the fire.
            lateness.append(min(runs, key=lambda r: r.offset).lateness_ms)
            # Events of one run share its key, so topic order is the order they happened in.
            outcomes[events[-1].kind if events else "unreported"] += 1
            continue
        skip = next((e for e in events if e.kind == "skipped"), None)
        if skip is not None:
            skipped.append((occurrence.run_id, skip.reason))
        elif occurrence.due_at >= settled_before:
            pending += 1
        else:
            lost.append(occurrence)
    return ScheduleAudit(
        schedule_id=schedule_id,
        expected=len(owed),
        fired=fired,
        skipped=len(skipped),
        pending=pending,
        lateness_ms=tuple(lateness),
        outcomes=dict(sorted(outcomes.items())),
        lost_runs=tuple(lost),
        duplicate_runs=duplicates,
        unexpected_runs=tuple(unexpected),
        skipped_runs=tuple(skipped),
    )
