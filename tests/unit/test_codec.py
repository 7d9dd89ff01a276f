"""Every record type through the single-object wire format, and every way bytes can be bad."""

from __future__ import annotations

import contextlib
import io
import uuid
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader
from fastavro.schema import load_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kairos.schemas
from kairos.streams.wire.avro_schemas import RecordType, compile_schema_json, load_catalog
from kairos.streams.wire.codec import (
    SINGLE_OBJECT_HEADER_SIZE,
    SINGLE_OBJECT_MARKER,
    CorruptRecordError,
    DecodeError,
    DecodeFailure,
    EncodeError,
    IncompatibleSchemaError,
    SingleObjectCodec,
    UnknownSchemaError,
)

pytestmark = pytest.mark.unit


T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
T1 = datetime(2027, 3, 14, 7, 0, 2, 345000, tzinfo=UTC)

DEFINITION: dict[str, Any] = {
    "id": "billing.nightly-invoice",
    "cron": "0 7 * * *",
    "at": None,
    "every_ms": None,
    "timezone": "Europe/Paris",
    "start_at": T0,
    "end_at": None,
    "jitter_ms": 30_000,
    "misfire": "latest",
    "catchup_window_ms": 3_600_000,
    "overlap": "skip",
    "dst_gap": "run_at_transition",
    "dst_repeat": "first",
    "paused": False,
    "pause_until": T1,
    "exclude": ["fr-public", "billing-freeze"],
    "roll": "next_business_day",
    "business_day": None,
    "blackout": ["billing-freeze"],
    "blackout_action": "defer",
    "job": {"kind": "shell", "params_json": '{"command": "bin/invoice --day today"}'},
    "max_attempts": 3,
    "timeout_ms": 600_000,
    "retry_backoff_ms": 10_000,
    "owner": "billing",
    "labels": {"tier": "gold", "équipe": "facturation"},
    "description": "Nightly invoices — every day at 07:00 Paris time",
    "deadline": {"start_by_ms": 600_000, "finish_by_ms": 3_600_000},
    "pause_on_failure": 3,
    "max_runs": None,
    "after_last_run": "pause",
    "pool": "gpu",
    "upstream": [{"schedule_id": "billing.settlement", "match": "same_local_date"}],
    "upstream_wait_ms": 10_800_000,
    "upstream_timeout": "skip",
    "downstream_teams": ["audit"],
}
ONE_SHOT: dict[str, Any] = {
    **DEFINITION,
    "id": "ops.migrate-once",
    "cron": None,
    "at": T1,
    "timezone": "UTC",
    "start_at": None,
    "jitter_ms": None,
    "catchup_window_ms": None,
    "misfire": "all",
    "overlap": "queue",
    "dst_gap": "skip",
    "dst_repeat": "both",
    "paused": True,
    "pause_until": None,
    "exclude": [],
    "roll": None,
    "business_day": -1,
    "blackout": [],
    "blackout_action": "skip",
    "job": {"kind": "http", "params_json": '{"url": "https://example.invalid/go"}'},
    "owner": None,
    "labels": {},
    "description": None,
    "deadline": {"start_by_ms": None, "finish_by_ms": 60_000},
    "pause_on_failure": None,
    "max_runs": 1,
    "after_last_run": "delete",
    "pool": None,
    "upstream": [],
    "upstream_wait_ms": None,
    "upstream_timeout": "fail",
    "downstream_teams": [],
}


