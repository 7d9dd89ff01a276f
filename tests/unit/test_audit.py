"""The audit's expected occurrences, its matching against runs, and its time arguments."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kairos.core.audit import (
    ExpectedOccurrence,
    FiredRun,
    HistoryEvent,
    RunEventRecord,
    changed_fields,
    expected_occurrences,
    fired_through,
)
from kairos.core.audit_report import LatenessSummary
from kairos.core.audit_verdict import verify
from kairos.core.schedule import Schedule
from kairos.core.time_arguments import TimeArgumentError, parse_time

DAY = datetime(2027, 1, 4, tzinfo=UTC)


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute, second=second)


def schedule(**fields: Any) -> Schedule:
    return Schedule.model_validate({"id": "report", "cron": "0 * * * *", **fields})


class History:
    """Builds one schedule's events in topic order, offsets counting from 0."""

    def __init__(self, schedule_id: str = "report") -> None:
        self.schedule_id = schedule_id
        self.events: list[HistoryEvent] = []

    def change(self, when: datetime, definition: Schedule | None, change: str) -> History:
        self.events.append(
            HistoryEvent(
                schedule_id=self.schedule_id,
                partition=0,
                offset=len(self.events),
                change=change,
                definition=definition,
                changed_at=when,
                changed_by="alice",
            )
        )
        return self

    def upsert(self, when: datetime, **fields: Any) -> History:
        return self.change(when, schedule(id=self.schedule_id, **fields), "upserted")

    def delete(self, when: datetime) -> History:
        return self.change(when, None, "deleted")


def nominals(history: History, start: datetime, end: datetime) -> list[datetime]:
    owed = expected_occurrences(history.events, start, end)
    return [o.nominal for o in owed[history.schedule_id]]


def test_a_schedule_owes_its_occurrences_from_its_creation_within_the_window() -> None:
    history = History().upsert(at(2, 30))
    assert nominals(history, at(0), at(6)) == [at(3), at(4), at(5)]
    # The window is half-open on nominal instants, and may start after the creation.
    assert nominals(history, at(4), at(5)) == [at(4)]


def test_an_occurrence_exactly_at_the_change_is_owed() -> None:
    assert nominals(History().upsert(at(3)), at(0), at(5)) == [at(3), at(4)]


def test_a_cron_change_owes_the_old_definition_before_it_and_the_new_one_after() -> None:
    history = History().upsert(at(0, 30)).upsert(at(3, 10), cron="*/30 * * * *")
    owed = expected_occurrences(history.events, at(0), at(5))["report"]
    assert [(o.nominal, o.version) for o in owed] == [
        (at(1), 0),
        (at(2), 0),
        (at(3), 0),
        (at(3, 30), 1),
        (at(4), 1),
        (at(4, 30), 1),
    ]


def test_a_change_the_ticker_saw_late_owes_the_old_definition_through_its_last_fire() -> None:
    history = History().upsert(at(0, 30)).upsert(at(3, 10), cron="*/30 * * * *")
    # The ticker was down at 03:10 and fired 04:00 under version 0 before it read the change.
    owed = expected_occurrences(history.events, at(0), at(5), {("report", 0): at(4)})
    assert [(o.nominal, o.version) for o in owed["report"]] == [
        (at(1), 0),
        (at(2), 0),
        (at(3), 0),
        (at(4), 0),
        (at(4, 30), 1),
    ]


def test_occurrences_inside_a_pause_are_not_owed() -> None:
    history = (
        History()
        .upsert(at(0, 30))
        .change(at(1, 30), schedule(paused=True), "paused")
        .change(at(4, 15), schedule(), "resumed")
    )
    assert nominals(history, at(0), at(7)) == [at(1), at(5), at(6)]


def test_a_deleted_schedule_owes_nothing_after_the_delete_until_it_is_created_again() -> None:
    history = History().upsert(at(0, 30)).delete(at(2, 30)).upsert(at(4, 30))
    assert nominals(history, at(0), at(7)) == [at(1), at(2), at(5), at(6)]


def test_a_tombstone_alone_deletes_at_its_timestamp() -> None:
    history = History().upsert(at(0, 30)).change(at(2, 30), None, "tombstone")
    assert nominals(history, at(0), at(7)) == [at(1), at(2)]


def test_bounds_and_one_shot_schedules_are_honoured() -> None:
    bounded = History().upsert(at(0, 30), start_at=at(2), end_at=at(4))
    assert nominals(bounded, at(0), at(7)) == [at(2), at(3), at(4)]
    once = History().upsert(at(0, 30), cron=None, at=at(3, 15))
    assert nominals(once, at(0), at(7)) == [at(3, 15)]


