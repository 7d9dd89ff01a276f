"""Turns Kairos records into Kafka values and back: one `Codec` per record type.

Records are plain dicts shaped like the current `.avsc` files (see `docs/wire-format.md`). The
default wire format is Avro single-object encoding, `C3 01` + the writer schema's 8-byte
CRC-64-AVRO fingerprint (little-endian) + the Avro binary payload, so any language decodes a
record with only the `.avsc` files.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, cast

from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError

from kairos.core.errors import KairosError
from kairos.streams.wire.avro_schemas import CompiledSchema, RecordType, SchemaCatalog, load_catalog
from kairos.streams.wire.avro_writer import (
    RecordMismatchError,
    UnsupportedSchemaError,
    compile_writer,
)

SINGLE_OBJECT_MARKER = b"\xc3\x01"
SINGLE_OBJECT_HEADER_SIZE = len(SINGLE_OBJECT_MARKER) + 8
_DETAIL_LIMIT = 200


class DecodeFailure(StrEnum):
    """Why bytes did not decode into a record."""

    BAD_MARKER = "bad_marker"
    """The bytes do not start with the framing this codec reads."""
    TRUNCATED = "truncated"
    """The bytes end inside the header or inside the record."""
    UNKNOWN_FINGERPRINT = "unknown_fingerprint"
    """No schema this process knows has the writer's fingerprint."""
    WRONG_RECORD_TYPE = "wrong_record_type"
    """The writer schema is another record type, e.g. a RunEvent on the schedules topic."""
    UNRESOLVABLE = "unresolvable"
    """The writer schema is this record type but cannot be resolved to the current one."""
    MALFORMED = "malformed"
    """The payload is not a valid Avro encoding of the writer schema."""
    TRAILING_BYTES = "trailing_bytes"
    """The record ended before the bytes did: a corrupted value or a mislabelled writer."""


class CodecError(KairosError):
    """A record could not be encoded or decoded."""

    def __init__(self, record_type: str, message: str) -> None:
        self.record_type = record_type
        super().__init__(message)


class EncodeError(CodecError):
    """A record cannot be encoded: it does not match its schema (a bug in the code that built
    it)."""

    def __init__(self, record_type: str, problem: str) -> None:
        self.problem = problem
        super().__init__(
            record_type, f"cannot encode {record_type}: {problem}; see docs/wire-format.md"
        )


class DecodeError(CodecError):
    """Bytes are not a record of the expected type: the record belongs in the dead-letter topic.

    `reason` says which check failed; `fingerprint` names the writer schema when the header got
    that far. Messages never include the payload.
    """

    def __init__(
        self,
        reason: DecodeFailure,
        record_type: str,
        detail: str,
        *,
        fingerprint: bytes | None = None,
    ) -> None:
        self.reason = reason
        self.detail = detail
        self.fingerprint = fingerprint
        super().__init__(record_type, f"cannot decode {record_type}: {reason}: {detail}")


class CorruptRecordError(DecodeError):
    """The bytes are damaged or not a Kairos record at all (bad marker, truncated, malformed)."""


class UnknownSchemaError(DecodeError):
    """The writer schema is unknown here; a newer Kairos may know it."""


class IncompatibleSchemaError(DecodeError):
    """The writer schema is known but is not a compatible version of the expected record."""


class Codec(Protocol):
    """Encodes and decodes the records of one type.

    Rules every implementation keeps:
    - `encode` takes a dict shaped like the current schema and raises only `EncodeError`.
    - `decode` returns a dict shaped like the current schema, whichever known version wrote it
      (schema resolution fills fields the writer lacked with their defaults).
    - `decode` raises only `DecodeError` subclasses for bad bytes, whatever they are: never
      anything else.
    """

    @property
    def record_type(self) -> RecordType: ...

    def encode(self, record: Mapping[str, Any]) -> bytes: ...

    def decode(self, data: bytes) -> dict[str, Any]: ...


def write_payload(schema: CompiledSchema, record: Mapping[str, Any], out: io.BytesIO) -> None:
    """Append the Avro binary encoding of `record` to `out`, with fastavro.

    Strict: a missing field without default or a field the schema lacks is an error, so a
    misspelt key fails loudly instead of silently writing the default.
    """
    try:
        schemaless_writer(out, schema.parsed, record, strict_allow_default=True)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise EncodeError(schema.full_name, _describe(exc)) from exc


class PayloadWriter:
    """The Avro binary encoding of one schema's records: compiled
    (`kairos.streams.wire.avro_writer`) where it can be, fastavro's `write_payload` for whatever the
    compiled writer cannot write as given, so the bytes and the errors are always fastavro's."""

    def __init__(self, schema: CompiledSchema) -> None:
        self._schema = schema
        try:
            self._compiled: Callable[[Mapping[str, Any]], bytes] | None = compile_writer(
                schema.parsed
            )
        except UnsupportedSchemaError:
            self._compiled = None

    def payload(self, record: Mapping[str, Any]) -> bytes:
        if self._compiled is not None:
            try:
                return self._compiled(record)
            except RecordMismatchError:
                pass  # fastavro fills in defaults, or raises the error it always raised
        out = io.BytesIO()
        write_payload(self._schema, record, out)
        return out.getvalue()


