"""Deciding ahead: an outcome decided before the fire is reused only where it is exact."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.firing import (
    ScheduleState,
    decide_ahead,
    decide_due,
    holds_at,
    upserted,
)
from kairos.core.misfire import MISFIRE_GRACE
from kairos.core.schedule import Schedule

pytestmark = pytest.mark.unit

CREATED = datetime(2027, 3, 13, 23, 30, tzinfo=UTC)


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
        fields["catchup_window"] = f"{draw(st.integers(1, 120))}s"
    return Schedule.model_validate(fields)


@settings(max_examples=400, deadline=None)
@given(
    schedule=schedules(),
    steps=st.integers(0, 3),
    late_ms=st.integers(0, 200_000),
)
def test_an_outcome_decided_ahead_is_reused_only_when_it_is_what_deciding_now_gives(
    schedule: Schedule, steps: int, late_ms: int
) -> None:
    created = upserted(None, schedule, version=7, changed_at=CREATED, now=CREATED).state
    assert created is not None
    state: ScheduleState = created
    for _ in range(steps):
        # Walk to a later occurrence, as a ticker does fire after fire.
        due = state.due_at
        if due is None:
            break
        advanced = decide_due(state, until=due, now=due, limit=None).state
        assert advanced is not None
        state = advanced
    ahead = decide_ahead(state)
    if state.due_at is None:
        assert ahead is None
        return
    assert ahead is not None
    now = state.due_at + timedelta(milliseconds=late_ms)
    exact = decide_due(state, until=now, now=now, limit=100)
    if holds_at(ahead, now):
        assert ahead == exact
    if (
        late_ms <= 1_000
        and (ahead.state is None or ahead.state.due_at is None or ahead.state.due_at > now)
        and exact.decisions[0].reason is None
    ):
        assert holds_at(ahead, now), "an on-time fire must be able to reuse its decision"


def test_a_late_fire_is_decided_again() -> None:
    schedule = Schedule(id="s", cron="0 * * * *", misfire="skip")
    state = upserted(None, schedule, version=1, changed_at=CREATED, now=CREATED).state
    assert state is not None and state.due_at is not None
    ahead = decide_ahead(state)
    assert ahead is not None
    assert holds_at(ahead, state.due_at + MISFIRE_GRACE)
    assert not holds_at(ahead, state.due_at + MISFIRE_GRACE + timedelta(milliseconds=1))
