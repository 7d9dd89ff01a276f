"""The audit's verdict: what was owed, matched against what the topics hold, and every breach.

Pure, like `kairos.core.audit` which computes what was owed: the records come in read, and the
instant the audit speaks for (`as_of`) is passed in.

Each owed occurrence in the window is one of:

- **fired**: a `RunRequested` of attempt 1 with its run id was committed; further commits of
  the same run id are duplicates. Lateness is computed from the record's `fired_at` and the due
  instant (nominal plus jitter), signed: the record's own `lateness_ms` is clamped at 0 by the
  ticker and so cannot show an early fire.
- **skipped**: the ticker recorded a `skipped` run event instead (misfire policy `skip` or
  `latest`, or `catchup_window`): skipped by policy, not lost.
- **pending**: neither, but the occurrence was due less than `grace` before `as_of`, so its
  commit may still be on its way.
- **hidden**: neither, but its fire or skip was written past the last stable offset of its
  partition: in a transaction still open (a ticker that died or stopped mid-transaction, until
  the broker aborts it), so it may yet be committed. Not a loss, and not proof of none.
- **lost**: none of these.

Every breach the topics show is a `Finding`: lost and duplicated runs, runs no version of the
schedule owed (fired after a delete, inside a pause, at an instant that is not an occurrence, or
for a schedule the history never named), early fires, runs that did not wait for their upstream
periods, and with the outcome check, runs an executor refused at admission or never finished.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kairos.core.audit import (
    AdmissionDeadLetter,
    ExpectedOccurrence,
    FiredRun,
    OpenTransaction,
    RunEventRecord,
    StopSpan,
    changed_by_text,
)
from kairos.core.audit_report import (
    DEFAULT_EARLY_TOLERANCE,
    AuditReport,
    Finding,
    FindingKind,
    ScheduleAudit,
)
from kairos.core.audit_upstream import UpstreamPeriods, dependency_findings, with_findings
from kairos.core.misfire import is_misfire_reason
from kairos.core.run_id import rerun_request_of

_MS = timedelta(milliseconds=1)

TERMINAL_KINDS = frozenset({"succeeded", "dead_lettered", "skipped"})
"""Run events after which an executor reports nothing more about a run (docs/executors.md)."""


@dataclass(frozen=True)
class Unsettled:
    """What lay past the last stable offsets of the runs and run-events topics when read."""

    transactions: tuple[OpenTransaction, ...] = ()
    fires: tuple[FiredRun, ...] = ()
    events: tuple[RunEventRecord, ...] = ()


@dataclass(frozen=True)
class OutcomeCheck:
    """Hold executors to account too: every fired run must reach a terminal run event
    (`TERMINAL_KINDS`) within `grace` of its fire, and none may be refused at admission."""

    dead_letters: tuple[AdmissionDeadLetter, ...]
    grace: timedelta


@dataclass(frozen=True)
class _Seen:
    """The records of the window, indexed for matching."""

    commits: Mapping[str, list[FiredRun]]
    """Committed first attempts by run id, in topic order."""
    story: Mapping[str, list[RunEventRecord]]
    """Committed run events by run id, in topic order."""
    unsettled: Mapping[str, list[FiredRun | RunEventRecord]]
    """Fires and skips past a last stable offset, by run id."""
    owed: frozenset[str]
    settled_before: datetime
    early_tolerance: timedelta
    outcomes: OutcomeCheck | None
    dead_letters: Mapping[tuple[int, int], AdmissionDeadLetter]
    as_of: datetime
    rerun_of: frozenset[tuple[str, datetime]] = frozenset()
    """(schedule id, nominal instant) of every occurrence a committed re-run ran again."""
    committed_by_schedule: Mapping[str, list[str]] = field(default_factory=dict)
    """The run ids of `commits` by their first commit's schedule id, sorted: each schedule's
    audit looks at its own fires only, so the audit costs the fires, not schedules x fires."""
    unsettled_by_schedule: Mapping[str, list[str]] = field(default_factory=dict)
    """The run ids of `unsettled` holding a fire, by that fire's schedule id, sorted."""


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
    stops: Mapping[str, Sequence[StopSpan]] | None = None,
    unsettled: Unsettled | None = None,
    outcomes: OutcomeCheck | None = None,
    early_tolerance: timedelta = DEFAULT_EARLY_TOLERANCE,
    periods: UpstreamPeriods | None = None,
) -> AuditReport:
    """Match each expected occurrence against the fires and run events read from the topics.

    `expected` has an entry for every schedule the history names (`expected_occurrences`);
    `stops` are its deletes and pauses (`stopped_spans`), which say why a fire was not owed.
    `fired` and `events` may hold anything the topics had: only records whose nominal instant is
    in the window (and of `schedule_id`, when given) are considered. Retry requests (attempt
    above 1) are an executor's business, not fires, so they count neither as fires nor as
    duplicates. The report lists each schedule that owed, fired or hid something in the window.
    With `periods` (`resolve_periods`), `events` holding their successes, runs' waits are checked.
    """
    events = tuple(events)  # read again for the upstream periods' successes

    def wanted(sid: str, nominal: datetime) -> bool:
        return start <= nominal < end and (schedule_id is None or sid == schedule_id)

    pending = unsettled or Unsettled()
    seen = _index(
        expected,
        fired,
        events,
        pending,
        wanted=wanted,
        as_of=as_of,
        grace=grace,
        early_tolerance=early_tolerance,
        outcomes=outcomes,
    )
    audits = [
        _audit_one(sid, expected.get(sid, ()), seen, (stops or {}).get(sid, ()), sid in expected)
        for sid in _audited(expected, seen, schedule_id)
    ]
    if periods:
        waited = dependency_findings(periods, seen.commits, events, pending.events, as_of=as_of)
        audits = with_findings(audits, waited)
    return AuditReport(
        start,
        end,
        as_of,
        grace,
        tuple(audits),
        open_transactions=pending.transactions,
        early_tolerance=early_tolerance,
        outcome_grace=outcomes.grace if outcomes else None,
    )