def test_a_spring_forward_gap_moves_a_fixed_time_job_to_the_jump() -> None:
    history = History().upsert(
        datetime(2027, 3, 13, tzinfo=UTC), cron="30 2 * * *", timezone="America/New_York"
    )
    owed = nominals(history, datetime(2027, 3, 13, tzinfo=UTC), datetime(2027, 3, 16, tzinfo=UTC))
    # 02:30 does not exist on 14 March: it runs at 03:00 EDT (07:00Z) instead.
    assert owed == [
        datetime(2027, 3, 13, 7, 30, tzinfo=UTC),
        datetime(2027, 3, 14, 7, 0, tzinfo=UTC),
        datetime(2027, 3, 15, 6, 30, tzinfo=UTC),
    ]


def test_a_change_after_the_window_does_not_alter_it() -> None:
    before = History().upsert(at(0, 30))
    after = History().upsert(at(0, 30)).upsert(at(9), cron="*/5 * * * *").delete(at(10))
    assert nominals(before, at(0), at(6)) == nominals(after, at(0), at(6))


def test_a_schedule_created_long_before_a_recent_window_is_audited_quickly() -> None:
    # Every second for two years: walking every occurrence before the window would take ages.
    history = (
        History()
        .change(
            at(0) - timedelta(days=730),
            schedule(cron=None, every="1s", start_at=at(0) - timedelta(days=730)),
            "upserted",
        )
        .change(at(0) - timedelta(days=365), schedule(cron="* * * * *"), "upserted")
    )
    assert nominals(history, at(5), at(5, 3)) == [at(5), at(5, 1), at(5, 2)]


def test_jitter_moves_the_due_instant_not_the_nominal_one() -> None:
    owed = expected_occurrences(History().upsert(at(0, 30), jitter="10m").events, at(0), at(3))
    assert [o.nominal for o in owed["report"]] == [at(1), at(2)]
    assert all(o.nominal <= o.due_at < o.nominal + timedelta(minutes=10) for o in owed["report"])


def test_every_schedule_met_has_an_entry() -> None:
    events = History("gone").upsert(at(0, 30)).delete(at(0, 40)).events
    assert expected_occurrences(events, at(1), at(3)) == {"gone": []}


# -- matching ----------------------------------------------------------------------------------


def occurrence(hour: int, schedule_id: str = "report") -> ExpectedOccurrence:
    return ExpectedOccurrence(
        f"{schedule_id}@{at(hour):%Y-%m-%dT%H:%M:%SZ}", schedule_id, at(hour), at(hour), 0
    )


def fire(
    hour: int, lateness_ms: int = 5, offset: int = 0, attempt: int = 1, schedule_id: str = "report"
) -> FiredRun:
    nominal = at(hour)
    return FiredRun(
        run_id=f"{schedule_id}@{nominal:%Y-%m-%dT%H:%M:%SZ}",
        schedule_id=schedule_id,
        nominal=nominal,
        due_at=nominal,
        fired_at=nominal + timedelta(milliseconds=lateness_ms),
        lateness_ms=lateness_ms,
        attempt=attempt,
        ticker_instance="a",
        schedule_offset=0,
        partition=0,
        offset=offset,
    )


def event(hour: int, kind: str, offset: int = 0, reason: str | None = None) -> RunEventRecord:
    nominal = at(hour)
    return RunEventRecord(
        run_id=f"report@{nominal:%Y-%m-%dT%H:%M:%SZ}",
        schedule_id="report",
        kind=kind,
        attempt=0 if kind == "skipped" else 1,
        source="ticker-a" if kind == "skipped" else "executor-1",
        nominal=nominal,
        fired_at=nominal,
        started_at=None,
        finished_at=None,
        reason=reason,
        next_attempt_at=None,
        partition=0,
        offset=offset,
    )


