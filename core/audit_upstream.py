"""The audit's proof that waiting runs waited: no run started (or was released) before its
upstream periods succeeded, none was left waiting past its wait without an outcome, and none was
fired without the wait its definition names.

What a run must wait for is its schedule's definition's, the one that owed it, never its own
record's (`kairos.core.audit_dependencies.resolve_periods`, `RunWaits`): the version in force
at its nominal instant, or for a re-run the one in force when its request was taken. A run
whose definition names no upstream is not checked. It may not start until the matching period
of each upstream has succeeded: a run of the upstream with that nominal instant, the scheduled
one or any re-run of it, reported `succeeded`. When its wait (`upstream_wait` after its nominal
instant) ends first, an executor ends it (`dead_lettered` or `failed`, or `skipped`, as
`upstream_timeout` says). The findings, all breaches (docs/audit.md):

- `fired_without_its_wait`: a fired record (any commit of the run) does not carry the
  definition's upstreams, wait and timeout (`carries`): a ticker dropped or changed the wait;
- `started_before_upstream`: the run's first `started` event is stamped more than
  `CLOCK_TOLERANCE` before the earliest `succeeded` event (by `finished_at`) of an upstream's
  period, or it started though that period never succeeded, or though the rule names no period;
- `released_before_upstream`: the same of its first `released` event, by the broker's append
  time (the event carries no instant of its own): a release is appended after it committed,
  and it commits after the success it saw committed, so one appended more than the tolerance
  before the success's `finished_at` is an executor releasing early;
- `waiting_past_deadline`: the run was fired, its wait and `WAIT_GRACE` have passed by the
  audit's as-of instant (or its fire came later, and the grace after it passed), it was not
  released by then, and no run event says it started or ended (`ENDING_KINDS`). A run released
  in time and held back since (a full concurrency group, an overlap queue) is late, not this.

Which period a run waits for is worked out by `kairos.core.audit_dependencies`, apart from the
code the executors use, under the upstream's definition in force at the run's nominal instant
in the schedule history. A period the walk cannot settle, or an upstream with no definition
then, is not judged. Pure: the records come in read and `as_of` is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from kairos.core.audit import FiredRun, RunEventRecord
from kairos.core.audit_dependencies import RunWaits, UpstreamPeriod, carries, waiting_text
from kairos.core.audit_margin import CLOCK_MARGIN
from kairos.core.audit_report import Finding, FindingKind, ScheduleAudit
from kairos.core.run_id import RunIdError, format_instant, parse_run_id

CLOCK_TOLERANCE = timedelta(seconds=1)
"""How much earlier than its upstream period's success a run's start may be stamped before it
counts as started too soon. The two instants come from two executors' clocks (the downstream's
`started_at`, the upstream's `finished_at`), each truncated to the millisecond on the wire, and
hosts kept by NTP agree to within milliseconds: a second is far more than they drift apart. A
run that really did not wait starts on its own trigger, seconds to hours before its upstream
period ends, which this leaves visible. A release is held to the same, by the broker's clock
(its append time) against the upstream executor's."""

WAIT_GRACE = CLOCK_MARGIN
"""How long after its wait ends (or after its fire, when fired later) a waiting run may go
without a release, a `started` or an ending event before the audit reports it: the clock margin
(`kairos.core.audit_margin`, 5 minutes), the same allowance the audit already gives the
producers' clocks. The executor ending it reads its own clock, which may lag the audit's, then
publishes through its outbox: seconds normally, well inside it."""

ENDING_KINDS = frozenset({"succeeded", "failed", "dead_lettered", "skipped"})
"""Run events after which a run is no longer waiting: it ran, or was ended (the schema has no
other ending kind; `retrying` and `deadline_missed` follow a start or say nothing of one)."""

STARTED_KINDS = frozenset({"started"})