def _audited(
    expected: Mapping[str, Sequence[ExpectedOccurrence]], seen: _Seen, schedule_id: str | None
) -> list[str]:
    """The schedules the report lists: each that owed, fired or hid something in the window."""
    sids = {sid for sid, occurrences in expected.items() if occurrences}
    sids |= {runs[0].schedule_id for runs in seen.commits.values()}
    sids |= {records[0].schedule_id for records in seen.unsettled.values()}
    if schedule_id is not None:
        sids &= {schedule_id}
    return sorted(sids)


def _index(
    expected: Mapping[str, Sequence[ExpectedOccurrence]],
    fired: Iterable[FiredRun],
    events: Iterable[RunEventRecord],
    pending: Unsettled,
    *,
    wanted: Callable[[str, datetime], bool],
    as_of: datetime,
    grace: timedelta,
    early_tolerance: timedelta,
    outcomes: OutcomeCheck | None,
) -> _Seen:
    """The records of the window, indexed by run id."""
    commits: dict[str, list[FiredRun]] = {}
    for run in fired:
        if run.attempt == 1 and wanted(run.schedule_id, run.nominal):
            commits.setdefault(run.run_id, []).append(run)
    story: dict[str, list[RunEventRecord]] = {}
    for event in events:
        if wanted(event.schedule_id, event.nominal):
            story.setdefault(event.run_id, []).append(event)
    hidden: dict[str, list[FiredRun | RunEventRecord]] = {}
    records: list[FiredRun | RunEventRecord] = [*pending.fires, *pending.events]
    for record in records:
        if _counts(record) and wanted(record.schedule_id, record.nominal):
            hidden.setdefault(record.run_id, []).append(record)
    return _Seen(
        committed_by_schedule=_by_schedule(
            (run_id, runs[0].schedule_id) for run_id, runs in commits.items()
        ),
        unsettled_by_schedule=_by_schedule(
            (run_id, fires[0].schedule_id)
            for run_id, records in hidden.items()
            if (fires := [r for r in records if isinstance(r, FiredRun)])
        ),
        rerun_of=frozenset(
            (runs[0].schedule_id, runs[0].nominal)
            for run_id, runs in commits.items()
            if rerun_request_of(run_id) is not None
        ),
        commits=commits,
        story=story,
        unsettled=hidden,
        owed=frozenset(o.run_id for occurrences in expected.values() for o in occurrences),
        settled_before=as_of - grace,
        early_tolerance=early_tolerance,
        outcomes=outcomes,
        dead_letters={
            (d.source_partition, d.source_offset): d
            for d in (outcomes.dead_letters if outcomes else ())
        },
        as_of=as_of,
    )