def test_verify_classifies_every_expected_occurrence() -> None:
    expected = {"report": [occurrence(h) for h in range(1, 7)]}
    fired = [
        fire(1, lateness_ms=10),
        fire(2, lateness_ms=20, offset=1),
        fire(2, lateness_ms=900, offset=2),  # committed twice: a duplicate
        fire(3, lateness_ms=30, offset=3),
        fire(3, attempt=2, offset=4),  # an executor's retry request: neither fire nor duplicate
        fire(8),  # outside the window
        fire(4, schedule_id="other"),  # not owed by anything in the history
    ]
    events = [
        event(1, "started"),
        event(1, "succeeded", offset=1),
        event(2, "failed", offset=2),
        event(4, "skipped", offset=3, reason="missed (misfire policy skip)"),
    ]
    report = verify(
        expected,
        fired,
        events,
        start=at(0),
        end=at(7),
        as_of=at(6, 0, 5),
        grace=timedelta(seconds=10),
    )
    other, audit = report.schedules  # in schedule id order
    assert (audit.schedule_id, other.schedule_id) == ("report", "other")
    counts = (audit.expected, audit.fired, audit.skipped, audit.pending, audit.lost)
    assert counts == (6, 3, 1, 1, 1)
    assert [o.run_id for o in audit.lost_runs] == ["report@2027-01-04T05:00:00Z"]
    assert audit.skipped_runs == (("report@2027-01-04T04:00:00Z", "missed (misfire policy skip)"),)
    assert audit.duplicate_runs == {"report@2027-01-04T02:00:00Z": 1}
    assert audit.lateness_ms == (10, 20, 30)  # the first commit's lateness
    assert audit.outcomes == {"failed": 1, "succeeded": 1, "unreported": 1}
    assert other.unexpected_runs == ("other@2027-01-04T04:00:00Z",)
    assert (report.total("expected"), report.total("lost"), report.total("duplicates")) == (6, 1, 1)
    assert not report.ok


def test_verify_is_ok_when_every_occurrence_fired_once_or_was_skipped() -> None:
    expected = {"report": [occurrence(1), occurrence(2)]}
    report = verify(
        expected,
        [fire(1)],
        [event(2, "skipped")],
        start=at(0),
        end=at(3),
        as_of=at(12),
        grace=timedelta(0),
    )
    assert report.ok
    assert report.outcomes == {"unreported": 1}


def test_verify_for_one_schedule_ignores_the_others() -> None:
    expected = {"report": [occurrence(1)], "other": [occurrence(1, "other")]}
    report = verify(
        expected,
        [fire(5, schedule_id="other")],
        [],
        start=at(0),
        end=at(7),
        as_of=at(12),
        grace=timedelta(0),
        schedule_id="report",
    )
    assert [a.schedule_id for a in report.schedules] == ["report"]
    assert report.total("lost") == 1


def test_fired_through_is_the_latest_fire_per_version_retries_aside() -> None:
    fires = [fire(3), fire(1, offset=1), fire(5, attempt=2, offset=2), fire(2, schedule_id="x")]
    assert fired_through(fires) == {("report", 0): at(3), ("x", 0): at(2)}


def test_lateness_percentiles_use_the_nearest_rank() -> None:
    summary = LatenessSummary.of(range(1, 101))
    assert summary == LatenessSummary(count=100, p50=50, p90=90, p99=99, max=100, min=1)
    assert LatenessSummary.of([]) is None
    assert LatenessSummary.of([7]) == LatenessSummary(1, 7, 7, 7, 7, 7)


# -- arguments and diffs -----------------------------------------------------------------------


NOW = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("2027-03-14T03:00:00-04:00", NOW, id="iso-with-offset"),
        pytest.param("2027-03-14T07:00:00Z", NOW, id="iso-zulu"),
        pytest.param("now", NOW, id="now"),
        pytest.param("-10m", NOW - timedelta(minutes=10), id="relative"),
        pytest.param("-1h30m", NOW - timedelta(minutes=90), id="relative-compound"),
        pytest.param("+2h", NOW + timedelta(hours=2), id="after-now"),
    ],
)
def test_time_arguments(text: str, expected: datetime) -> None:
    assert parse_time(text, NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        "2027-03-14T07:00:00",
        "yesterday",
        "-10",
        "-10y",
        pytest.param("-99999999d", id="before-year-1"),
        pytest.param("-" + "9" * 40 + "w", id="past-any-timedelta"),
        pytest.param("+99999999d", id="after-year-9999"),
        pytest.param("0001-01-01T00:00:00+01:00", id="before-year-1-in-utc"),
    ],
)
def test_unusable_time_arguments_say_how_to_write_one(text: str) -> None:
    with pytest.raises(TimeArgumentError, match="ISO-8601 instant with an offset"):
        parse_time(text, NOW)


def test_changed_fields_lists_before_and_after() -> None:
    old, new = schedule(), schedule(cron="*/5 * * * *", owner="payments")
    assert changed_fields(old, new) == {
        "cron": ("0 * * * *", "*/5 * * * *"),
        "owner": (None, "payments"),
    }
    assert changed_fields(old, old) == {}
    assert changed_fields(None, old)["cron"] == (None, "0 * * * *")
