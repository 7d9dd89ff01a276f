"""What a ticker decides about one schedule: its state, schedule changes, and due occurrences.

Pure: every function takes `now` and returns the new state with the decisions it made. The
ticker service persists the state and publishes the decisions in one Kafka transaction, so a
decision is either fully committed (run requested, progress saved) or not at all.

Rules (docs/defaults.md states them for users):

- A schedule owes the occurrences whose nominal instant is at or after the moment it was created
  or resumed (`owed_from`, the change's `changed_at`), and before it was paused or deleted.
- Each occurrence is decided once, `FIRE` (a `RunRequested`) or `SKIP` (with its reason), in the
  order of the instants they fire at: of their nominal instants without `roll`; with `roll` a
  rolled occurrence holds up no other (`kairos.core.fire_order`). A change never decides an
  occurrence at or before the last one decided, so a run id is never decided twice.
- A `business_day` occurrence follows its calendars as they change: moved to the month's new
  n-th business day while that is after the change, else run at the old instant (late, not
  never). A month whose day has begun keeps that day, so no month runs two days.
- A change first decides what the old definition owed before it, so an edit never loses a run
  due under the version then in force; bounded like any catch-up (`limit`), the state meanwhile
  held at the change (`settle_before`), not due until the change is taken again.
- A deleted schedule leaves its floor (`Outcome.floor`): a re-created id owes only occurrences after
  the last one decided before the delete, whatever the re-creation's `changed_at` says.
- Misfires: an occurrence decided more than `MISFIRE_GRACE` after its fire instant was missed.
  `all` fires it late, `skip` records it skipped, `latest` fires only the most recent of a
  backlog; one older than `catchup_window` is skipped whatever the policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from kairos.core.calendar import fire_instant_with_jitter, next_fire
from kairos.core.calendar_rules import (
    ON_TIME,
    CalendarLookup,
    Verdict,
    business_day_following,
    business_day_in_force,
    fire_instant,
    next_occurrence,
    uses_calendars,
)
from kairos.core.definitions import ANONYMOUS_ID, shared_definition
from kairos.core.fire_order import after_deciding, rolled_order
from kairos.core.limits import EARLIEST_INSTANT
from kairos.core.misfire import MISFIRE_GRACE, misfire_reason
from kairos.core.rerun_request import RerunProgress, RerunRequest
from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule

_JUST_BEFORE = timedelta(microseconds=1)


class Action(StrEnum):
    FIRE = "fire"
    SKIP = "skip"


@dataclass(frozen=True, slots=True)
class Decision:
    """One occurrence decided: fired as a run, or skipped with the reason."""

    run_id: str
    schedule_id: str
    nominal: datetime
    fire_at: datetime
    action: Action
    reason: str | None = None
    moved_to: datetime | None = None
    """Where a calendar roll or a blackout deferral moved the occurrence (`fire_at` is then
    this plus the jitter); `None` when it runs at its nominal instant."""
    rerun: RerunRequest | None = None
    """The request a re-run was fired for (`kairos.core.reruns`); `None` for a scheduled run."""


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A ticker's view of one schedule.

    `schedule` is the definition in force (pause and resume events carry it with `paused` set),
    shared by every state whose definition is equal but for the id (`shared_definition`): its
    `id` is `ANONYMOUS_ID`, the schedule's own is `schedule_id`. A state made from a schedule
    with its id takes the id from it and shares its definition. `version` is the schedules-topic
    offset of the change that produced it; `next_nominal` is the first occurrence not yet
    decided (`None`: it never fires again), and with `roll` the first of the stretches not
    parked in `waiting` (`kairos.core.fire_order`).
    """

    schedule: Schedule
    version: int
    next_nominal: datetime | None
    last_decided_nominal: datetime | None = None
    settle_before: datetime | None = None
    """Set while a change waits for this (old) definition to settle what it owed before the
    change's instant: nothing is decided at or after it, and the state is not due, so only the
    change, taken again, decides the rest (`upserted`, `deleted`)."""
    rerun: RerunProgress | None = None
    """A re-run request of this schedule fired in part (`kairos.core.reruns`)."""
    reruns_done: tuple[str, ...] = ()
    """The ids of the re-run requests last completed, oldest first: a retry fires nothing."""
    runs_fired: int = 0
    """Occurrences fired under this version (`max_runs` counts them; a change starts again)."""
    waiting: tuple[datetime, ...] = ()
    """With `roll`: the first undecided occurrence of each earlier stretch (a local day, or its
    part before or after the clock goes back) still owing some, oldest first
    (`kairos.core.fire_order`); empty otherwise."""
    calendars: CalendarLookup | None = field(default=None, compare=False, repr=False)
    """The shared calendars the schedule's calendar fields are read with (not persisted: the
    ticker gives the latest it read, the audit the ones in force at each occurrence)."""
    schedule_id: str = ANONYMOUS_ID
    """The schedule's id; given when `schedule` is a shared definition, else taken from it."""
    due_at: datetime | None = field(init=False, compare=False, repr=False)
    """When the ticker must look at this schedule next; `None` when nothing is pending."""
    due_nominal: datetime | None = field(init=False, compare=False, repr=False)
    """The occurrence due at `due_at`: `next_nominal`, or with `roll` one of `waiting`."""
    verdict: Verdict = field(init=False, compare=False, repr=False)
    """What the calendars make of the occurrence due next (skip, roll, deferral)."""

    def __post_init__(self) -> None:
        # Computed once: a fire asks for it several times (deciding, holds_at, the store's due
        # index), and at a million schedules the jitter's hash missed every cache.
        schedule = self.schedule
        if schedule.id != ANONYMOUS_ID:
            self._share_definition(schedule)
            schedule = self.schedule
        elif self.schedule_id == ANONYMOUS_ID:
            raise ValueError("a state of a shared definition needs its schedule_id")
        nominal, verdict, due = None, ON_TIME, None
        if not schedule.paused and self.settle_before is None:
            if schedule.roll is not None:
                nominal, verdict, due = self._rolled_first()
            else:
                if schedule.business_day is not None and self.next_nominal is not None:
                    self._follow_calendars()
                nominal = self.next_nominal
        if nominal is not None and due is None:
            if uses_calendars(schedule):
                verdict, due = fire_instant(self.schedule_id, schedule, nominal, self.calendars)
            else:
                due = fire_instant_with_jitter(self.schedule_id, schedule, nominal)
        object.__setattr__(self, "due_at", due)
        object.__setattr__(self, "due_nominal", nominal)
        object.__setattr__(self, "verdict", verdict)

    def _rolled_first(self) -> tuple[datetime | None, Verdict, datetime | None]:
        # Parking rewrites how the undecided occurrences are held, not which: safe to keep.
        order = rolled_order(
            self.schedule_id, self.schedule, self.next_nominal, self.waiting, self.calendars
        )
        object.__setattr__(self, "next_nominal", order.cursor)
        object.__setattr__(self, "waiting", order.waiting)
        first = order.first
        if first is None:
            return None, ON_TIME, None
        return first.nominal, first.verdict, first.fire_at

    def _follow_calendars(self) -> None:
        assert self.next_nominal is not None
        in_force = business_day_in_force(
            self.schedule, self.next_nominal, self.last_decided_nominal, self.calendars
        )
        object.__setattr__(self, "next_nominal", in_force)

    def _share_definition(self, schedule: Schedule) -> None:
        if self.schedule_id not in (ANONYMOUS_ID, schedule.id):
            raise ValueError(
                f"a state of schedule {self.schedule_id!r} given the definition of {schedule.id!r}"
            )
        object.__setattr__(self, "schedule_id", schedule.id)
        object.__setattr__(self, "schedule", shared_definition(schedule))

    def schedule_with_id(self) -> Schedule:
        """The definition under the schedule's own id: a copy, for writing it out (events),
        not for the firing path."""
        return self.schedule.model_copy(update={"id": self.schedule_id})

    @property
    def paused(self) -> bool:
        return self.schedule.paused

    @property
    def first_undecided(self) -> datetime | None:
        """The undecided occurrence with the earliest nominal instant (`None`: none is left)."""
        return self.waiting[0] if self.waiting else self.next_nominal

    @property
    def settling(self) -> bool:
        return self.settle_before is not None

    @property
    def ran_out(self) -> bool:
        """The schedule fired its `max_runs`-th run under this version: nothing more fires."""
        limit = self.schedule.max_runs
        return limit is not None and self.runs_fired >= limit