def read_payload(
    data: bytes,
    offset: int,
    writer: CompiledSchema,
    reader: CompiledSchema,
    *,
    fingerprint: bytes | None = None,
) -> dict[str, Any]:
    """Read the record at `data[offset:]` written with `writer`, resolved to `reader`."""

    def failure(error: type[DecodeError], reason: DecodeFailure, detail: str) -> DecodeError:
        return error(reason, reader.full_name, detail, fingerprint=fingerprint)

    if writer.full_name != reader.full_name:
        raise failure(
            IncompatibleSchemaError,
            DecodeFailure.WRONG_RECORD_TYPE,
            f"the writer schema is {writer.full_name} ({writer.version}): "
            "the record was published on the wrong topic",
        )
    stream = io.BytesIO(data)
    stream.seek(offset)
    # Resolution is skipped when the layouts are identical: the common case, and the cheaper one.
    resolve_to = None if writer.fingerprint == reader.fingerprint else reader.parsed
    try:
        record = schemaless_reader(stream, writer.parsed, resolve_to)
    except EOFError as exc:
        raise failure(CorruptRecordError, DecodeFailure.TRUNCATED, "the record ends early") from exc
    except SchemaResolutionError as exc:
        raise failure(
            IncompatibleSchemaError,
            DecodeFailure.UNRESOLVABLE,
            f"writer version {writer.version} does not resolve to the current schema: "
            f"{_describe(exc)}; an incompatible schema change was published",
        ) from exc
    except Exception as exc:
        # The bytes are untrusted and fastavro's reader signals garbage with many exception
        # types (ValueError, IndexError, UnicodeDecodeError, OverflowError, ...): all of them
        # mean the same thing here, and callers must only ever see a DecodeError.
        raise failure(CorruptRecordError, DecodeFailure.MALFORMED, _describe(exc)) from exc
    if stream.tell() != len(data):
        raise failure(
            CorruptRecordError,
            DecodeFailure.TRAILING_BYTES,
            f"{len(data) - stream.tell()} bytes follow the record",
        )
    # Every RecordType is an Avro record, which fastavro reads as a dict.
    return cast(dict[str, Any], record)


class SingleObjectCodec:
    """Avro single-object encoding: `C3 01`, fingerprint, payload. The default wire format."""

    def __init__(self, record_type: RecordType, catalog: SchemaCatalog | None = None) -> None:
        self._catalog = catalog or load_catalog()
        self._record_type = record_type
        self._schema = self._catalog.current_schema(record_type)
        self._header = SINGLE_OBJECT_MARKER + self._schema.fingerprint
        self._writer = PayloadWriter(self._schema)

    @property
    def record_type(self) -> RecordType:
        return self._record_type

    def encode(self, record: Mapping[str, Any]) -> bytes:
        return self._header + self._writer.payload(record)

    def decode(self, data: bytes) -> dict[str, Any]:
        name = self._schema.full_name
        if data[:2] != SINGLE_OBJECT_MARKER[: len(data)]:
            confluent = data[:1] == b"\x00"
            hint = (
                " (Confluent Schema Registry framing, which Kairos does not read: publish with "
                "kairos.schemas' single-object encoding, see docs/wire-format.md)"
                if confluent
                else ""
            )
            raise CorruptRecordError(
                DecodeFailure.BAD_MARKER,
                name,
                f"expected the single-object marker c3 01, got {data[:2].hex(' ')}{hint}",
            )
        if len(data) < SINGLE_OBJECT_HEADER_SIZE:
            raise CorruptRecordError(
                DecodeFailure.TRUNCATED,
                name,
                f"{len(data)} bytes, shorter than the {SINGLE_OBJECT_HEADER_SIZE}-byte header",
            )
        fingerprint = bytes(data[2:SINGLE_OBJECT_HEADER_SIZE])
        writer = self._catalog.by_fingerprint.get(fingerprint)
        if writer is None:
            raise UnknownSchemaError(
                DecodeFailure.UNKNOWN_FINGERPRINT,
                name,
                f"no known schema has fingerprint {fingerprint.hex()}: the producer used a schema "
                "newer than this Kairos or not from kairos.schemas",
                fingerprint=fingerprint,
            )
        return read_payload(
            data, SINGLE_OBJECT_HEADER_SIZE, writer, self._schema, fingerprint=fingerprint
        )


@dataclass(frozen=True)
class Codecs:
    """One codec per record type, as a service needs them."""

    schedule_event: Codec
    run_requested: Codec
    run_event: Codec
    ticker_state: Codec
    ticker_progress: Codec
    dead_letter: Codec
    calendar_event: Codec
    team_event: Codec


def make_codecs() -> Codecs:
    """The single-object codec of every record type, as every service needs them."""
    return Codecs(
        schedule_event=SingleObjectCodec(RecordType.SCHEDULE_EVENT),
        run_requested=SingleObjectCodec(RecordType.RUN_REQUESTED),
        run_event=SingleObjectCodec(RecordType.RUN_EVENT),
        ticker_state=SingleObjectCodec(RecordType.TICKER_STATE),
        ticker_progress=SingleObjectCodec(RecordType.TICKER_PROGRESS),
        dead_letter=SingleObjectCodec(RecordType.DEAD_LETTER),
        calendar_event=SingleObjectCodec(RecordType.CALENDAR_EVENT),
        team_event=SingleObjectCodec(RecordType.TEAM_EVENT),
    )


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= _DETAIL_LIMIT else text[: _DETAIL_LIMIT - 3] + "..."
