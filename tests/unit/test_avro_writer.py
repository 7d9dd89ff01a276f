"""The compiled Avro writer writes exactly fastavro's bytes, and defers to it for the rest.

`kairos.streams.wire.avro_writer` replaces fastavro's writer on every encode the codecs do; these
tests hold it to fastavro byte for byte on every record type's samples (and, through
`same_bytes_as_fastavro`, on the schedule space of tests/unit/test_schedule_space.py), and check
that what it cannot write as given reaches fastavro, whose defaults and errors stay the codec's.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.streams.wire.avro_schemas import RecordType, load_catalog
from kairos.streams.wire.avro_writer import RecordMismatchError, compile_writer
from kairos.streams.wire.codec import write_payload
from tests.unit.test_codec import SAMPLE_IDS, SAMPLES

CATALOG = load_catalog()
WRITERS = {t: compile_writer(CATALOG.current_schema(t).parsed) for t in RecordType}


def same_bytes_as_fastavro(record_type: RecordType, record: dict[str, Any]) -> None:
    """The compiled writer's bytes of `record` are fastavro's."""
    fastavro = io.BytesIO()
    write_payload(CATALOG.current_schema(record_type), record, fastavro)
    assert WRITERS[record_type](record) == fastavro.getvalue()


def test_every_record_type_compiles() -> None:
    # A schema the writer could not compile would silently fall back to fastavro's speed.
    assert set(WRITERS) == set(RecordType)


@pytest.mark.parametrize(("record_type", "record"), [(t, r) for t, _, r in SAMPLES], ids=SAMPLE_IDS)
def test_every_sample_is_written_as_fastavro_writes_it(
    record_type: RecordType, record: dict[str, Any]
) -> None:
    same_bytes_as_fastavro(record_type, record)


@settings(max_examples=300)
@given(
    value=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    instant=st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    text=st.text(max_size=20),
)
def test_longs_instants_and_texts_at_every_edge_are_fastavros(
    value: int, instant: datetime, text: str
) -> None:
    progress = {
        "schedule_id": text,
        "schedule_offset": value,
        "last_decided_nominal_at": instant,
        "next_nominal_at": None,
        "settle_before_at": value,
        "runs_fired": -value - 1,
    }
    same_bytes_as_fastavro(RecordType.TICKER_PROGRESS, progress)


def _progress(**change: Any) -> dict[str, Any]:
    return {
        "schedule_id": "a",
        "schedule_offset": 1,
        "last_decided_nominal_at": None,
        "next_nominal_at": None,
        "settle_before_at": None,
        "runs_fired": 0,
        **change,
    }


def test_missing_fields_are_written_with_their_defaults_as_fastavro_fills_them_in() -> None:
    record = {k: v for k, v in _progress().items() if k not in ("runs_fired", "settle_before_at")}

    same_bytes_as_fastavro(RecordType.TICKER_PROGRESS, record)


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(
            {k: v for k, v in _progress().items() if k != "schedule_offset"}, id="no-default"
        ),
        pytest.param(_progress(extra=1), id="extra-field"),
        pytest.param(_progress(schedule_offset="1"), id="string-for-long"),
        pytest.param(_progress(schedule_offset=2**63), id="beyond-64-bits"),
        pytest.param(_progress(schedule_offset=1.5), id="float-for-long"),
        pytest.param(_progress(schedule_id=b"a"), id="bytes-for-string"),
        pytest.param(_progress(next_nominal_at=datetime(2027, 1, 1)), id="naive-instant"),
    ],
)
def test_what_it_cannot_write_as_given_is_left_to_fastavro(record: dict[str, Any]) -> None:
    with pytest.raises(RecordMismatchError):
        WRITERS[RecordType.TICKER_PROGRESS](record)