@dataclass(frozen=True, slots=True)
class Outcome:
    """A new state (`None`: the schedule is gone) and the decisions that led to it."""

    state: ScheduleState | None
    decisions: list[Decision]
    floor: datetime | None = None
    """Of a deleted schedule (`state` is `None`): the nominal instant of its last decided
    occurrence, to be kept and given to `upserted` should the id be created again."""

    @property
    def settling(self) -> bool:
        """The change is not applied yet: the old definition still owes occurrences before it."""
        return self.state is not None and self.state.settling


def _in_force_from(changed_at: datetime, now: datetime) -> datetime:
    # A producer's clock ahead of the ticker's cannot date a change in the future. Nothing is
    # owed before the earliest instant a schedule may name, and a `changed_at` of year 1 (the
    # wire allows it) would take the calendar out of datetime's range.
    return max(min(changed_at, now), EARLIEST_INSTANT)


def _first_owed(
    schedule: Schedule,
    owed_from: datetime,
    floor: datetime | None,
    calendars: CalendarLookup | None,
    *,
    month_begun: bool,
) -> datetime | None:
    # Never at or before an occurrence already decided: its run id must not be reused.
    after = owed_from - _JUST_BEFORE
    if floor is not None and floor > after:
        after = floor
    if month_begun and schedule.business_day is not None and floor is not None:
        # A pause and resume or an edit must not run a begun month on a second day that a
        # calendar change (or the edit) made its n-th business day since.
        fire = business_day_following(schedule, floor, calendars, after)
    else:
        fire = next_occurrence(schedule, after, calendars)
    return fire.nominal if fire is not None else None


