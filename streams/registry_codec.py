"""Confluent Schema Registry framing: magic byte `00`, 4-byte big-endian schema id, Avro payload.

Thin on purpose: the client registers and fetches schemas (and caches them); framing and the
payload go through the same code as single-object records, so both formats fail with the same
typed errors. confluent-kafka's AvroDeserializer would raise registry failures and payload
failures from one call, and a consumer that cannot tell them apart would dead-letter a good
record because the registry was briefly unreachable.

Subjects follow the record name strategy (subject = the record's full name, e.g.
`io.kairos.v1.ScheduleEvent`), so one subject holds one record type whatever the topic prefix.
Tested only against confluent-kafka's in-memory `mock://` registry, not a real one.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from kairos.streams.avro_schemas import (
    CompiledSchema,
    RecordType,
    SchemaCatalog,
    SchemaDefinitionError,
    compile_schema_json,
    load_catalog,
)
from kairos.streams.codec import (
    SINGLE_OBJECT_MARKER,
    CorruptRecordError,
    DecodeFailure,
    EncodeError,
    IncompatibleSchemaError,
    SchemaRegistryUnavailableError,
    SingleObjectCodec,
    UnknownSchemaError,
    read_payload,
    write_payload,
)

CONFLUENT_MAGIC = b"\x00"
CONFLUENT_HEADER_SIZE = len(CONFLUENT_MAGIC) + 4
_NOT_FOUND = 404


def registry_client(url: str) -> SchemaRegistryClient:
    """A client for the registry at `url`; `mock://NAME` gives confluent-kafka's in-memory one."""
    return SchemaRegistryClient.new_client({"url": url})


class RegistryCodec:
    """Writes Confluent framing; reads it, and single-object records of registry-less producers."""

    def __init__(
        self,
        record_type: RecordType,
        client: SchemaRegistryClient,
        *,
        auto_register: bool = True,
        catalog: SchemaCatalog | None = None,
    ) -> None:
        self._catalog = catalog or load_catalog()
        self._record_type = record_type
        self._schema = self._catalog.current_schema(record_type)
        self._client = client
        self._auto_register = auto_register
        self._single_object = SingleObjectCodec(record_type, self._catalog)
        self._schema_id: int | None = None
        self._writers: dict[int, CompiledSchema] = {}

    @property
    def record_type(self) -> RecordType:
        return self._record_type

    def encode(self, record: Mapping[str, Any]) -> bytes:
        schema_id = self._schema_id if self._schema_id is not None else self._register()
        out = io.BytesIO()
        out.write(CONFLUENT_MAGIC + schema_id.to_bytes(4, "big"))
        write_payload(self._schema, record, out)
        return out.getvalue()

    def decode(self, data: bytes) -> dict[str, Any]:
        if data[:2] == SINGLE_OBJECT_MARKER:
            return self._single_object.decode(data)
        name = self._schema.full_name
        if data[:1] != CONFLUENT_MAGIC[: len(data)]:
            raise CorruptRecordError(
                DecodeFailure.BAD_MARKER,
                name,
                f"expected magic byte 00 or marker c3 01, got {data[:2].hex(' ')}",
            )
        if len(data) < CONFLUENT_HEADER_SIZE:
            raise CorruptRecordError(
                DecodeFailure.TRUNCATED,
                name,
                f"{len(data)} bytes, shorter than the {CONFLUENT_HEADER_SIZE}-byte header",
            )
        schema_id = int.from_bytes(data[1:CONFLUENT_HEADER_SIZE], "big")
        writer = self._writers.get(schema_id) or self._fetch_writer(schema_id)
        return read_payload(data, CONFLUENT_HEADER_SIZE, writer, self._schema, schema_id=schema_id)

    def _register(self) -> int:
        subject = self._schema.full_name
        schema = Schema(self._schema.schema_json, "AVRO")
        schema_id: int | None
        try:
            if self._auto_register:
                schema_id = self._client.register_schema(subject, schema)
            else:
                schema_id = self._client.lookup_schema(subject, schema).schema_id
        except SchemaRegistryError as exc:
            if exc.http_status_code >= 500:
                raise SchemaRegistryUnavailableError(subject, str(exc)) from exc
            raise EncodeError(
                subject,
                f"the schema registry refused the current schema under subject {subject}: {exc}",
            ) from exc
        except Exception as exc:
            # Transport failures surface as the HTTP library's own exceptions, which differ
            # between confluent-kafka versions: all of them mean "try again later".
            raise SchemaRegistryUnavailableError(subject, repr(exc)) from exc
        if schema_id is None:
            raise EncodeError(subject, "the schema registry returned no schema id")
        self._schema_id = schema_id
        return schema_id

    def _fetch_writer(self, schema_id: int) -> CompiledSchema:
        name = self._schema.full_name
        try:
            registered = self._client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == _NOT_FOUND:
                raise UnknownSchemaError(
                    DecodeFailure.UNKNOWN_SCHEMA_ID,
                    name,
                    f"the schema registry has no schema {schema_id}",
                    schema_id=schema_id,
                ) from exc
            raise SchemaRegistryUnavailableError(name, str(exc)) from exc
        except Exception as exc:  # transport failures, as in _register
            raise SchemaRegistryUnavailableError(name, repr(exc)) from exc
        if registered.schema_type not in (None, "AVRO") or registered.references:
            raise IncompatibleSchemaError(
                DecodeFailure.UNRESOLVABLE,
                name,
                f"registry schema {schema_id} is {registered.schema_type or 'AVRO'} with "
                f"{len(registered.references or [])} references; Kairos reads self-contained Avro",
                schema_id=schema_id,
            )
        try:
            writer = compile_schema_json(
                registered.schema_str or "", f"registry schema {schema_id}", name
            )
        except SchemaDefinitionError as exc:
            raise IncompatibleSchemaError(
                DecodeFailure.UNRESOLVABLE,
                name,
                f"registry schema {schema_id} is not valid Avro",
                schema_id=schema_id,
            ) from exc
        # A registered copy of a known version reads exactly like the catalog's own.
        writer = self._catalog.by_fingerprint.get(writer.fingerprint, writer)
        self._writers[schema_id] = writer
        return writer
