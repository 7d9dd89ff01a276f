"""A run that waits for its upstream periods: which periods (the ticker), and its fate (the
executor).

Pure. The ticker that fires a run of a schedule naming upstream schedules resolves each one from
the upstream's definition as its ticker holds it (`resolve`): the period the run waits for, or
why it has none. The run carries that resolution (`RunRequested.upstream`), and the executors
hold it in their dedupe store until `judge` releases or ends it. The rules, in order
(docs/defaults.md, "Dependencies"):

1. An upstream that does not exist (never created, or deleted), does not grant the run's team
   (`downstream_teams`), or whose definition could not be read when the run was fired, is
   `REFUSED`: the run ends at once, as its `upstream_timeout` says, with the reason.
2. An upstream none of whose periods matches the run's (`same_instant` on an instant it does
   not share, `latest_before` before its first occurrence) is `UNMATCHED`: there is nothing to
   wait for, and the run is skipped with the reason, whatever `upstream_timeout` says.
3. Once every `MATCHED` period has succeeded (a run of the upstream at that nominal instant, or
   a re-run of it), the run is released.
4. Otherwise it waits until `until` (its nominal instant plus `upstream_wait`), then ends as its
   `upstream_timeout` says, naming the periods that had not succeeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from zoneinfo import ZoneInfo

from kairos.core.calendar_rules import CalendarLookup
from kairos.core.dependencies import may_wait_for, upstream_period
from kairos.core.schedule import Schedule
from kairos.core.schedule_dependencies import PeriodMatch, Upstream, UpstreamTimeout


class Resolution(StrEnum):
    MATCHED = "matched"
    UNMATCHED = "unmatched"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class UpstreamPeriod:
    """One upstream of a fired run, as its ticker resolved it."""

    schedule_id: str
    match: PeriodMatch
    resolution: Resolution
    period_at: datetime | None = None
    """The nominal instant of the period the run waits for; set only when `MATCHED`."""
    reason: str | None = None


class Unreadable:
    """The upstream's definition could not be read when the run was fired; `problem` says why."""

    def __init__(self, problem: str) -> None:
        self.problem = problem


def resolve(
    owner: str | None,
    upstream: Upstream,
    definition: Schedule | Unreadable | None,
    run: tuple[datetime, ZoneInfo],
    calendars: CalendarLookup | None = None,
) -> UpstreamPeriod:
    """The period of `upstream` a run of `owner`'s schedule at `run` (its nominal instant and its
    schedule's zone) waits for, from the upstream's `definition` (`None`: there is none)."""
    schedule_id, match = upstream.schedule, upstream.match
    refused = UpstreamPeriod(schedule_id, match, Resolution.REFUSED)
    if isinstance(definition, Unreadable):
        return _with_reason(
            refused,
            f"upstream schedule {schedule_id} could not be read when the run was fired "
            f"({definition.problem}); re-run it once the schedules topic is readable",
        )
    if definition is None:
        return _with_reason(
            refused,
            f"upstream schedule {schedule_id} does not exist (never created, or deleted): "
            "create it again or remove it from this schedule's upstream",
        )
    if not may_wait_for(owner, definition):
        theirs, ours = definition.owner or "no team", owner or "no team"
        return _with_reason(
            refused,
            f"upstream schedule {schedule_id} belongs to {theirs}, which does not let {ours}'s "
            f"schedules wait for it: its owner adds {ours} to its downstream_teams",
        )
    nominal, zone = run
    period = upstream_period(definition, match, nominal, zone, calendars)
    if period is None:
        return UpstreamPeriod(
            schedule_id,
            match,
            Resolution.UNMATCHED,
            reason=f"no period of upstream {schedule_id} matches this run's ({match.value}): "
            "there is nothing to wait for",
        )
    return UpstreamPeriod(schedule_id, match, Resolution.MATCHED, period_at=period)


def _with_reason(period: UpstreamPeriod, reason: str) -> UpstreamPeriod:
    return UpstreamPeriod(period.schedule_id, period.match, period.resolution, reason=reason)


class Verdict(StrEnum):
    RELEASE = "release"
    WAIT = "wait"
    SKIP = "skip"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Judgement:
    verdict: Verdict
    reason: str | None = None


WAITING = Judgement(Verdict.WAIT)


def judge(
    periods: Sequence[tuple[UpstreamPeriod, bool]],
    until: datetime,
    timeout: UpstreamTimeout,
    now: datetime,
) -> Judgement:
    """The fate of a held run: its upstream periods, each with whether it succeeded, and the end
    of its wait (the rules above)."""
    on_timeout = Verdict.SKIP if timeout is UpstreamTimeout.SKIP else Verdict.FAIL
    for period, _ in periods:
        if period.resolution is Resolution.REFUSED:
            return Judgement(on_timeout, period.reason)
    for period, _ in periods:
        if period.resolution is Resolution.UNMATCHED:
            return Judgement(Verdict.SKIP, period.reason)
    pending = [period for period, succeeded in periods if not succeeded]
    if not pending:
        return Judgement(Verdict.RELEASE)
    if now < until:
        return WAITING
    named = ", ".join(f"{p.schedule_id} at {_instant(p.period_at)}" for p in pending)
    return Judgement(
        on_timeout,
        f"waited until {_instant(until)} (upstream_wait) for the upstream periods ending at "
        f"{named}, which had not succeeded",
    )


def _instant(instant: datetime | None) -> str:
    return "-" if instant is None else instant.isoformat().replace("+00:00", "Z")
