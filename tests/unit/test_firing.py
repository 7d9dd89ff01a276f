"""The ticker's decisions: owed occurrences, changes, misfire policies, backlog limits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.firing import (
    Action,
    ScheduleState,
    decide_due,
    deleted,
    upserted,
)
from kairos.core.misfire import MISFIRE_GRACE
from kairos.core.schedule import Schedule

T0 = datetime(2027, 1, 4, 12, 0, 30, tzinfo=UTC)


def minutely(**fields: object) -> Schedule:
    return Schedule.model_validate({"id": "report", "cron": "* * * * *", **fields})


def created(schedule: Schedule, at: datetime = T0) -> ScheduleState:
    outcome = upserted(None, schedule, version=1, changed_at=at, now=at)
    assert outcome.decisions == []
    assert outcome.state is not None
    return outcome.state


def at(minute: int, second: int = 0) -> datetime:
    return datetime(2027, 1, 4, 12, minute, second, tzinfo=UTC)


def test_a_new_schedule_owes_occurrences_from_its_creation() -> None:
    state = created(minutely())
    assert state.next_nominal == at(1)
    assert state.due_at == at(1)


def test_due_occurrences_fire_once_in_order_and_advance() -> None:
    state = created(minutely())
    outcome = decide_due(state, until=at(3), now=at(3), limit=None)
    assert [d.run_id for d in outcome.decisions] == [
        "report@2027-01-04T12:01:00Z",
        "report@2027-01-04T12:02:00Z",
        "report@2027-01-04T12:03:00Z",
    ]
    assert all(d.action is Action.FIRE for d in outcome.decisions)
    assert outcome.state is not None
    assert outcome.state.next_nominal == at(4)
    again = decide_due(outcome.state, until=at(3), now=at(3), limit=None)
    assert again.decisions == []


def test_limit_leaves_the_backlog_pending() -> None:
    state = created(minutely())
    first = decide_due(state, until=at(10), now=at(10), limit=4)
    assert len(first.decisions) == 4
    assert first.state is not None
    rest = decide_due(first.state, until=at(10), now=at(10), limit=None)
    assert [d.nominal for d in first.decisions + rest.decisions] == [at(m) for m in range(1, 11)]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("all", ["fire"] * 5, id="all-fires-every-missed-occurrence"),
        pytest.param("skip", ["skip"] * 4 + ["fire"], id="skip-records-missed-fires-on-time"),
        pytest.param("latest", ["skip"] * 4 + ["fire"], id="latest-fires-only-the-newest"),
    ],
)
def test_misfire_policies_after_downtime(policy: str, expected: list[str]) -> None:
    state = created(minutely(misfire=policy))
    # Down from 12:00:30 to 12:05:20: 12:01..12:04 are misfires, 12:05 is within the grace.
    now = at(5, 20)
    outcome = decide_due(state, until=now, now=now, limit=None)
    assert [d.action.value for d in outcome.decisions] == expected
    assert [d.nominal for d in outcome.decisions] == [at(m) for m in range(1, 6)]
    assert all(d.reason for d in outcome.decisions if d.action is Action.SKIP)


def test_skip_policy_fires_an_occurrence_within_the_grace() -> None:
    state = created(minutely(cron="*/10 * * * *", misfire="skip"))
    now = at(10) + MISFIRE_GRACE
    outcome = decide_due(state, until=now, now=now, limit=None)
    assert [(d.nominal, d.action) for d in outcome.decisions] == [(at(10), Action.FIRE)]
    late = decide_due(state, until=now, now=now + timedelta(milliseconds=1), limit=None)
    assert [d.action for d in late.decisions] == [Action.SKIP]


def test_catchup_window_skips_older_occurrences_whatever_the_policy() -> None:
    state = created(minutely(catchup_window="3m"))
    now = at(8)
    outcome = decide_due(state, until=now, now=now, limit=None)
    fired = [d.nominal for d in outcome.decisions if d.action is Action.FIRE]
    assert fired == [at(5), at(6), at(7), at(8)]
    assert len(outcome.decisions) == 8


def test_an_edit_first_decides_what_the_old_version_owed() -> None:
    state = created(minutely())
    edited = minutely(cron="*/10 * * * *")
    # The ticker sees the edit (made at 12:03:30) only at 12:04:00.
    outcome = upserted(state, edited, version=2, changed_at=at(3, 30), now=at(4))
    assert [d.nominal for d in outcome.decisions] == [at(1), at(2), at(3)]
    assert outcome.state is not None
    assert outcome.state.next_nominal == at(10)
    assert outcome.state.version == 2


def test_an_edit_never_reuses_an_already_decided_occurrence() -> None:
    state = created(minutely())
    fired = decide_due(state, until=at(2), now=at(2), limit=None).state
    assert fired is not None
    # The edit was made at 12:01:30 but consumed after 12:02 already fired.
    outcome = upserted(fired, minutely(description="x"), version=2, changed_at=at(1, 30), now=at(2))
    assert outcome.decisions == []
    assert outcome.state is not None
    assert outcome.state.next_nominal == at(3)


def test_pause_stops_runs_and_resume_owes_only_what_follows() -> None:
    state = created(minutely())
    pause = upserted(state, minutely(paused=True), version=2, changed_at=at(2, 30), now=at(2, 30))
    assert [d.nominal for d in pause.decisions] == [at(1), at(2)]
    assert pause.state is not None
    assert pause.state.due_at is None
    assert decide_due(pause.state, until=at(9), now=at(9), limit=None).decisions == []
    resume = upserted(pause.state, minutely(), version=3, changed_at=at(9, 10), now=at(9, 10))
    assert resume.decisions == []
    assert resume.state is not None
    assert resume.state.next_nominal == at(10)


def test_delete_decides_what_was_owed_and_forgets_the_schedule() -> None:
    outcome = deleted(created(minutely()), changed_at=at(2, 10), now=at(3))
    assert outcome.state is None
    assert [d.nominal for d in outcome.decisions] == [at(1), at(2)]


def test_a_one_shot_schedule_fires_once_then_has_nothing_pending() -> None:
    state = created(Schedule(id="once", at=at(5)))
    outcome = decide_due(state, until=at(6), now=at(6), limit=None)
    assert [d.run_id for d in outcome.decisions] == ["once@2027-01-04T12:05:00Z"]
    assert outcome.state is not None
    assert outcome.state.due_at is None


def test_jitter_delays_the_fire_but_not_the_run_identity() -> None:
    state = created(minutely(jitter="30s"))
    due_at = state.due_at
    assert due_at is not None
    assert at(1) <= due_at < at(1) + timedelta(seconds=30)
    assert (
        decide_due(
            state, until=due_at - timedelta(milliseconds=1), now=due_at, limit=None
        ).decisions
        == []
    )
    outcome = decide_due(state, until=due_at, now=due_at, limit=None)
    assert [(d.run_id, d.fire_at) for d in outcome.decisions] == [
        ("report@2027-01-04T12:01:00Z", due_at)
    ]


def test_skipped_occurrences_are_not_runs_for_max_runs() -> None:
    state = created(minutely(max_runs=1, misfire="skip"))
    late = decide_due(state, until=at(2), now=at(2) + MISFIRE_GRACE * 2, limit=None)
    assert [d.action for d in late.decisions] == [Action.SKIP, Action.SKIP]
    assert late.state is not None and late.state.runs_fired == 0 and not late.state.ran_out


def test_after_the_last_of_max_runs_nothing_is_due_until_a_change() -> None:
    state = created(minutely(max_runs=2))
    first = decide_due(state, until=at(1), now=at(1), limit=None)
    assert first.state is not None and first.state.runs_fired == 1
    assert not first.state.ran_out and first.state.next_nominal == at(2)
    last = decide_due(first.state, until=at(5), now=at(5, 0), limit=None)
    fires = [d.nominal for d in last.decisions if d.action is Action.FIRE]
    assert fires == [at(2)] and last.state is not None
    assert last.state.ran_out and last.state.next_nominal is None and last.state.due_at is None
    resumed = upserted(last.state, minutely(max_runs=2), version=2, changed_at=at(6), now=at(6))
    assert resumed.state is not None and resumed.state.runs_fired == 0
    assert resumed.state.next_nominal == at(6)  # owed from the change, as any resume
