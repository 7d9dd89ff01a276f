"""The ticker's own after_last_run change holds only at the version it ended (M5), pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.firing import ScheduleState
from kairos.core.schedule import Schedule
from kairos.core.schedule_lifecycle import AfterLastRun
from kairos.services.ticker.lifecycle import after_last_run_records, stale_reason
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.schedule_events import (
    IF_VERSION_HEADER,
    ScheduleDeleted,
    ScheduleUpserted,
    if_version_mark,
    read_schedule_event,
)

pytestmark = pytest.mark.unit

CODECS = make_codecs()
NOW = datetime(2027, 3, 1, tzinfo=UTC)
TRIAL = Schedule(id="ops.trial", every=timedelta(seconds=1), start_at=NOW, max_runs=2)


def _ran_out(schedule: Schedule, version: int) -> ScheduleState:
    return ScheduleState(schedule, version, next_nominal=None, runs_fired=2)


def _read(key: bytes, value: bytes | None) -> ScheduleUpserted | ScheduleDeleted:
    change = read_schedule_event(
        CODECS.schedule_event,
        key=key,
        value=value,
        partition=0,
        offset=99,
        timestamp=NOW,
        partitions=1,
    )
    assert isinstance(change, ScheduleUpserted | ScheduleDeleted)
    return change


def test_the_tickers_pause_is_marked_with_the_version_it_ended() -> None:
    ((key, value, headers),) = after_last_run_records(_ran_out(TRIAL, 41), CODECS, "t1", NOW)
    assert headers == [(IF_VERSION_HEADER, b"41")]
    assert if_version_mark(headers) == 41
    pause = _read(key, value)
    assert isinstance(pause, ScheduleUpserted) and pause.schedule.paused
    # Taken while the schedule is still at that version ...
    assert stale_reason(41, pause, _ran_out(TRIAL, 41)) is None
    # ... refused once an owner's edit (version 42) was read before it, or a delete.
    edited = ScheduleState(TRIAL.model_copy(update={"max_runs": 10}), 42, next_nominal=NOW)
    reason = stale_reason(41, pause, edited)
    assert reason is not None and "at version 42" in reason and "'ops.trial'" in reason
    gone = stale_reason(41, pause, None)
    assert gone is not None and "was deleted since" in gone


def test_the_tickers_delete_and_tombstone_are_marked_and_a_delete_of_nothing_holds() -> None:
    ending = TRIAL.model_copy(update={"after_last_run": AfterLastRun.DELETE})
    records = after_last_run_records(_ran_out(ending, 7), CODECS, "t1", NOW)
    assert [headers for *_, headers in records] == [[(IF_VERSION_HEADER, b"7")]] * 2
    delete, tombstone = (_read(key, value) for key, value, _ in records)
    assert stale_reason(7, delete, _ran_out(ending, 7)) is None
    # Its own tombstone follows the delete it took: nothing is held, nothing changes.
    assert stale_reason(7, tombstone, None) is None
    recreated = ScheduleState(ending, 9, next_nominal=NOW)
    assert stale_reason(7, delete, recreated) is not None
    assert stale_reason(7, tombstone, recreated) is not None


def test_an_unmarked_change_always_holds_and_a_malformed_mark_never_does() -> None:
    pause = _read(*after_last_run_records(_ran_out(TRIAL, 3), CODECS, "t1", NOW)[0][:2])
    assert stale_reason(None, pause, ScheduleState(TRIAL, 8, next_nominal=NOW)) is None
    assert if_version_mark(None) is None
    assert if_version_mark([("kairos-restores", b"5")]) is None
    for malformed in (b"", b"-1", b"4x", b"9" * 40, None):
        assert if_version_mark([(IF_VERSION_HEADER, malformed)]) == -1
    assert stale_reason(-1, pause, _ran_out(TRIAL, 3)) is not None