def _by_schedule(run_ids: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for run_id, schedule_id in sorted(run_ids):
        grouped.setdefault(schedule_id, []).append(run_id)
    return grouped


def _counts(record: FiredRun | RunEventRecord) -> bool:
    """A first fire or a policy skip: the records that settle an occurrence."""
    if isinstance(record, FiredRun):
        return record.attempt == 1
    return record.kind == "skipped"


def _audit_one(
    schedule_id: str,
    owed: Sequence[ExpectedOccurrence],
    seen: _Seen,
    stops: Sequence[StopSpan],
    known: bool,
) -> ScheduleAudit:
    lateness: list[int] = []
    outcomes: Counter[str] = Counter()
    lost: list[ExpectedOccurrence] = []
    skipped: list[tuple[str, str | None]] = []
    findings: list[Finding] = []
    fired = pending = reruns = recovered = 0
    for occurrence in owed:
        runs = seen.commits.get(occurrence.run_id)
        events = seen.story.get(occurrence.run_id, [])
        if runs:
            # Commits of one run id share its key and so its partition: the first is the fire.
            first = min(runs, key=lambda r: r.offset)
            due = _millis(occurrence.due_at)
            findings += _fire_findings(first, due, runs, events, seen)
            findings += _calendar_findings(occurrence, skip=None)
            if rerun_request_of(occurrence.run_id) is not None:
                reruns += 1  # asked for by a person, fired when asked: not the schedule's lateness
                continue
            fired += 1
            lateness.append((first.fired_at - due) // _MS)
            # Events of one run share its key, so topic order is the order they happened in.
            outcomes[events[-1].kind if events else "unreported"] += 1
            continue
        skip = next((e for e in events if e.kind == "skipped"), None)
        if skip is not None:
            skipped.append((occurrence.run_id, skip.reason))
            findings += _calendar_findings(occurrence, skip)
        elif (schedule_id, occurrence.nominal) in seen.rerun_of:
            recovered += 1
        elif occurrence.due_at >= seen.settled_before:
            pending += 1
        elif occurrence.run_id in seen.unsettled:
            findings.append(_hidden(occurrence.run_id, seen, "its fire or skip"))
        else:
            lost.append(occurrence)
            findings.append(_lost(occurrence))
    unexpected, duplicates, beyond = _beyond_owed(schedule_id, seen, stops, known)
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
        findings=tuple(sorted([*findings, *beyond], key=lambda f: (f.nominal, f.run_id, f.kind))),
        reruns=reruns,
        recovered=recovered,
    )


def _beyond_owed(
    schedule_id: str, seen: _Seen, stops: Sequence[StopSpan], known: bool
) -> tuple[list[str], dict[str, int], list[Finding]]:
    """The schedule's fires nothing owed, its extra commits by run id, and their findings."""
    own = seen.committed_by_schedule.get(schedule_id, [])
    unexpected = [
        run_id
        for run_id in own
        if run_id not in seen.owed and not _fired_before_its_stop(run_id, seen, stops)
    ]
    findings: list[Finding] = []
    for run_id in unexpected:
        findings += _unowed_findings(run_id, seen, stops, known)
    findings += _hidden_beyond(schedule_id, seen)
    duplicates = {
        run_id: len(seen.commits[run_id]) - 1 for run_id in own if len(seen.commits[run_id]) > 1
    }
    return unexpected, duplicates, findings


def _fired_before_its_stop(run_id: str, seen: _Seen, stops: Sequence[StopSpan]) -> bool:
    """Fired before the delete or pause its nominal instant falls in, under an earlier version:
    a roll to an earlier business day decides an occurrence before its nominal instant, and
    what was decided before the user said stop is not run against it."""
    first = min(seen.commits[run_id], key=lambda r: r.offset)
    stop = next((s for s in stops if s.holds(first.nominal)), None)
    return stop is not None and first.fired_at < stop.start and first.schedule_offset < stop.offset


def _fire_findings(
    first: FiredRun,
    due: datetime,
    runs: Sequence[FiredRun],
    events: Sequence[RunEventRecord],
    seen: _Seen,
) -> list[Finding]:
    """Breaches one committed fire shows: extra commits, earliness, and its execution's fate."""
    found: list[Finding] = []
    if len(runs) > 1:
        where = ", ".join(f"partition {r.partition} offset {r.offset}" for r in runs)
        found.append(_fire_finding(FindingKind.DUPLICATE, first, due, f"committed at {where}"))
    witness = min(first.fired_at, first.appended_at or first.fired_at)
    if due - witness > seen.early_tolerance:
        early_ms = (due - witness) // _MS
        source = "fired_at" if witness == first.fired_at else "the broker's append time"
        clamped = ", clamped at 0" if first.lateness_ms == 0 else ""
        detail = (
            f"fired {early_ms} ms before it was due (by {source}; ticker {first.ticker_instance}"
            f"); the record's lateness_ms says {first.lateness_ms}{clamped}"
        )
        found.append(_fire_finding(FindingKind.EARLY, first, due, detail))
    if seen.outcomes is not None and not any(e.kind in TERMINAL_KINDS for e in events):
        found += _outcome_findings(first, due, runs, events, seen)
    return found


def _outcome_findings(
    first: FiredRun,
    due: datetime,
    runs: Sequence[FiredRun],
    events: Sequence[RunEventRecord],
    seen: _Seen,
) -> list[Finding]:
    check = seen.outcomes
    assert check is not None  # only called with the outcome check on
    refused = next(
        (d for r in runs if (d := seen.dead_letters.get((r.partition, r.offset))) is not None),
        None,
    )
    if refused is not None:
        detail = f"refused by an executor: {refused.error_class}: {refused.reason}"
        return [_fire_finding(FindingKind.DEAD_LETTERED, first, due, detail)]
    if first.fired_at + check.grace >= seen.as_of:
        return []
    last = f"its last run event is {events[-1].kind!r}" if events else "no run event at all"
    detail = f"no terminal run event within {_text(check.grace)} of the fire: {last}"
    return [_fire_finding(FindingKind.UNREPORTED, first, due, detail)]


def _unowed_findings(
    run_id: str, seen: _Seen, stops: Sequence[StopSpan], known: bool
) -> list[Finding]:
    runs = seen.commits[run_id]
    first = min(runs, key=lambda r: r.offset)
    events = seen.story.get(run_id, [])
    return [
        _unowed_finding(first, stops, known),
        *_fire_findings(first, first.due_at, runs, events, seen),
    ]


def _unowed_finding(run: FiredRun, stops: Sequence[StopSpan], known: bool) -> Finding:
    """Why no version of the schedule owed this fire."""
    if not known:
        detail = "no event of the schedules topic names this schedule"
        return _fire_finding(FindingKind.UNEXPECTED, run, run.due_at, detail)
    stop = next((s for s in stops if s.holds(run.nominal)), None)
    if stop is None:
        detail = (
            f"no version of the schedule owed an occurrence at this instant (fired under "
            f"schedules offset {run.schedule_offset})"
        )
        return _fire_finding(FindingKind.UNEXPECTED, run, run.due_at, detail)
    what = "deleted" if stop.deleted else "paused"
    by = changed_by_text(stop.changed_by, stop.signed_by)
    detail = (
        f"the schedule was {what}{by} at {_instant(stop.start)} (schedules offset "
        f"{stop.offset}); fired under offset {run.schedule_offset} by ticker "
        f"{run.ticker_instance}"
    )
    kind = FindingKind.FIRED_AFTER_DELETE if stop.deleted else FindingKind.FIRED_WHILE_PAUSED
    return _fire_finding(kind, run, run.due_at, detail)


def _hidden_beyond(schedule_id: str, seen: _Seen) -> list[Finding]:
    """Unsettled fires that could become a second commit or an unowed fire if committed."""
    found = []
    for run_id in seen.unsettled_by_schedule.get(schedule_id, []):
        fires = [r for r in seen.unsettled[run_id] if isinstance(r, FiredRun)]
        if fires[0].due_at >= seen.settled_before:
            continue  # in flight like any fresh commit: pending, not a finding
        if run_id in seen.commits:
            found.append(_hidden(run_id, seen, "a second commit of this run"))
        elif run_id not in seen.owed:
            found.append(_hidden(run_id, seen, "a fire that nothing owed"))
    return found


def _hidden(run_id: str, seen: _Seen, what: str) -> Finding:
    record = seen.unsettled[run_id][0]
    topic = "runs" if isinstance(record, FiredRun) else "run-events"
    fired_at = record.fired_at if isinstance(record, FiredRun) else None
    due = record.due_at if isinstance(record, FiredRun) else None
    detail = (
        f"{what} is past the last stable offset of {topic} partition {record.partition} "
        f"(offset {record.offset}): in a transaction still open, not yet committed or aborted"
    )
    return Finding(
        FindingKind.HIDDEN, record.schedule_id, run_id, record.nominal, due, fired_at, detail
    )


def _lost(occurrence: ExpectedOccurrence) -> Finding:
    detail = f"owed by schedules offset {occurrence.version}: no committed fire, no recorded skip"
    return _owed_finding(FindingKind.LOST, occurrence, detail)


def _calendar_findings(
    occurrence: ExpectedOccurrence, skip: RunEventRecord | None
) -> list[Finding]:
    """Where the ticker and the brute-force account of its calendars
    (`kairos.core.calendar_owed`) disagree on whether the occurrence runs: fired (`skip` is
    `None`) though they skip it, or skipped for a calendar's reason (not a misfire policy's)
    though they run it."""
    if skip is None:
        if not occurrence.calendar_skipped:
            return []
        return [
            _owed_finding(FindingKind.CALENDAR, occurrence, "fired though its calendars skip it")
        ]
    if occurrence.calendar_skipped is not False or is_misfire_reason(skip.reason):
        return []
    detail = f"skipped ({skip.reason}) though the calendars in force run it"
    return [_owed_finding(FindingKind.CALENDAR, occurrence, detail)]


def _owed_finding(kind: FindingKind, occurrence: ExpectedOccurrence, detail: str) -> Finding:
    return Finding(
        kind,
        occurrence.schedule_id,
        occurrence.run_id,
        occurrence.nominal,
        occurrence.due_at,
        None,
        detail,
    )


def _fire_finding(kind: FindingKind, run: FiredRun, due: datetime, detail: str) -> Finding:
    return Finding(kind, run.schedule_id, run.run_id, run.nominal, due, run.fired_at, detail)


def _millis(instant: datetime) -> datetime:
    """`instant` as the records carry it: Avro `timestamp-millis` truncates."""
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


def _instant(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def _text(duration: timedelta) -> str:
    return f"{duration.total_seconds():g}s"
