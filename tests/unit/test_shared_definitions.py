"""Held states share one definition object per template and keep their own ids: every run id,
jitter offset and stored record is still the schedule's own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.calendar import fire_instant_with_jitter
from kairos.core.definitions import ANONYMOUS_ID
from kairos.core.firing import ScheduleState, decide_due, upserted
from kairos.core.run_id import run_id
from kairos.core.schedule import JobSpec, Schedule
from kairos.streams.state.changelog import progress_record, state_from_records, state_record
from kairos.streams.wire.codec import make_codecs

T0 = datetime(2027, 1, 4, 12, 0, 30, tzinfo=UTC)
CODECS = make_codecs()


def templated(schedule_id: str, **fields: object) -> Schedule:
    return Schedule.model_validate(
        {
            "id": schedule_id,
            "cron": "* * * * *",
            "jitter": "1m",
            "labels": {"team": "billing"},
            "job": {"kind": "http", "url": "https://billing.internal/settle"},
            **fields,
        }
    )


def created(schedule: Schedule) -> ScheduleState:
    state = upserted(None, schedule, version=1, changed_at=T0, now=T0).state
    assert state is not None
    return state


def test_schedules_equal_but_for_the_id_share_one_definition_and_fire_as_themselves() -> None:
    schedules = [templated(f"settle-{n}") for n in range(50)]
    states = [created(schedule) for schedule in schedules]

    assert len({id(state.schedule) for state in states}) == 1
    assert states[0].schedule.id == ANONYMOUS_ID
    until = T0 + timedelta(minutes=3)
    for schedule, state in zip(schedules, states, strict=True):
        assert state.schedule_id == schedule.id
        assert state.schedule_with_id() == schedule
        decisions = decide_due(state, until=until, now=until, limit=None).decisions
        assert [d.run_id for d in decisions] == [run_id(schedule.id, d.nominal) for d in decisions]
        assert {d.schedule_id for d in decisions} == {schedule.id}
        # The jitter is the schedule's own: the one its full definition gives.
        assert [d.fire_at for d in decisions] == [
            fire_instant_with_jitter(schedule.id, schedule, d.nominal) for d in decisions
        ]
    # The schedules' jitters differ, as a herd's should.
    assert len({state.due_at for state in states}) > 40


@pytest.mark.parametrize(
    "fields",
    [
        {"job": JobSpec.model_validate({"kind": "http", "url": "https://billing.internal/undo"})},
        {"labels": {"team": "ledger"}},
        {"timezone": "Europe/Berlin"},
        {"start_at": "2027-01-04T13:00:00+01:00"},
    ],
    ids=["job-params", "labels", "timezone", "start-at"],
)
def test_a_definition_differing_in_any_field_is_not_shared(fields: dict[str, object]) -> None:
    first = created(templated("settle-1"))
    other = created(templated("settle-2", **fields))

    assert other.schedule is not first.schedule
    assert other.schedule_with_id() == templated("settle-2", **fields)


def test_a_state_and_its_definition_must_name_one_schedule() -> None:
    shared = created(templated("settle-1")).schedule
    with pytest.raises(ValueError, match="needs its schedule_id"):
        ScheduleState(shared, version=1, next_nominal=T0)
    with pytest.raises(ValueError, match="'settle-2' given the definition of 'settle-1'"):
        ScheduleState(templated("settle-1"), 1, T0, schedule_id="settle-2")


def test_the_stored_records_carry_the_schedules_own_id_and_read_back_shared() -> None:
    states = [created(templated(f"settle-{n}")) for n in range(3)]

    read = []
    for state in states:
        definition = CODECS.ticker_state.decode(CODECS.ticker_state.encode(state_record(state)))
        progress = CODECS.ticker_progress.decode(
            CODECS.ticker_progress.encode(progress_record(state))
        )
        assert definition["schedule_id"] == definition["definition"]["id"] == state.schedule_id
        assert progress["schedule_id"] == state.schedule_id
        read.append(state_from_records(definition, progress))

    assert read == states
    assert [s.schedule_id for s in read if s is not None] == ["settle-0", "settle-1", "settle-2"]
    assert len({id(s.schedule) for s in read if s is not None}) == 1
