"""The calendars topic's records: a calendar survives the wire, and each broken record is
skipped with its reason."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.core.business_calendar import MAX_HOLIDAYS, parse_calendar
from kairos.core.calendar_versions import CalendarChange, CalendarSignature, SkippedCalendarRecord
from kairos.core.ownership import Team
from kairos.streams.readers.calendar_ownership import SignedCalendars
from kairos.streams.wire.calendar_events import (
    MAX_CALENDAR_EVENT_BYTES,
    TOMBSTONE,
    CalendarEventTooLargeError,
    calendar_definition_record,
    encode_calendar_event,
    read_calendar_message,
    read_calendar_record,
)
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.signing import new_signing_key

CODEC = make_codecs().calendar_event
NOW = datetime(2026, 12, 1, 12, tzinfo=UTC)
CALENDAR = parse_calendar(
    {
        "id": "nyse",
        "owner": "markets",
        "description": "closing days",
        "timezone": "America/New_York",
        "business_days": ["SUN", "MON", "TUE"],
        "holidays": [{"date": "2026-12-25", "name": "Christmas Day"}],
        "windows": [
            {"start": "2026-12-20T00:00", "end": "2027-01-04T00:00", "name": "freeze"},
            {"cron": "30 9 * * MON-FRI", "duration": "6h30m", "name": "market hours"},
        ],
    }
)


def read(key: bytes | None, value: bytes | None) -> CalendarChange | SkippedCalendarRecord:
    return read_calendar_record(CODEC, key=key, value=value, offset=7, timestamp=NOW)


def event(**fields: Any) -> bytes:
    record = {
        "calendar_id": "nyse",
        "event_id": uuid.uuid4(),
        "change": "upserted",
        "definition": calendar_definition_record(CALENDAR),
        "changed_by": "alice",
        "changed_at": NOW,
        "reason": "yearly update",
    }
    return CODEC.encode({**record, **fields})


def test_a_calendar_survives_the_wire_with_its_version() -> None:
    value = encode_calendar_event(
        CODEC, calendar_id="nyse", calendar=CALENDAR, changed_by="alice", reason="new year"
    )

    change = read(b"nyse", value)

    assert isinstance(change, CalendarChange)
    assert (change.calendar, change.version, change.change) == (CALENDAR, 7, "upserted")
    assert (change.changed_by, change.reason) == ("alice", "new year")
    assert calendar_definition_record(CALENDAR)["business_days"] == [1, 2, 7]


def test_a_change_is_in_force_from_its_append_time_not_its_publishers_clock() -> None:
    """M4: the `changed_at` a publisher writes, backdated or future-dated, is not when the
    change counts from; the record's timestamp is (the broker's append time)."""
    for claimed in (datetime(2020, 1, 1, tzinfo=UTC), NOW + timedelta(days=365)):
        change = read(b"nyse", event(changed_at=claimed))

        assert isinstance(change, CalendarChange)
        assert change.changed_at == NOW


def test_deletes_come_as_events_and_tombstones() -> None:
    deleted = read(b"nyse", event(change="deleted", definition=None))
    newer_kind = read(b"nyse", event(change="unknown", definition=None))
    tombstone = read(b"nyse", None)

    assert isinstance(deleted, CalendarChange) and deleted.calendar is None
    assert isinstance(newer_kind, CalendarChange) and newer_kind.calendar is None
    assert isinstance(tombstone, CalendarChange)
    assert (tombstone.change, tombstone.changed_at, tombstone.changed_by) == (TOMBSTONE, NOW, None)


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        pytest.param(None, event(), "keyed by its calendar id", id="no-key"),
        pytest.param(b"\xff", event(), "not UTF-8", id="key-not-utf8"),
        pytest.param(b"other", event(), "differs from the event's calendar_id", id="key-mismatch"),
        pytest.param(b"nyse", b"garbage", "bad_marker", id="not-avro"),
        pytest.param(
            b"nyse", event(definition=None), "must carry the whole definition", id="upsert-no-def"
        ),
        pytest.param(
            b"nyse",
            event(definition={**calendar_definition_record(CALENDAR), "business_days": [0]}),
            "business_days.0",
            id="weekday-out-of-range",
        ),
        pytest.param(
            b"nyse",
            event(definition={**calendar_definition_record(CALENDAR), "business_days": []}),
            "business_days",
            id="no-business-day",
        ),
        pytest.param(
            b"nyse",
            event(definition={**calendar_definition_record(CALENDAR), "id": "other"}),
            "differs from the key",
            id="definition-id-mismatch",
        ),
        pytest.param(
            b"nyse", b"\xc3\x01" + b"\x00" * MAX_CALENDAR_EVENT_BYTES, "over the limit", id="huge"
        ),
    ],
)
def test_a_record_that_breaks_the_contract_is_skipped_with_why(
    key: bytes | None, value: bytes, fragment: str
) -> None:
    skipped = read(key, value)

    assert isinstance(skipped, SkippedCalendarRecord)
    assert skipped.version == 7
    assert fragment in skipped.reason


def test_the_largest_calendar_of_ascii_names_fits_and_wider_names_are_refused_before_sending() -> (
    None
):
    def full(name: str) -> Any:
        days = [date(2000, 1, 1) + timedelta(days=n) for n in range(MAX_HOLIDAYS)]
        return parse_calendar(
            {"id": "big", "owner": "ops", "holidays": [{"date": d, "name": name} for d in days]}
        )

    ascii_value = encode_calendar_event(
        CODEC, calendar_id="big", calendar=full("h" * 100), changed_by="ops", reason=None
    )
    assert len(ascii_value) < MAX_CALENDAR_EVENT_BYTES
    with pytest.raises(CalendarEventTooLargeError, match="split the calendar"):
        encode_calendar_event(
            CODEC, calendar_id="big", calendar=full("é" * 100), changed_by="ops", reason=None
        )


wall_times = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1)).map(
    lambda wall: wall.replace(microsecond=0)
)
fixed_windows = st.builds(
    lambda start, minutes: {
        "start": start,
        "end": start + timedelta(minutes=minutes),
        "name": "fixed",
    },
    wall_times,
    st.integers(120, 366 * 24 * 60 - 120),
)
recurring_windows = st.builds(
    lambda minute, hour, ms: {
        "cron": f"{minute} {hour} * * MON-FRI",
        "duration": timedelta(milliseconds=ms),
        "name": "recurring",
    },
    st.integers(0, 59),
    st.integers(0, 23),
    st.integers(1, 366 * 86_400_000),
)


@settings(max_examples=60, deadline=None)
@given(
    business_days=st.sets(st.sampled_from(["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"]),
                          min_size=1),
    holidays=st.sets(st.dates(date(1970, 1, 1), date(9999, 12, 31)), max_size=30),
    windows=st.lists(st.one_of(fixed_windows, recurring_windows), max_size=5),
    zone=st.sampled_from(["UTC", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham"]),
    description=st.none() | st.text(max_size=40),
)  # fmt: skip
def test_every_calendar_the_model_accepts_comes_back_from_the_wire_equal(
    business_days: set[str],
    holidays: set[date],
    windows: list[dict[str, Any]],
    zone: str,
    description: str | None,
) -> None:
    calendar = parse_calendar(
        {
            "id": "generated",
            "owner": "tests",
            "description": description,
            "timezone": zone,
            "business_days": sorted(business_days),
            "holidays": [{"date": day, "name": f"closed {day}"} for day in holidays],
            "windows": windows,
        }
    )
    value = encode_calendar_event(
        CODEC, calendar_id="generated", calendar=calendar, changed_by="tests", reason=None
    )

    change = read(b"generated", value)

    assert isinstance(change, CalendarChange)
    assert change.calendar == calendar


def test_a_readers_check_of_the_signature_gives_the_team_or_why_not() -> None:
    """What `read_calendar_message` records of a signature when the deployment enforces
    ownership: the registered team whose key signed it fresh, or the reason it does not count."""
    _, treasury = new_signing_key("treasury")
    signed = SignedCalendars.of({"treasury": Team("treasury", (treasury.public_key(),))})
    topic, key = "kairos.calendars", b"nyse"
    value = encode_calendar_event(
        CODEC, calendar_id="nyse", calendar=CALENDAR, changed_by="alice", reason=None
    )
    now_ms = int(NOW.timestamp() * 1000)
    headers = treasury.headers(topic, key, value, now_ms)

    def checked(
        value: bytes, headers: list[Any] | None, kind: int = TIMESTAMP_LOG_APPEND_TIME
    ) -> CalendarSignature | None:
        message = Message(
            topic=topic,
            partition=0,
            offset=3,
            key=key,
            value=value,
            headers=headers,
            timestamp=(kind, now_ms + 1000),
        )
        change = read_calendar_message(CODEC, message, signed.verifier)
        assert isinstance(change, CalendarChange) and change.changed_at == NOW + timedelta(
            seconds=1
        )
        return change.signature

    assert checked(value, headers) == CalendarSignature("treasury")
    altered = checked(value.replace(b"alice", b"mallo"), headers)
    assert altered is not None and "does not verify" in str(altered.refusal)
    unsigned = checked(value, None)
    assert unsigned is not None and str(unsigned.refusal).startswith("unsigned")
    create_time = checked(value, headers, TIMESTAMP_CREATE_TIME)
    assert create_time is not None and create_time.team == "treasury"
    assert "LogAppendTime" in str(create_time.refusal)
