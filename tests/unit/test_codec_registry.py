"""The Confluent Schema Registry framing, against confluent-kafka's in-memory registry.

Untested against a real registry server: none is available here.
"""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from fastavro import schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from kairos.streams.avro_schemas import RecordType, compile_schema_json, load_catalog
from kairos.streams.codec import (
    CorruptRecordError,
    DecodeError,
    DecodeFailure,
    EncodeError,
    IncompatibleSchemaError,
    SchemaRegistryUnavailableError,
    SingleObjectCodec,
    UnknownSchemaError,
    make_codecs,
)

pytestmark = pytest.mark.unit

registry_codec = pytest.importorskip(
    "kairos.streams.registry_codec", reason="needs confluent-kafka[schemaregistry] installed"
)
schema_registry = pytest.importorskip("confluent_kafka.schema_registry")

T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
RUN_EVENT: dict[str, Any] = {
    "run_id": "s@2027-03-14T07:00:00Z",
    "schedule_id": "s",
    "kind": "succeeded",
    "attempt": 1,
    "executor_instance": "executor-a",
    "nominal_at": T0,
    "fired_at": T0,
    "started_at": T0,
    "finished_at": T0,
    "reason": None,
    "next_attempt_at": None,
}


@pytest.fixture
def client() -> Any:
    return registry_codec.registry_client("mock://registry-tests")


def _codec(client: Any, record_type: RecordType = RecordType.RUN_EVENT) -> Any:
    return registry_codec.RegistryCodec(record_type, client)


def test_framing_is_magic_zero_then_the_big_endian_schema_id(client: Any) -> None:
    encoded = _codec(client).encode(RUN_EVENT)

    registered = client.get_latest_version(RecordType.RUN_EVENT)
    assert encoded[:1] == b"\x00"
    assert int.from_bytes(encoded[1:5], "big") == registered.schema_id
    assert json.loads(registered.schema.schema_str)["name"] == "RunEvent"


def test_the_subject_is_the_record_full_name(client: Any) -> None:
    _codec(client).encode(RUN_EVENT)

    assert client.get_subjects() == [RecordType.RUN_EVENT.value]


def test_single_object_records_of_registry_less_producers_decode_too(client: Any) -> None:
    single_object = SingleObjectCodec(RecordType.RUN_EVENT).encode(RUN_EVENT)

    assert _codec(client).decode(single_object) == RUN_EVENT


def test_a_newer_writer_version_known_only_to_the_registry_resolves_to_the_current_shape(
    client: Any,
) -> None:
    current = load_catalog().current_schema(RecordType.RUN_EVENT)
    newer_json = json.loads(current.schema_json)
    newer_json["fields"].append(
        {"name": "exit_code", "type": ["null", "int"], "default": None, "doc": "Exit code."}
    )
    newer = compile_schema_json(json.dumps(newer_json), "newer")
    schema_id = client.register_schema(
        RecordType.RUN_EVENT, schema_registry.Schema(newer.schema_json, "AVRO")
    )
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big"))
    schemaless_writer(out, newer.parsed, {**RUN_EVENT, "exit_code": 0})

    assert _codec(client).decode(out.getvalue()) == RUN_EVENT


def test_an_unknown_schema_id_is_an_unknown_schema_error(client: Any) -> None:
    with pytest.raises(UnknownSchemaError) as raised:
        _codec(client).decode(b"\x00\x00\x00\x30\x39" + b"\x02")

    assert raised.value.reason is DecodeFailure.UNKNOWN_SCHEMA_ID
    assert raised.value.schema_id == 12345


def test_a_record_of_another_type_is_incompatible(client: Any) -> None:
    run_event = _codec(client).encode(RUN_EVENT)

    with pytest.raises(IncompatibleSchemaError) as raised:
        _codec(client, RecordType.SCHEDULE_EVENT).decode(run_event)

    assert raised.value.reason is DecodeFailure.WRONG_RECORD_TYPE


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"", DecodeFailure.TRUNCATED, id="empty"),
        pytest.param(b"\x00\x00\x01", DecodeFailure.TRUNCATED, id="short-header"),
        pytest.param(b"\x07\x00\x00\x00\x01\x02", DecodeFailure.BAD_MARKER, id="bad-magic"),
        pytest.param(b'{"run_id": 1}', DecodeFailure.BAD_MARKER, id="json"),
    ],
)
def test_bad_framing_is_a_corrupt_record(client: Any, data: bytes, reason: DecodeFailure) -> None:
    with pytest.raises(CorruptRecordError) as raised:
        _codec(client).decode(data)

    assert raised.value.reason is reason


class _FailingRegistry:
    """A registry client whose every call fails the way a broken registry does."""

    def __init__(self, failure: Exception) -> None:
        self._failure = failure

    def register_schema(self, *_: Any, **__: Any) -> int:
        raise self._failure

    def get_schema(self, *_: Any, **__: Any) -> Any:
        raise self._failure


UNAVAILABLE = [
    pytest.param(ConnectionRefusedError("connection refused"), id="unreachable"),
    pytest.param(schema_registry.SchemaRegistryError(503, 50301, "overloaded"), id="http-503"),
]


@pytest.mark.parametrize("failure", UNAVAILABLE)
def test_an_unavailable_registry_is_not_a_decode_error(failure: Exception) -> None:
    codec = _codec(_FailingRegistry(failure))

    with pytest.raises(SchemaRegistryUnavailableError) as raised:
        codec.decode(b"\x00\x00\x00\x00\x01\x02")

    assert not isinstance(raised.value, DecodeError)


@pytest.mark.parametrize("failure", UNAVAILABLE)
def test_an_unavailable_registry_fails_encode_as_unavailable(failure: Exception) -> None:
    with pytest.raises(SchemaRegistryUnavailableError):
        _codec(_FailingRegistry(failure)).encode(RUN_EVENT)


def test_a_registry_that_refuses_the_schema_fails_encode() -> None:
    refusal = schema_registry.SchemaRegistryError(409, 409, "incompatible schema")

    with pytest.raises(EncodeError) as raised:
        _codec(_FailingRegistry(refusal)).encode(RUN_EVENT)

    assert "incompatible schema" in raised.value.problem


def test_make_codecs_keeps_the_ticker_changelog_on_single_object_encoding() -> None:
    codecs = make_codecs("mock://make-codecs")

    assert isinstance(codecs.schedule_event, registry_codec.RegistryCodec)
    assert isinstance(codecs.ticker_state, SingleObjectCodec)


# Built once: a registry client is too slow to build per example.
_FUZZ_CODEC = _codec(registry_codec.registry_client("mock://fuzz"))
_FUZZ_HEADER = _FUZZ_CODEC.encode(RUN_EVENT)[:5]


@settings(max_examples=300)
@given(payload=st.binary(max_size=300))
def test_random_payloads_behind_a_registry_header_decode_or_raise_decode_error(
    payload: bytes,
) -> None:
    with contextlib.suppress(DecodeError):
        assert isinstance(_FUZZ_CODEC.decode(_FUZZ_HEADER + payload), dict)
