"""Re-runs, pure: which runs a request owes, in slices, once; how the audit counts them."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kairos.core.audit import (
    FiredRun,
    HistoryEvent,
    RequestedRerun,
    expected_occurrences,
    fired_through,
    stopped_spans,
)
from kairos.core.audit_report import AuditReport, Verdict
from kairos.core.audit_verdict import verify
from kairos.core.firing import ScheduleState
from kairos.core.rerun_request import RerunKind, RerunProgress, RerunRequest
from kairos.core.reruns import REMEMBERED_REQUESTS, take_rerun
from kairos.core.run_id import RunIdError, parse_run_id, rerun_id, rerun_request_of, run_id
from kairos.core.schedule import OverlapPolicy, Schedule
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import rerun_record
from kairos.streams.wire.schedule_events import RejectedEvent, RerunRequested, read_schedule_event

CODECS = make_codecs()

DAY = datetime(2027, 3, 14, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def at(hour: int, minute: int = 0) -> datetime:
    return DAY.replace(hour=hour, minute=minute)


ONE, FOUR = at(1), at(4)
SCHEDULE = Schedule(id="report", cron="0 * * * *", timezone="Europe/Paris")


def request(
    request_id: str = "incident-1",
    start: datetime = ONE,
    end: datetime = FOUR,
    kind: RerunKind = RerunKind.BACKFILL,
) -> RerunRequest:
    return RerunRequest(
        request_id, "report", kind, start, end, OverlapPolicy.QUEUE, "ops", at(12), "incident"
    )


def state() -> ScheduleState:
    return ScheduleState(SCHEDULE, version=0, next_nominal=at(13))


def test_a_rerun_id_carries_the_request_and_reads_back_as_its_occurrence() -> None:
    rerun = rerun_id("report", at(2), "incident-1")
    assert rerun == "report@2027-03-14T02:00:00Z~rerun-incident-1"
    assert parse_run_id(rerun) == ("report", at(2))
    assert rerun_request_of(rerun) == "incident-1"
    assert rerun_request_of(run_id("report", at(2))) is None
    with pytest.raises(RunIdError, match="re-run request id"):
        parse_run_id("report@2027-03-14T02:00:00Z~rerun-bad id")


def test_a_backfill_owes_every_occurrence_from_start_through_end() -> None:
    taken = take_rerun(state(), request(), at(12))
    assert [d.nominal for d in taken.decisions] == [at(1), at(2), at(3), at(4)]
    assert all(d.fire_at == at(12) and d.rerun == request() for d in taken.decisions)
    assert taken.state.reruns_done == ("incident-1",)
    assert taken.state.rerun is None
    assert taken.state.next_nominal == at(13), "the schedule's own firing is untouched"


def test_a_request_an_older_ticker_fired_in_part_goes_on_after_its_last_fire() -> None:
    """Tickers before 0.1.0 fired a request in slices and remembered how far it got."""
    part_way = replace(state(), rerun=RerunProgress("incident-1", at(3)))
    rest = take_rerun(part_way, request(), at(12, 1))
    assert [d.nominal for d in rest.decisions] == [at(4)]
    assert rest.state.rerun is None and rest.state.reruns_done == ("incident-1",)


def test_a_retried_request_fires_nothing_and_only_recent_ones_are_remembered() -> None:
    done = take_rerun(state(), request(), at(12)).state
    again = take_rerun(done, request(), at(12))
    assert again.already_done and again.decisions == []
    crowded = replace(done, reruns_done=tuple(f"r{n}" for n in range(REMEMBERED_REQUESTS)))
    after = take_rerun(crowded, request(), at(12)).state
    assert len(after.reruns_done) == REMEMBERED_REQUESTS
    assert after.reruns_done[-1] == "incident-1" and "r0" not in after.reruns_done


def test_a_trigger_owes_one_run_for_its_instant_even_off_the_schedule() -> None:
    trigger = request("now", at(2, 17), at(2, 17), RerunKind.TRIGGER)
    taken = take_rerun(state(), trigger, at(12))
    assert [d.run_id for d in taken.decisions] == ["report@2027-03-14T02:17:00Z~rerun-now"]


# -- the audit ---------------------------------------------------------------------------------


def fire(run: str, nominal: datetime, offset: int) -> FiredRun:
    # A re-run is fired when asked (at 12:00 in these tests), a scheduled run when due.
    fired_at = at(12) + SECOND if rerun_request_of(run) else nominal + SECOND
    return FiredRun(
        run_id=run,
        schedule_id="report",
        nominal=nominal,
        due_at=fired_at - SECOND,
        fired_at=fired_at,
        lateness_ms=1000,
        attempt=1,
        ticker_instance="ticker-a",
        schedule_offset=0,
        partition=0,
        offset=offset,
    )


def audit(fired: list[FiredRun], reruns: list[RequestedRerun]) -> AuditReport:
    history = [HistoryEvent("report", 0, 0, "upserted", SCHEDULE, at(0, 30))]
    owed = expected_occurrences(history, at(0), at(6), fired_through(fired), reruns=reruns)
    return verify(
        owed,
        fired,
        [],
        start=at(0),
        end=at(6),
        as_of=at(12, 30),
        grace=10 * SECOND,
        stops=stopped_spans(history),
    )


def test_a_backfill_of_a_window_with_losses_turns_it_green_without_a_duplicate() -> None:
    scheduled = [fire(run_id("report", at(h)), at(h), n) for n, h in enumerate((1, 4, 5))]
    lossy = audit(scheduled, [])
    assert lossy.verdict is Verdict.BREACH and lossy.total("lost") == 2  # 02:00, 03:00
    backfill = RequestedRerun(0, 1, request(), at(12))
    reruns = [fire(rerun_id("report", at(h), "incident-1"), at(h), 10 + h) for h in (1, 2, 3, 4)]
    healed = audit([*scheduled, *reruns], [backfill])
    assert healed.verdict is Verdict.HOLDS, healed.findings
    assert healed.total("lost") == 0 and healed.total("duplicates") == 0
    assert healed.total("recovered") == 2 and healed.total("reruns") == 4
    assert healed.total("unexpected") == 0


def test_a_requested_rerun_never_fired_is_lost_and_an_unrequested_one_is_unexpected() -> None:
    scheduled = [fire(run_id("report", at(h)), at(h), h) for h in range(1, 6)]
    unfired = audit(scheduled, [RequestedRerun(0, 1, request(), at(12))])
    assert unfired.total("lost") == 4
    forged = fire(rerun_id("report", at(2), "nobody-asked"), at(2), 20)
    unasked = audit([*scheduled, forged], [])
    assert unasked.total("unexpected") == 1 and unasked.verdict is Verdict.BREACH


def test_a_rerun_request_before_the_schedule_existed_owes_nothing() -> None:
    early = RequestedRerun(0, 0, request(), at(12))
    history = [HistoryEvent("report", 0, 1, "upserted", SCHEDULE, at(0, 30))]
    owed = expected_occurrences(history, at(0), at(6), reruns=[early])
    assert all(rerun_request_of(o.run_id) is None for o in owed["report"])


# -- on the wire -------------------------------------------------------------------------------


def _read(key: bytes, event: dict[str, object], partition: int) -> object:
    return read_schedule_event(
        CODECS.schedule_event,
        key=key,
        value=CODECS.schedule_event.encode(event),
        partition=partition,
        offset=9,
        timestamp=at(12),
        partitions=12,
    )


def _rerun_event(request_id: str = "incident-1", **rerun: object) -> dict[str, object]:
    return {
        "schedule_id": "report",
        "event_id": uuid.uuid4(),
        "change": "rerun_requested",
        "definition": None,
        "revision": 0,
        "changed_by": "ops",
        "changed_at": at(12),
        "reason": "incident",
        "rerun": {**rerun_record(request(request_id)), **rerun},
    }


HOME = partition_for("report", 12)


def test_a_rerun_record_on_its_schedules_partition_reads_as_the_request() -> None:
    read = _read(b"report~rerun-incident-1", _rerun_event(), HOME)
    assert isinstance(read, RerunRequested)
    assert read.request == replace(request(), requested_at=at(12))


@pytest.mark.parametrize(
    ("key", "event", "partition", "reason"),
    [
        (b"report~rerun-incident-1", _rerun_event(), (HOME + 1) % 12, "murmur2"),
        (b"report~rerun-other", _rerun_event(), HOME, "key names schedule"),
        (b"report", _rerun_event(), HOME, "must be keyed report~rerun-"),
        (b"report~rerun-incident-1", _rerun_event(end_at=at(0)), HOME, "at or after start_at"),
        (b"report~rerun-incident-1", _rerun_event(kind="unknown"), HOME, "newer than this"),
    ],
    ids=["misplaced", "key-mismatch", "keyed-by-schedule", "backwards", "unknown-kind"],
)
def test_a_broken_rerun_record_is_refused_with_the_reason(
    key: bytes, event: dict[str, object], partition: int, reason: str
) -> None:
    read = _read(key, event, partition)
    assert isinstance(read, RejectedEvent) and reason in read.reason, read
