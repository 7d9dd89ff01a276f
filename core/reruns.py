"""Re-runs: which runs a `trigger` or `backfill` request owes, and when the request is done.

Pure, like `kairos.core.firing`: the ticker and the audit both call `take_rerun`, so they agree
on every run a request made. Rules (docs/defaults.md states them for users):

- A trigger owes one run, for its instant; a backfill owes a run for every occurrence of the
  schedule's trigger from `start` through `end` (both included), business-day triggers
  included. Calendars' exclusions and blackouts, the pause and the misfire policy do not apply:
  the request is a person's explicit "run these".
- The occurrences are those of the definition in force when the ticker takes the request: the
  ticker takes nothing after a request on its partition before the request is done.
- Each run's id is the occurrence's run id with the request id after it (`rerun_id`): distinct
  from the scheduled run, equal for every retry of the request.
- A request is fired whole, in the call that takes it. A state written by an older ticker may
  remember how far a request got (`ScheduleState.rerun`): the call then goes on after it.
- A request id the schedule already completed is a no-op (`ScheduleState.reruns_done` keeps the
  last `REMEMBERED_REQUESTS`); beyond that, executors' deduplication still runs each run once.
- A request is bounded where it is taken (`judge_rerun`), whoever published it: at most
  `MAX_BACKFILL_RUNS` runs under the definition in force, none before `EARLIEST_INSTANT`, and
  none past the instant the broker appended the request plus `CLOCK_GRACE`. The appended
  instant, not the ticker's clock, so the audit judges every request as the ticker did.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from kairos.core.calendar_rules import CalendarLookup, next_occurrence
from kairos.core.errors import KairosError
from kairos.core.firing import Action, Decision, ScheduleState
from kairos.core.limits import EARLIEST_INSTANT
from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.run_id import check_request_id, format_instant, rerun_id
from kairos.core.schedule import OverlapPolicy, Schedule

REMEMBERED_REQUESTS = 64
"""Completed request ids a schedule remembers, so that a retried request fires nothing."""

MAX_BACKFILL_RUNS = 10_000
"""The most runs one request may ask for: `kairos schedules backfill` and the console refuse
more (split the range), and the ticker refuses a request over it whoever published it, so that
one request fits the re-runs a transaction carries: fired whole in the transaction that takes
it, it never holds its partition's later changes past that transaction."""

CLOCK_GRACE = timedelta(minutes=5)
"""How far past the instant the broker appended a request its end may reach: the clock of the
host that asked "now" may run ahead of the broker's, by as much as a signature's default age
(`--signature-max-age-s`, 300 s) tolerates."""

_JUST_BEFORE = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class RerunOutcome:
    """The schedule's state after the call (the request done) and the runs fired."""

    state: ScheduleState
    decisions: list[Decision]
    already_done: bool = False
    """The request had been completed before: nothing was fired again."""


def rerun_occurrences(
    schedule: Schedule,
    request: RerunRequest,
    after: datetime | None = None,
    calendars: CalendarLookup | None = None,
) -> Iterator[datetime]:
    """The nominal instants the request names, oldest first, those up to `after` left out."""
    if request.kind is RerunKind.TRIGGER:
        if after is None or request.start > after:
            yield request.start
        return
    cursor = (
        request.start - _JUST_BEFORE if after is None else max(after, request.start - _JUST_BEFORE)
    )
    while True:
        fire = next_occurrence(schedule, cursor, calendars)
        if fire is None or fire.nominal > request.end:
            return
        yield fire.nominal
        cursor = fire.nominal


def take_rerun(state: ScheduleState, request: RerunRequest, now: datetime) -> RerunOutcome:
    """Fire the request's runs (those not fired yet), at `now`, under `state`'s definition."""
    if request.request_id in state.reruns_done:
        return RerunOutcome(state, [], already_done=True)
    progress = state.rerun
    after = (
        progress.fired_through
        if progress is not None and progress.request_id == request.request_id
        else None
    )
    decisions: list[Decision] = []
    for nominal in rerun_occurrences(state.schedule, request, after, state.calendars):
        decisions.append(
            Decision(
                run_id=rerun_id(state.schedule_id, nominal, request.request_id),
                schedule_id=state.schedule_id,
                nominal=nominal,
                fire_at=now,
                action=Action.FIRE,
                rerun=request,
            )
        )
    return RerunOutcome(completed(state, request), decisions)


def completed(state: ScheduleState, request: RerunRequest) -> ScheduleState:
    """`state` once every run of `request` is fired: the request remembered as done."""
    remembered = (*state.reruns_done, request.request_id)[-REMEMBERED_REQUESTS:]
    return replace(state, rerun=None, reruns_done=remembered)