def _schedule_event(change: str, definition: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {
        "schedule_id": "billing.nightly-invoice",
        "event_id": uuid.UUID("0b6f2c4e-6a43-4d8e-9a59-5c1f2f9d8e11"),
        "change": change,
        "definition": definition,
        "revision": 4,
        "changed_by": "alice@example.invalid",
        "changed_at": T0,
        "reason": None,
        "rerun": None,
        **extra,
    }


RERUN = {
    "request_id": "incident-4711",
    "kind": "backfill",
    "start_at": T0,
    "end_at": T1,
    "overlap": "queue",
}


def _run_event(kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": "billing.nightly-invoice@2027-03-14T07:00:00Z",
        "schedule_id": "billing.nightly-invoice",
        "kind": kind,
        "attempt": 2,
        "executor_instance": "executor-a",
        "nominal_at": T0,
        "fired_at": T1,
        "started_at": None,
        "finished_at": None,
        "reason": None,
        "next_attempt_at": None,
        "owner": "billing",
        **extra,
    }


SAMPLES: list[tuple[RecordType, str, dict[str, Any]]] = [
    (RecordType.SCHEDULE_EVENT, "upserted", _schedule_event("upserted", DEFINITION)),
    (RecordType.SCHEDULE_EVENT, "paused", _schedule_event("paused", ONE_SHOT, reason="freeze")),
    (RecordType.SCHEDULE_EVENT, "deleted", _schedule_event("deleted", None, reason="retired")),
    (
        RecordType.RUN_REQUESTED,
        "run-requested",
        {
            "run_id": "billing.nightly-invoice@2027-03-14T07:00:00Z",
            "schedule_id": "billing.nightly-invoice",
            "nominal_at": T0,
            "due_at": T0,
            "fired_at": T1,
            "lateness_ms": 2_345,
            "job": DEFINITION["job"],
            "attempt": 1,
            "max_attempts": 3,
            "timeout_ms": 600_000,
            "retry_backoff_ms": 10_000,
            "overlap": "skip",
            "schedules_partition": 7,
            "schedule_offset": 123_456_789_012,
            "ticker_instance": "ticker-1",
            "owner": "billing",
            "rerun_request_id": None,
            "deadline_start_by_ms": 600_000,
            "deadline_finish_by_ms": None,
            "labels": {"warehouse": "eu", "tier": "gold"},
            "pool": "gpu",
            "upstream": [
                {
                    "schedule_id": "billing.settlement",
                    "match": "same_instant",
                    "resolution": "matched",
                    "period_at": T0,
                    "reason": None,
                }
            ],
            "upstream_wait_ms": 3_600_000,
            "upstream_timeout": "skip",
            "timezone": "America/New_York",
            "interval_start": T0 - timedelta(days=1),
        },
    ),
    (RecordType.RUN_EVENT, "started", _run_event("started", started_at=T1)),
    (RecordType.RUN_EVENT, "succeeded", _run_event("succeeded", started_at=T1, finished_at=T1)),
    (RecordType.RUN_EVENT, "failed", _run_event("failed", started_at=T1, reason="exit 3")),
    (RecordType.RUN_EVENT, "retrying", _run_event("retrying", next_attempt_at=T1, reason="503")),
    (RecordType.RUN_EVENT, "skipped", _run_event("skipped", reason="overlap: skip")),
    (RecordType.RUN_EVENT, "dead-lettered", _run_event("dead_lettered", reason="3 attempts")),
    (
        RecordType.RUN_EVENT,
        "deadline-missed",
        _run_event("deadline_missed", reason="start_by 10m missed: not started by 07:10:00Z"),
    ),
    (
        RecordType.TICKER_STATE,
        "ticker-state",
        {
            "schedule_id": "billing.nightly-invoice",
            "definition": DEFINITION,
            "schedule_offset": 41,
            "rerun_request_id": "incident-4711",
            "rerun_fired_through_at": T0,
            "reruns_done": ["nightly-fix"],
        },
    ),
    (
        RecordType.TICKER_PROGRESS,
        "ticker-progress",
        {
            "schedule_id": "billing.nightly-invoice",
            "schedule_offset": 41,
            "last_decided_nominal_at": T0,
            "next_nominal_at": T1,
            "settle_before_at": None,
            "runs_fired": 0,
            "waiting_nominals_at": [T0, T1],
            "last_owner": None,
        },
    ),
    (
        RecordType.TICKER_PROGRESS,
        "ticker-progress-settling",
        {
            "schedule_id": "billing.nightly-invoice",
            "schedule_offset": 41,
            "last_decided_nominal_at": T0,
            "next_nominal_at": T1,
            "settle_before_at": T1,
            "runs_fired": 2,
            "waiting_nominals_at": [],
            "last_owner": None,
        },
    ),
    (
        RecordType.TICKER_PROGRESS,
        "ticker-progress-floor",
        {
            "schedule_id": "billing.nightly-invoice",
            "schedule_offset": 41,
            "last_decided_nominal_at": T0,
            "next_nominal_at": None,
            "settle_before_at": None,
            "runs_fired": 0,
            "waiting_nominals_at": [],
            "last_owner": "billing",
        },
    ),
    (
        RecordType.TICKER_STATE,
        "ticker-state-deleted",
        {
            "schedule_id": "gone",
            "definition": None,
            "schedule_offset": 42,
            "rerun_request_id": None,
            "rerun_fired_through_at": None,
            "reruns_done": [],
        },
    ),
    (
        RecordType.DEAD_LETTER,
        "dead-letter",
        {
            "source_topic": "kairos.schedules",
            "source_partition": 3,
            "source_offset": 99,
            "key": b"billing.nightly-invoice",
            "value": b"\xc3\x01garbage\x00\xff",
            "reason": "unknown_fingerprint",
            "error_class": "kairos.streams.wire.codec.UnknownSchemaError",
            "dead_lettered_at": T1,
            "dead_lettered_by": "ticker-1",
            "truncated": True,
            "key_size": 23,
            "value_size": 1_200_000,
            "reported_to": "growth",
        },
    ),
    (
        RecordType.TEAM_EVENT,
        "team",
        {
            "team": "payments-eu",
            "public_keys": [bytes(range(32))],
            "admin": False,
            "max_schedules": 1200,
            "max_fires_per_minute": None,
            "changed_by": "ops@example.com",
            "changed_at": T1,
        },
    ),
    (
        RecordType.CALENDAR_EVENT,
        "calendar-upserted",
        {
            "calendar_id": "nyse",
            "event_id": uuid.UUID("6f1c1c4e-6a1b-4c38-9d2e-0c8a7b1e2f30"),
            "change": "upserted",
            "definition": {
                "id": "nyse",
                "owner": "markets",
                "description": None,
                "timezone": "America/New_York",
                "business_days": [1, 2, 3, 4, 5],
                "holidays": [{"date": date(2026, 4, 3), "name": "Good Friday"}],
                "windows": [
                    {
                        "name": "market hours",
                        "start": None,
                        "end": None,
                        "cron": "30 9 * * MON-FRI",
                        "duration_ms": 23_400_000,
                    }
                ],
            },
            "changed_by": "treasury",
            "changed_at": T1,
            "reason": None,
        },
    ),
    (RecordType.SCHEDULE_EVENT, "rerun", _schedule_event("rerun_requested", None, rerun=RERUN)),
]
SAMPLE_IDS = [sample_id for _, sample_id, _ in SAMPLES]


@pytest.mark.parametrize(("record_type", "record"), [(t, r) for t, _, r in SAMPLES], ids=SAMPLE_IDS)
def test_every_record_round_trips(record_type: RecordType, record: dict[str, Any]) -> None:
    codec = SingleObjectCodec(record_type)

    assert codec.decode(codec.encode(record)) == record


@pytest.mark.parametrize(("record_type", "record"), [(t, r) for t, _, r in SAMPLES], ids=SAMPLE_IDS)
def test_plain_fastavro_decodes_a_record_with_only_the_avsc_file(
    record_type: RecordType, record: dict[str, Any]
) -> None:
    encoded = SingleObjectCodec(record_type).encode(record)
    avsc = Path(kairos.schemas.__file__).parent / f"{record_type}.avsc"

    payload = io.BytesIO(encoded[SINGLE_OBJECT_HEADER_SIZE:])

    assert schemaless_reader(payload, load_schema(str(avsc))) == record


def test_single_object_header_is_marker_then_little_endian_crc64_fingerprint() -> None:
    codec = SingleObjectCodec(RecordType.RUN_EVENT)

    encoded = codec.encode(SAMPLES[4][2])

    assert encoded[:2] == b"\xc3\x01"
    assert encoded[2:10] == load_catalog().current[RecordType.RUN_EVENT].fingerprint


def test_fingerprint_matches_the_avro_reference_vector() -> None:
    # Avro's own tests: the single-object header of schema "int" is C3 01 8F 5C 39 3F 1A D5 75 72.
    assert compile_schema_json('"int"', "test").fingerprint == bytes.fromhex("8f5c393f1ad57572")


def _encoded(record_type: RecordType, sample_index: int) -> bytes:
    return SingleObjectCodec(record_type).encode(SAMPLES[sample_index][2])


UPSERT = _encoded(RecordType.SCHEDULE_EVENT, 0)
# A ScheduleEvent payload starts with schedule_id, event_id (a UUID string) and the change enum.
_ID_AND_EVENT_ID = UPSERT[:10] + b"\x02a" + b"\x48" + b"0b6f2c4e-6a43-4d8e-9a59-5c1f2f9d8e11"
BAD_BYTES: list[tuple[str, bytes, type[DecodeError], DecodeFailure]] = [
    ("empty", b"", CorruptRecordError, DecodeFailure.TRUNCATED),
    ("marker-only", SINGLE_OBJECT_MARKER, CorruptRecordError, DecodeFailure.TRUNCATED),
    ("short-fingerprint", UPSERT[:7], CorruptRecordError, DecodeFailure.TRUNCATED),
    ("json", b'{"schedule_id": "x"}', CorruptRecordError, DecodeFailure.BAD_MARKER),
    ("confluent-framing", b"\x00\x00\x00\x00\x01" + UPSERT[10:], CorruptRecordError,
     DecodeFailure.BAD_MARKER),
    ("wrong-marker-version", b"\xc3\x02" + UPSERT[2:], CorruptRecordError,
     DecodeFailure.BAD_MARKER),
    ("unknown-fingerprint", SINGLE_OBJECT_MARKER + bytes(8) + UPSERT[10:], UnknownSchemaError,
     DecodeFailure.UNKNOWN_FINGERPRINT),
    ("run-event-on-schedules-topic", _encoded(RecordType.RUN_EVENT, 4), IncompatibleSchemaError,
     DecodeFailure.WRONG_RECORD_TYPE),
    ("truncated-payload", UPSERT[:-1], CorruptRecordError, DecodeFailure.TRUNCATED),
    ("trailing-bytes", UPSERT + b"\x00", CorruptRecordError, DecodeFailure.TRAILING_BYTES),
    ("header-without-payload", UPSERT[:10], CorruptRecordError, DecodeFailure.TRUNCATED),
    ("enum-index-out-of-range", _ID_AND_EVENT_ID + b"\xc6\x01", CorruptRecordError,
     DecodeFailure.MALFORMED),
    ("invalid-utf8", UPSERT[:10] + b"\x02\xff", CorruptRecordError, DecodeFailure.MALFORMED),
    ("invalid-uuid", UPSERT[:10] + b"\x02a\x02z", CorruptRecordError, DecodeFailure.MALFORMED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("data", "error", "reason"), [case[1:] for case in BAD_BYTES], ids=[c[0] for c in BAD_BYTES]
)
def test_bad_bytes_raise_a_typed_decode_error_with_the_reason(
    data: bytes, error: type[DecodeError], reason: DecodeFailure
) -> None:
    with pytest.raises(error) as raised:
        SingleObjectCodec(RecordType.SCHEDULE_EVENT).decode(data)

    assert raised.value.reason is reason
    assert raised.value.record_type == RecordType.SCHEDULE_EVENT
    assert reason in str(raised.value)


def test_an_unknown_fingerprint_is_named_in_the_error() -> None:
    fingerprint = bytes.fromhex("0123456789abcdef")

    with pytest.raises(UnknownSchemaError) as raised:
        SingleObjectCodec(RecordType.SCHEDULE_EVENT).decode(
            SINGLE_OBJECT_MARKER + fingerprint + UPSERT[10:]
        )

    assert raised.value.fingerprint == fingerprint
    assert fingerprint.hex() in str(raised.value)


def test_every_truncation_of_a_record_is_a_corrupt_record() -> None:
    codec = SingleObjectCodec(RecordType.SCHEDULE_EVENT)
    for cut in range(len(UPSERT)):
        with pytest.raises(CorruptRecordError):
            codec.decode(UPSERT[:cut])


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"owner_team": "billing"}, id="unknown-field"),
        pytest.param({"changed_by": None}, id="null-in-required-field"),
        pytest.param({"change": "renamed"}, id="unknown-enum-symbol"),
        pytest.param({"changed_at": "yesterday"}, id="wrong-type"),
        pytest.param({"definition": {**DEFINITION, "every": 60}}, id="misspelt-nested-field"),
    ],
)
def test_a_record_that_does_not_match_its_schema_raises_encode_error(
    change: dict[str, Any],
) -> None:
    record = {**SAMPLES[0][2], **change}

    with pytest.raises(EncodeError) as raised:
        SingleObjectCodec(RecordType.SCHEDULE_EVENT).encode(record)

    assert raised.value.record_type == RecordType.SCHEDULE_EVENT


