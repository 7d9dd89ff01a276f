"""Changes settle what the old definition owed in bounded slices; deletes leave their floor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.firing import (
    Decision,
    Outcome,
    ScheduleState,
    decide_due,
    deleted,
    upserted,
)
from kairos.core.schedule import Schedule

pytestmark = pytest.mark.unit

CREATED = datetime(2027, 3, 13, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)
DAY = timedelta(days=1)


def every_second(**fields: object) -> Schedule:
    return Schedule.model_validate(
        {"id": "s", "every": "1s", "start_at": CREATED.isoformat(), **fields}
    )


def created(schedule: Schedule, at: datetime = CREATED) -> ScheduleState:
    state = upserted(None, schedule, version=1, changed_at=at, now=at).state
    assert state is not None
    return state


def settle_in_slices(
    change: object, state: ScheduleState, limit: int, now: datetime, tick: timedelta
) -> tuple[list[Decision], Outcome, int]:
    """Take the change again until it applies, as the ticker does a turn after the other."""
    decisions: list[Decision] = []
    calls = 0
    while True:
        calls += 1
        if isinstance(change, Schedule):
            outcome = upserted(state, change, 2, changed_at=CREATED + DAY, now=now, limit=limit)
        else:
            outcome = deleted(state, changed_at=CREATED + DAY, now=now, limit=limit)
        decisions += outcome.decisions
        assert len(outcome.decisions) <= limit
        if not outcome.settling:
            return decisions, outcome, calls
        assert outcome.state is not None
        state = outcome.state
        # Held: not due, and deciding it decides nothing, whatever the time.
        assert state.due_at is None
        assert decide_due(state, until=now + DAY, now=now + DAY, limit=None).decisions == []
        assert state.schedule_with_id() == every_second() and state.version == 1
        now += tick


@pytest.mark.parametrize(
    "change",
    [pytest.param(every_second(description="edited"), id="edit"), pytest.param(None, id="delete")],
)
def test_a_day_of_one_second_occurrences_settles_over_many_bounded_calls(
    change: Schedule | None,
) -> None:
    state = created(every_second())
    # The ticker sees the change, made a day after the creation, a day late: 86,400 owed.
    decisions, outcome, calls = settle_in_slices(
        change, state, limit=2_000, now=CREATED + 2 * DAY, tick=SECOND
    )

    assert calls == 44
    nominals = [d.nominal for d in decisions]
    assert nominals == [CREATED + n * SECOND for n in range(86_400)], "lost or out of order"
    assert len({d.run_id for d in decisions}) == 86_400
    last = CREATED + DAY - SECOND
    if change is None:
        assert outcome.state is None
        assert outcome.floor == last
    else:
        assert outcome.state is not None
        assert outcome.state.version == 2
        assert outcome.state.last_decided_nominal == last
        assert outcome.state.next_nominal == CREATED + DAY


def test_a_held_bound_is_kept_when_the_clock_moves_past_a_change_from_the_future() -> None:
    state = created(every_second())
    # Published by a producer whose clock is ahead: the change takes effect at the ticker's now.
    now = CREATED + 10 * SECOND
    first = upserted(state, every_second(), 2, changed_at=now + DAY, now=now, limit=4)
    assert first.settling and first.state is not None
    assert first.state.settle_before == now
    later = now + 30 * SECOND
    rest = upserted(first.state, every_second(), 2, changed_at=now + DAY, now=later, limit=100)
    nominals = [d.nominal for d in first.decisions + rest.decisions]
    assert nominals == [CREATED + n * SECOND for n in range(10)]
    assert rest.state is not None and rest.state.next_nominal == now


def test_a_held_bound_keeps_to_whole_milliseconds_as_it_is_stored() -> None:
    state = created(every_second())
    now = CREATED + timedelta(seconds=5, microseconds=1_500)
    held = upserted(state, every_second(), 2, changed_at=now, now=now, limit=1).state
    assert held is not None
    assert held.settle_before == CREATED + timedelta(seconds=5, microseconds=2_000)


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    trigger = draw(st.sampled_from(["* * * * *", "*/5 * * * *", "30 2 * * *", "every", "at"]))
    fields: dict[str, object] = {"id": "s"}
    longest_jitter_s = 300
    if trigger == "every":
        every_s = draw(st.integers(1, 90))
        fields["every"] = f"{every_s}s"
        longest_jitter_s = every_s  # the model's bound
        fields["start_at"] = CREATED.isoformat()
    elif trigger == "at":
        fields["at"] = (CREATED + timedelta(minutes=draw(st.integers(1, 30)))).isoformat()
    else:
        fields["cron"] = trigger
        fields["timezone"] = draw(st.sampled_from(["UTC", "America/New_York", "Europe/Berlin"]))
    if draw(st.booleans()):
        fields["jitter"] = f"{draw(st.integers(1, longest_jitter_s))}s"
    fields["misfire"] = draw(st.sampled_from(["all", "skip", "latest"]))
    if draw(st.booleans()):
        fields["catchup_window"] = f"{draw(st.integers(1, 7200))}s"
    fields["paused"] = draw(st.booleans()) and draw(st.booleans())
    return Schedule.model_validate(fields)


@settings(max_examples=300, deadline=None)
@given(
    old=schedules(),
    new=st.none() | schedules(),
    changed_after_s=st.integers(0, 6 * 3600),
    seen_after_s=st.integers(0, 3600),
    limit=st.integers(0, 7),
)
def test_settling_in_slices_decides_exactly_what_one_settlement_decides(
    old: Schedule, new: Schedule | None, changed_after_s: int, seen_after_s: int, limit: int
) -> None:
    state = created(old)
    changed_at = CREATED + timedelta(seconds=changed_after_s)
    now = changed_at + timedelta(seconds=seen_after_s)

    def change(current: ScheduleState, bound: int | None) -> Outcome:
        if new is None:
            return deleted(current, changed_at, now, limit=bound)
        return upserted(current, new, 2, changed_at, now, limit=bound)

    whole = change(state, None)
    assert not whole.settling
    sliced: list[Decision] = []
    current = state
    # Each slice with room settles at least one decision: a bound that is never the limit,
    # whatever was owed (6 h of a 1 s `every` is 21,600 decisions: 10,000 slices of 2 were not).
    for _ in range(len(whole.decisions) + 2):
        outcome = change(current, limit)
        sliced += outcome.decisions
        if not outcome.settling:
            break
        assert outcome.state is not None
        current = outcome.state
        assert limit > 0 or not outcome.decisions
        if limit == 0:
            # Nothing settles with no room: the change waits for a turn that has some.
            return
    assert not outcome.settling, "slices of room stopped settling before the change was settled"
    assert sliced == whole.decisions
    assert outcome.state == whole.state
    assert outcome.floor == whole.floor
    assert all(d.nominal < changed_at for d in sliced)


# -- deleted and re-created ----------------------------------------------------------------------


def test_a_re_created_schedule_continues_after_its_last_fire_before_the_delete() -> None:
    state = created(every_second())
    fired = decide_due(state, until=CREATED + 5 * SECOND, now=CREATED + 5 * SECOND, limit=None)
    assert fired.state is not None
    gone = deleted(fired.state, changed_at=CREATED + 5 * SECOND, now=CREATED + 5 * SECOND)
    assert gone.state is None and gone.floor == CREATED + 5 * SECOND
    # Re-created with a changed_at before the last fire (ticker lag, or a producer's skew).
    again = upserted(
        None, every_second(), 9, changed_at=CREATED + 2 * SECOND, now=CREATED + 6 * SECOND,
        floor=gone.floor,
    )  # fmt: skip
    assert again.state is not None
    assert again.state.next_nominal == CREATED + 6 * SECOND
    assert again.state.last_decided_nominal == CREATED + 5 * SECOND


def test_the_floor_outlives_a_re_creation_deleted_before_it_fires() -> None:
    state = created(every_second())
    fired = decide_due(state, until=CREATED + 3 * SECOND, now=CREATED + 3 * SECOND, limit=None)
    assert fired.state is not None
    first = deleted(fired.state, changed_at=CREATED + 3 * SECOND, now=CREATED + 3 * SECOND)
    again = upserted(
        None, every_second(), 5, CREATED + SECOND, CREATED + 3 * SECOND, floor=first.floor
    )
    assert again.state is not None
    second = deleted(again.state, changed_at=CREATED + 2 * SECOND, now=CREATED + 3 * SECOND)
    assert second.decisions == []
    assert second.floor == CREATED + 3 * SECOND


def test_a_never_fired_schedule_leaves_no_floor() -> None:
    gone = deleted(created(every_second()), changed_at=CREATED, now=CREATED)
    assert gone.state is None and gone.floor is None