@dataclass(frozen=True, slots=True)
class RerunVerdict:
    """What a request asks of the definition in force, and why it is refused (`None`: taken)."""

    runs: int
    """How many runs it names, counted up to one more than `MAX_BACKFILL_RUNS`."""
    refusal: str | None


def judge_rerun(
    state: ScheduleState, request: RerunRequest, appended_at: datetime
) -> RerunVerdict | None:
    """The verdict on `request`, appended by the broker at `appended_at`, under `state`.

    `None` when it is not judged: a retry of a request the schedule completed (a no-op), or the
    request the schedule is part-way through (judged when first taken). Costs at most
    `MAX_BACKFILL_RUNS` + 1 occurrences, however long the range.
    """
    progress = state.rerun
    in_progress = progress is not None and progress.request_id == request.request_id
    if in_progress or request.request_id in state.reruns_done:
        return None
    named = f"re-run request {request.request_id!r} of {state.schedule_id!r}"
    if request.start < EARLIEST_INSTANT:
        return RerunVerdict(
            0,
            f"{named} starts at {request.start.isoformat()}, before "
            f"{format_instant(EARLIEST_INSTANT)}: no schedule has an occurrence that early; "
            "request a range that starts later",
        )
    latest = appended_at + CLOCK_GRACE
    if request.end > latest:
        return RerunVerdict(
            0,
            f"{named} reaches {request.end.isoformat()}, past when it was appended "
            f"({format_instant(appended_at)}) by more than {CLOCK_GRACE}: a re-run runs "
            "occurrences that are due already, future ones fire on schedule; request a range "
            "that ends by now",
        )
    runs = 0
    for _ in rerun_occurrences(state.schedule, request, calendars=state.calendars):
        runs += 1
        if runs > MAX_BACKFILL_RUNS:
            return RerunVerdict(
                runs,
                f"{named} names more than {MAX_BACKFILL_RUNS} occurrences from "
                f"{request.start.isoformat()} through {request.end.isoformat()}; split it "
                f"into backfills of at most {MAX_BACKFILL_RUNS} runs each",
            )
    return RerunVerdict(runs, None)


def rerun_request(
    schedule_id: str,
    kind: RerunKind,
    instants: tuple[datetime, datetime],
    *,
    request_id: str | None,
    overlap: OverlapPolicy | None,
    reason: str | None,
    requested: tuple[str, datetime],
    definition_offset: int,
) -> RerunRequest:
    """The request for the occurrences from `instants[0]` through `instants[1]`, asked by
    `requested` (who, when) of the definition read at `definition_offset`.

    Without a `request_id`, it is named after its kind, its instants and that offset, so that
    asking twice for the same runs of one definition is one request, and asking again after the
    schedule changed (deleted and created again above all, which remembers no request) is a new
    one whose runs have new ids. Raises `KairosError` for an invalid id."""
    start, end = instants
    requested_by, requested_at = requested
    stamp = [format_instant(start).replace("-", "").replace(":", "")]
    if kind is RerunKind.BACKFILL:
        stamp.append(format_instant(end).replace("-", "").replace(":", ""))
    default_id = "-".join([kind.value, *stamp, f"v{definition_offset}"])
    chosen_id = check_request_id(request_id or default_id)
    return RerunRequest(
        request_id=chosen_id,
        schedule_id=schedule_id,
        kind=kind,
        start=start,
        end=end,
        overlap=overlap,
        requested_by=requested_by,
        requested_at=requested_at,
        reason=reason,
    )


class RerunRangeError(KairosError):
    """A backfill that names no occurrence, or more than a request may."""


def planned_rerun_ids(schedule: Schedule, request: RerunRequest, limit: int | None) -> list[str]:
    """The run ids the request will fire, as of `schedule` (the ticker's may be newer); a
    `RerunRangeError` when a backfill names none or more than `limit`."""
    if schedule.business_day is not None:
        return []  # its occurrences need the shared calendars; the ticker computes them
    runs: list[str] = []
    for nominal in rerun_occurrences(schedule, request):
        runs.append(rerun_id(schedule.id, nominal, request.request_id))
        if limit is not None and len(runs) > limit:
            raise RerunRangeError(
                f"the range names more than {limit} occurrences of {schedule.id}; split it into "
                "several backfills"
            )
    if not runs:
        raise RerunRangeError(
            f"no occurrence of {schedule.id} from {format_instant(request.start)} through "
            f"{format_instant(request.end)}; nothing to backfill"
        )
    return runs