def _on_business_days(state: ScheduleState | None) -> bool:
    return state is not None and state.schedule.business_day is not None


def upserted(
    state: ScheduleState | None,
    schedule: Schedule,
    version: int,
    changed_at: datetime,
    now: datetime,
    *,
    limit: int | None = None,
    floor: datetime | None = None,
    calendars: CalendarLookup | None = None,
) -> Outcome:
    """A definition in force from `changed_at`: created, edited, paused or resumed.

    Every schedule event carries the whole definition, `paused` included, so one rule covers
    them all: occurrences owed before the change are decided under the old definition, and the
    new one owes its first occurrence at or after the change. Occurrences that fell inside a
    pause are not owed: pausing means "do not run these".

    At most `limit` occurrences are settled; when the old definition owes more, the outcome is
    `settling`: the old state held at the change, to be given to this function again with the
    same change. `floor` is the `Outcome.floor` a deletion of this id left, if any.
    `calendars` are the shared calendars the new definition is read with.
    """
    changed_at = _change_instant(state, changed_at, now)
    decisions: list[Decision] = []
    if state is not None:
        # An edit settles the old definition through its last decision (a pause never runs
        # what it stops): see `_settle_before`.
        settled = _settle_before(state, changed_at, now, limit, edit=not schedule.paused)
        if settled.settling:
            return settled
        decisions = settled.decisions
        assert settled.state is not None
        floor = _later(floor, settled.state.last_decided_nominal)
    new_state = ScheduleState(
        schedule=schedule,
        version=version,
        next_nominal=_first_owed(
            schedule, changed_at, floor, calendars, month_begun=_on_business_days(state)
        ),
        last_decided_nominal=floor,
        rerun=None if state is None else state.rerun,
        reruns_done=() if state is None else state.reruns_done,
        calendars=calendars,
    )
    return Outcome(new_state, decisions)