RELEASED_KINDS = frozenset({"released"})
"""The event an executor publishes when it releases a held run, in the transaction that
releases it: it carries no instant, and is timed by the broker's append time."""

UpstreamPeriods = Mapping[str, RunWaits]
"""What each waiting run of the window waits for, by its run id
(`kairos.core.audit_dependencies.resolve_periods`)."""


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
    """Every waiting run of the window (`commits`: its committed first fires by run id) fired
    without its wait, started or released before an upstream period succeeded, or left waiting
    past its wait. `events` are the committed run events read (the window's runs', and the
    successes of upstream periods before the window too), `unsettled` those past a last stable
    offset: a record there that would settle a breach makes it `hidden`, not a breach."""
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
        # Commits of one run id may sit on several partitions (a record a foreign producer
        # placed): the first is the first appended, and every one must carry its wait.
        first = min(runs, key=_commit_order)
        for run in sorted(runs, key=_commit_order):
            dropped = _record_findings(run, waits)
            if dropped:
                found += dropped
                break
        told = story.get(run_id, [])
        release = _first_of(told, RELEASED_KINDS)
        if release is not None and release.appended_at is not None:
            said = (_released(release), release.appended_at)
            found += _too_soon(FindingKind.RELEASED_BEFORE_UPSTREAM, first, said, waits, outcomes)
        start = _first_of(told, STARTED_KINDS)
        if start is not None:
            if start.started_at is not None:
                said = (_started(start), start.started_at)
                found += _too_soon(
                    FindingKind.STARTED_BEFORE_UPSTREAM, first, said, waits, outcomes
                )
        elif not any(e.kind in ENDING_KINDS for e in told):
            found += _waiting_findings(first, waits, release, outcomes)
    return found


def _first_of(told: Sequence[RunEventRecord], kinds: frozenset[str]) -> RunEventRecord | None:
    """The first of the run's events of `kinds`, in topic order (a run's share a partition)."""
    return min((e for e in told if e.kind in kinds), key=lambda e: e.offset, default=None)


def _commit_order(run: FiredRun) -> tuple[datetime, int, int]:
    return (run.appended_at or run.fired_at, run.partition, run.offset)


def _record_findings(run: FiredRun, waits: RunWaits) -> list[Finding]:
    """`fired_without_its_wait` when the fired record does not carry its definition's wait."""
    if waits.version is None or carries(run.waiting, waits.waiting):
        return []
    detail = (
        f"its definition (schedules offset {waits.version}) names "
        f"{waiting_text(waits.waiting)}; the record ticker {run.ticker_instance} fired "
        f"(under schedules offset {run.schedule_offset}) carries {waiting_text(run.waiting)}"
    )
    return [_finding(FindingKind.FIRED_WITHOUT_ITS_WAIT, run, detail)]


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


def _too_soon(
    kind: FindingKind,
    run: FiredRun,
    said: tuple[str, datetime],
    waits: RunWaits,
    outcomes: _Outcomes,
) -> list[Finding]:
    """The upstream periods the run's first start or release (`said`: how the detail says it,
    and its instant) came too soon for: before the period's success, less the tolerance."""
    what, instant = said
    found = []
    for wait in waits.periods:
        if wait.undecided is not None:
            continue
        if wait.period is None:
            detail = (
                f"{what}, but upstream {wait.upstream_id} has no period matching "
                f"{wait.match} at this nominal instant: the run was to be skipped"
            )
            found.append(_finding(kind, run, detail + _fired_for(run, wait)))
            continue
        success = outcomes.successes.get((wait.upstream_id, wait.period))
        if success is not None and _finished(success) <= instant + CLOCK_TOLERANCE:
            continue
        found.append(_before_success(kind, run, said, wait, success, outcomes=outcomes))
    return found


