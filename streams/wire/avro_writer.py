"""Avro binary writers compiled once per schema: fastavro's bytes at a fraction of its cost.

fastavro's `schemaless_writer` walks the schema for every record and, for each union, tests the
value against every branch; at Kairos's records (about thirty fields, most of them `["null",
X]` unions) that was 60-90 µs a record, the largest single cost of taking in a schedule event
(docs/benchmarks.md, "Intake"). `compile_writer` walks the schema once and returns a function of
the record alone.

It writes exactly what fastavro writes, for the schemas Kairos has (tests/unit/test_avro_writer.py
holds every record type to it byte for byte): records, enums, arrays, maps, `["null", X]` unions,
the primitives, and the logical types `timestamp-millis`, `date` and `uuid`. Anything else raises
`UnsupportedSchemaError` when compiled, and the codec keeps fastavro for that type. A record the
compiled writer cannot write as given (a missing field, an extra one, a value of another type)
raises `RecordMismatchError`: the codec then asks fastavro, which writes the defaults it may fill in
or raises the error it always raised, so nothing the codec accepted or refused changes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

Write = Callable[[bytearray, Any], None]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MS = timedelta(milliseconds=1)
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class UnsupportedSchemaError(Exception):
    """The schema uses a type this writer does not compile; fastavro writes it instead."""


class RecordMismatchError(Exception):
    """The value does not fit the compiled schema as given; fastavro decides what it means."""


def _write_long(out: bytearray, value: int) -> None:
    if not isinstance(value, int):
        raise RecordMismatchError(f"{value!r} is not an integer")
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise RecordMismatchError(f"{value} does not fit 64 bits")
    encoded = (value << 1) ^ (value >> 63)
    while encoded > 0x7F:
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7
    out.append(encoded)


def _write_string(out: bytearray, value: str) -> None:
    if not isinstance(value, str):
        raise RecordMismatchError(f"{value!r} is not a string")
    raw = value.encode()
    _write_long(out, len(raw))
    out += raw


def _write_bytes(out: bytearray, value: bytes) -> None:
    if not isinstance(value, bytes | bytearray):
        raise RecordMismatchError(f"{value!r} is not bytes")
    _write_long(out, len(value))
    out += value


def _write_boolean(out: bytearray, value: bool) -> None:
    if type(value) is not bool:
        raise RecordMismatchError(f"{value!r} is not a boolean")
    out.append(1 if value else 0)


def _write_null(out: bytearray, value: None) -> None:
    if value is not None:
        raise RecordMismatchError(f"{value!r} is not null")


def _write_timestamp_millis(out: bytearray, value: datetime | int) -> None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise RecordMismatchError("a naive datetime")  # fastavro reads it in local time
        value = (value - _EPOCH) // _MS
    _write_long(out, value)


def _write_date(out: bytearray, value: date | int) -> None:
    if isinstance(value, datetime):
        raise RecordMismatchError("a datetime for a date")
    if isinstance(value, date):
        value = value.toordinal() - _EPOCH_ORDINAL
    _write_long(out, value)


def _write_uuid(out: bytearray, value: uuid.UUID | str) -> None:
    _write_string(out, str(value) if isinstance(value, uuid.UUID) else value)


_PRIMITIVES: dict[str, Write] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_long,
    "long": _write_long,
    "string": _write_string,
    "bytes": _write_bytes,
}
_LOGICAL: dict[tuple[str, str], Write] = {
    ("long", "timestamp-millis"): _write_timestamp_millis,
    ("int", "date"): _write_date,
    ("string", "uuid"): _write_uuid,
}


def compile_writer(schema: Any) -> Callable[[Mapping[str, Any]], bytes]:
    """The Avro binary encoding of records of `schema` (fastavro's parsed form).

    Raises `UnsupportedSchemaError` for a schema it does not compile; the function it returns
    raises `RecordMismatchError` for a record it cannot write as given.
    """
    write = _Compiler().compile(schema)

    def encode(record: Mapping[str, Any]) -> bytes:
        out = bytearray()
        try:
            write(out, record)
        except (KeyError, TypeError, AttributeError, ValueError) as mismatch:
            raise RecordMismatchError(str(mismatch)) from mismatch
        return bytes(out)

    return encode


class _Compiler:
    def __init__(self) -> None:
        self._named: dict[str, Write] = {}

    def compile(self, schema: Any) -> Write:
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema]
            if schema in self._named:
                return self._named[schema]
            raise UnsupportedSchemaError(f"unknown type {schema!r}")
        if isinstance(schema, list):
            return self._union(schema)
        kind = schema["type"]
        logical = schema.get("logicalType")
        if logical is not None:
            if (kind, logical) not in _LOGICAL:
                raise UnsupportedSchemaError(f"logical type {logical!r} on {kind!r}")
            return _LOGICAL[(kind, logical)]
        if kind == "record":
            return self._record(schema)
        if kind == "enum":
            return self._enum(schema)
        if kind == "array":
            return _array(self.compile(schema["items"]))
        if kind == "map":
            return _map(self.compile(schema["values"]))
        if isinstance(kind, str) and kind in _PRIMITIVES:
            return _PRIMITIVES[kind]
        raise UnsupportedSchemaError(f"type {kind!r}")

    def _union(self, branches: list[Any]) -> Write:
        if len(branches) != 2 or branches[0] != "null":
            raise UnsupportedSchemaError("a union other than [null, X]")
        value_of = self.compile(branches[1])

        def write_optional(out: bytearray, value: Any) -> None:
            if value is None:
                out.append(0)
            else:
                out.append(2)  # branch 1, zig-zag encoded
                value_of(out, value)

        return write_optional

    def _record(self, schema: Mapping[str, Any]) -> Write:
        fields: list[tuple[str, Write]] = []
        defaults = {f["name"]: f["default"] for f in schema["fields"] if "default" in f}

        def write_record(out: bytearray, value: Mapping[str, Any]) -> None:
            if len(value) != len(fields):
                value = _with_defaults(value, fields, defaults)
            for name, write in fields:
                write(out, value[name])

        # Named before its fields compile: a field may refer to the record itself.
        self._named[schema["name"]] = write_record
        fields.extend((field["name"], self.compile(field["type"])) for field in schema["fields"])
        return write_record

    def _enum(self, schema: Mapping[str, Any]) -> Write:
        indexes = {symbol: index for index, symbol in enumerate(schema["symbols"])}

        def write_enum(out: bytearray, value: str) -> None:
            _write_long(out, indexes[value])

        self._named[schema["name"]] = write_enum
        return write_enum


def _with_defaults(
    value: Mapping[str, Any], fields: list[tuple[str, Write]], defaults: Mapping[str, Any]
) -> Mapping[str, Any]:
    """The record with its missing fields' defaults, as fastavro's strict writer fills them in;
    `RecordMismatchError` for a field the schema lacks or a missing one without a default."""
    names = {name for name, _ in fields}
    extra = value.keys() - names
    missing = names - value.keys()
    if extra or missing - defaults.keys():
        raise RecordMismatchError(f"fields {sorted(extra)} unknown, {sorted(missing)} missing")
    return {**value, **{name: defaults[name] for name in missing}}


def _array(items: Write) -> Write:
    def write_array(out: bytearray, value: list[Any]) -> None:
        if not isinstance(value, list | tuple):
            raise RecordMismatchError(f"{value!r} is not an array")
        if value:
            _write_long(out, len(value))
            for item in value:
                items(out, item)
        out.append(0)

    return write_array


def _map(values: Write) -> Write:
    def write_map(out: bytearray, value: Mapping[str, Any]) -> None:
        if not isinstance(value, Mapping):
            raise RecordMismatchError(f"{value!r} is not a map")
        if value:
            _write_long(out, len(value))
            for key, item in value.items():
                _write_string(out, key)
                values(out, item)
        out.append(0)

    return write_map