def deleted(
    state: ScheduleState, changed_at: datetime, now: datetime, *, limit: int | None = None
) -> Outcome:
    """The schedule is gone from `changed_at`; occurrences owed before it are still decided.

    `limit` bounds the settlement as in `upserted`. Once settled, the outcome has no state and
    carries the schedule's `floor`.
    """
    settled = _settle_before(state, _change_instant(state, changed_at, now), now, limit, edit=False)
    if settled.settling:
        return settled
    assert settled.state is not None
    return Outcome(None, settled.decisions, floor=settled.state.last_decided_nominal)


def _change_instant(state: ScheduleState | None, changed_at: datetime, now: datetime) -> datetime:
    """When a change takes effect: never after `now`, nor after the bound a slice already held."""
    instant = _in_force_from(changed_at, now)
    if state is not None and state.settle_before is not None:
        instant = min(instant, state.settle_before)
    return instant


def _held_at(changed_at: datetime) -> datetime:
    """`changed_at` up to a whole millisecond, as `settle_before` is stored (timestamp-millis):
    the same bound for whole-millisecond nominal instants, and after a restore as before it."""
    below = changed_at.microsecond % 1000
    return changed_at if below == 0 else changed_at + timedelta(microseconds=1000 - below)


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return a if b is None else b
    return max(a, b)


def _settle_before(
    state: ScheduleState, changed_at: datetime, now: datetime, limit: int | None, *, edit: bool
) -> Outcome:
    """Decide up to `limit` occurrences the current definition owes before `changed_at`.

    Bounded on the nominal instant, not the jittered one: an occurrence owed under the old
    definition is decided now even if its jitter would have started it after the change. When
    some remain owed, the state returned is held at `changed_at` (`settling`). A roll to an
    earlier business day may have decided occurrences after the change, and the new definition
    owes only after the last decided: an `edit` also decides those between (at once, early), so
    none is lost; a pause or a delete never runs them.
    """
    until = changed_at - _JUST_BEFORE
    if edit and state.last_decided_nominal is not None:
        until = max(until, state.last_decided_nominal)
    resumed = replace(state, settle_before=None) if state.settling else state
    settled = _decide(resumed, until, now, limit, jittered=False)
    rest = settled.state
    assert rest is not None
    first = rest.first_undecided
    if rest.paused or first is None or first > until:
        return settled
    return Outcome(replace(rest, settle_before=_held_at(changed_at)), settled.decisions)


def decide_due(
    state: ScheduleState,
    until: datetime,
    now: datetime,
    limit: int | None,
) -> Outcome:
    """Decide the occurrences whose fire instant is at or before `until`, oldest first.

    `limit` bounds how many are decided in one call, so one schedule's backlog cannot hold up
    everyone else's on-time fires; the rest stay pending in the returned state.
    """
    return _decide(state, until, now, limit, jittered=True)


def decide_ahead(state: ScheduleState) -> Outcome | None:
    """Decide `state`'s next occurrence as if at its due instant, before that instant comes.

    A herd's decisions can then be made in idle time; at the fire, `holds_at` tells whether this
    is exactly what `decide_due` would decide then. `None` when nothing is due.
    """
    due = state.due_at
    if due is None:
        return None
    return decide_due(state, until=due, now=due, limit=1)


def holds_at(ahead: Outcome, now: datetime) -> bool:
    """Whether `decide_due(state, until=now, now=now)` decides `ahead` (from `decide_ahead`).

    It does when the one occurrence is still on time at `now` (within the misfire grace and the
    catch-up window, so no skip rule applies) and the next one is not due yet.
    """
    if len(ahead.decisions) != 1 or ahead.state is None:
        return False
    decision = ahead.decisions[0]
    if decision.action is not Action.FIRE or now - decision.fire_at > MISFIRE_GRACE:
        return False
    window = ahead.state.schedule.catchup_window
    if window is not None and now - (decision.moved_to or decision.nominal) > window:
        return False
    following = ahead.state.due_at
    return following is None or following > now