def _before_success(
    kind: FindingKind,
    run: FiredRun,
    said: tuple[str, datetime],
    wait: UpstreamPeriod,
    success: RunEventRecord | None,
    *,
    outcomes: _Outcomes,
) -> Finding:
    what, instant = said
    assert wait.period is not None
    held = _held_back(
        outcomes,
        lambda e: (
            _period_of(e) == (wait.upstream_id, wait.period)
            and _finished(e) <= instant + CLOCK_TOLERANCE
        ),
    )
    if held is not None:
        return _hidden(run, held, f"a success of upstream {wait.upstream_id}'s period")
    period = f"upstream {wait.upstream_id}'s period {_text(wait.period)} ({wait.match})"
    if success is None:
        detail = f"{what}, but {period} has no succeeded run event"
    else:
        early = _seconds(_finished(success) - instant)
        detail = (
            f"{what}, {early} before {period} succeeded at "
            f"{_text(_finished(success))} (run {success.run_id}, {success.source}); clock "
            f"tolerance {_seconds(CLOCK_TOLERANCE)}"
        )
    return _finding(kind, run, detail + _fired_for(run, wait))


def _fired_for(run: FiredRun, wait: UpstreamPeriod) -> str:
    """What the ticker that fired the run resolved the period to, when not the audit's."""
    waiting = run.waiting
    if waiting is None:
        return ""  # fired waiting for nothing: `fired_without_its_wait` says so
    named = [upstream for upstream, _ in waiting.upstream]
    if len(waiting.fired_periods) != len(named) or wait.upstream_id not in named:
        return ""
    fired = waiting.fired_periods[named.index(wait.upstream_id)]
    if fired == wait.period:
        return ""
    said = "no period" if fired is None else f"the period {_text(fired)}"
    return f"; the run was fired waiting for {said}"


def _waiting_findings(
    run: FiredRun, waits: RunWaits, release: RunEventRecord | None, outcomes: _Outcomes
) -> list[Finding]:
    """`waiting_past_deadline` for a run neither started nor ended (`release`: its first
    `released` event, if any)."""
    wait = waits.waiting.wait
    ended_by = max(run.nominal + wait, run.fired_at)
    deadline = ended_by + WAIT_GRACE
    if deadline >= outcomes.as_of or _released_by(release, deadline):
        return []  # not over yet, or released in time and held back since: late, not lost
    held = _held_back(
        outcomes,
        lambda e: (
            e.run_id == run.run_id
            and (e.kind in STARTED_KINDS | ENDING_KINDS or _released_by(e, deadline))
        ),
    )
    if held is not None:
        return [_hidden(run, held, "its release, start or end")]
    upstreams = "; ".join(_wait_text(wait, outcomes) for wait in waits.periods)
    detail = (
        f"fired at {_text(run.fired_at)} to wait for {upstreams}; its wait of "
        f"{_seconds(wait)} ended at {_text(ended_by)} (upstream_timeout: "
        f"{waits.waiting.timeout}), yet {_seconds(WAIT_GRACE)} later "
        f"{_release_text(release)}no run event says it started, succeeded, failed, was "
        "dead-lettered or skipped"
    )
    return [_finding(FindingKind.WAITING_PAST_DEADLINE, run, detail)]


def _released_by(event: RunEventRecord | None, deadline: datetime) -> bool:
    """Whether `event` is a release the broker appended by `deadline`."""
    return (
        event is not None
        and event.kind in RELEASED_KINDS
        and event.appended_at is not None
        and event.appended_at <= deadline
    )


def _release_text(release: RunEventRecord | None) -> str:
    if release is None:
        return "it was not released, and "
    if release.appended_at is None:
        return (
            f"its release (by {release.source}) has no broker append time (the run-events "
            "topic does not stamp LogAppendTime), so it is not known to be in time, and "
        )
    return f"it was released only at {_text(release.appended_at)} ({release.source}), and "


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


def _released(release: RunEventRecord) -> str:
    assert release.appended_at is not None
    return f"released (its run event appended at {_text(release.appended_at)}, {release.source})"


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