def test_missing_fields_with_defaults_are_filled_in() -> None:
    codec = SingleObjectCodec(RecordType.SCHEDULE_EVENT)
    record = {k: v for k, v in SAMPLES[2][2].items() if k not in ("revision", "reason")}

    assert codec.decode(codec.encode(record)) == {**record, "revision": 0, "reason": None}


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        SingleObjectCodec(RecordType.SCHEDULE_EVENT).decode(data)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(record_type=st.sampled_from(RecordType), payload=st.binary(max_size=300))
def test_random_payloads_behind_a_valid_header_decode_or_raise_decode_error(
    record_type: RecordType, payload: bytes
) -> None:
    codec = SingleObjectCodec(record_type)
    header = SINGLE_OBJECT_MARKER + load_catalog().current[record_type].fingerprint

    with contextlib.suppress(DecodeError):
        assert isinstance(codec.decode(header + payload), dict)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    sample=st.sampled_from(SAMPLES),
    position=st.integers(min_value=0, max_value=400),
    replacement=st.binary(min_size=0, max_size=4),
)
def test_damaged_records_decode_or_raise_decode_error(
    sample: tuple[RecordType, str, dict[str, Any]], position: int, replacement: bytes
) -> None:
    record_type, _, _ = sample
    encoded = _encoded(record_type, SAMPLES.index(sample))
    cut = position % (len(encoded) + 1)
    damaged = encoded[:cut] + replacement + encoded[cut + len(replacement) :]

    with contextlib.suppress(DecodeError):
        assert isinstance(SingleObjectCodec(record_type).decode(damaged), dict)