def _decide(
    state: ScheduleState, until: datetime, now: datetime, limit: int | None, *, jittered: bool
) -> Outcome:
    schedule, schedule_id = state.schedule, state.schedule_id
    if state.paused or state.settling:
        return Outcome(state, [])
    decisions: list[Decision] = []
    current = state
    # Each state's `due_at` is the fire instant of its next occurrence: stepping through states
    # computes every occurrence's jitter hash once, the one of the returned state included.
    while limit is None or len(decisions) < limit:
        picked = _next_to_decide(current, jittered)
        if picked is None:
            break
        nominal, verdict, fire_at = picked
        if (fire_at if jittered else nominal) > until:
            break
        successor = _successor(current, nominal)
        moved_to = verdict.moved_to
        planned_at, late_from = moved_to or nominal, fire_at
        if verdict.placed_at is not None:
            # A calendar change that moved it into the past made it late from then, not missed.
            planned_at, late_from = (
                max(planned_at, verdict.placed_at),
                max(fire_at, verdict.placed_at),
            )
        reason = verdict.skip_reason or misfire_reason(
            schedule,
            planned_at=planned_at,
            fire_at=late_from,
            following_at=successor.due_at,
            until=until,
            now=now,
        )
        if reason is None and schedule.max_runs is not None:
            successor = _counted(successor)
        decisions.append(
            Decision(
                run_id=run_id(schedule_id, nominal),
                schedule_id=schedule_id,
                nominal=nominal,
                fire_at=fire_at,
                action=Action.SKIP if reason else Action.FIRE,
                reason=reason,
                moved_to=moved_to,
            )
        )
        current = successor
    return Outcome(current, decisions)


def _next_to_decide(
    state: ScheduleState, jittered: bool
) -> tuple[datetime, Verdict, datetime] | None:
    """The occurrence due first, or (settling a change: `jittered` false) the earliest one."""
    nominal = state.due_nominal
    if nominal is None:
        return None
    assert state.due_at is not None, "an unpaused state with a next occurrence is due"
    earliest = state.first_undecided
    if jittered or earliest is None or earliest == nominal:
        return nominal, state.verdict, state.due_at
    verdict, fire_at = fire_instant(state.schedule_id, state.schedule, earliest, state.calendars)
    return earliest, verdict, fire_at


def _successor(current: ScheduleState, nominal: datetime) -> ScheduleState:
    """The state once the occurrence at `nominal` is decided (the next one not yet)."""
    schedule = current.schedule
    waiting: tuple[datetime, ...] = ()
    if schedule.roll is not None:
        cursor, waiting = after_deciding(
            schedule, current.next_nominal, current.waiting, nominal, current.calendars
        )
    else:
        following = (
            next_fire(schedule, nominal)  # `next_occurrence`'s own first step, saved per fire
            if schedule.business_day is None
            else business_day_following(schedule, nominal, current.calendars)
        )
        cursor = None if following is None else following.nominal
    # Built directly rather than with dataclasses.replace: this runs once per fire of a herd.
    return ScheduleState(
        schedule,
        current.version,
        cursor,
        _later(current.last_decided_nominal, nominal),
        rerun=current.rerun,
        reruns_done=current.reruns_done,
        runs_fired=current.runs_fired,
        waiting=waiting,
        calendars=current.calendars,
        schedule_id=current.schedule_id,
    )


def _counted(successor: ScheduleState) -> ScheduleState:
    """The state after one more fire; after the `max_runs`-th nothing is owed any more."""
    counted = replace(successor, runs_fired=successor.runs_fired + 1)
    return replace(counted, next_nominal=None, waiting=()) if counted.ran_out else counted
