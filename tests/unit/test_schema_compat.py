"""Schema rules and evolution: every released version and the current one read each other.

`schemas/history/v<N>/` holds every released version, the current one included. The
compatibility check writes generated records with one version and reads them with another through
Avro schema resolution, both ways: the current reader reads every earlier writer (backward) and
every earlier reader reads the current writer (forward).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from fastavro.read import SchemaResolutionError
from fastavro.schema import load_schema, to_parsing_canonical_form
from hypothesis import given, settings
from hypothesis import strategies as st

import kairos.schemas
from kairos.streams.wire.avro_schemas import (
    CompiledSchema,
    RecordType,
    SchemaDefinitionError,
    compile_schemas,
    load_catalog,
    read_avsc_files,
)

pytestmark = pytest.mark.unit

SCHEMAS_DIR = Path(kairos.schemas.__file__).parent
CATALOG = load_catalog()
_MAX_TIMESTAMP_MS = 4_102_444_800_000  # 2100-01-01: within the range datetime can hold
_PRIMITIVE_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "float": st.floats(allow_nan=False, width=32),
    "double": st.floats(allow_nan=False),
    "bytes": st.binary(max_size=20),
    "string": st.text(max_size=20),
}


def records(schema: Any, named: dict[str, st.SearchStrategy[Any]] | None = None) -> Any:
    """A strategy for values of a fastavro-parsed schema: every branch, symbol and null."""
    named = {} if named is None else named
    if isinstance(schema, str):
        return _PRIMITIVE_STRATEGIES[schema] if schema in _PRIMITIVE_STRATEGIES else named[schema]
    if isinstance(schema, list):
        return st.one_of([records(branch, named) for branch in schema])
    kind = schema["type"]
    logical = schema.get("logicalType")
    strategy: st.SearchStrategy[Any]
    if logical == "timestamp-millis":
        strategy = st.integers(0, _MAX_TIMESTAMP_MS)
    elif logical == "date":
        strategy = st.integers(0, _MAX_TIMESTAMP_MS // 86_400_000)
    elif logical == "uuid":
        strategy = st.uuids()
    elif kind == "record":
        fields = {field["name"]: records(field["type"], named) for field in schema["fields"]}
        strategy = st.fixed_dictionaries(fields)
    elif kind == "enum":
        strategy = st.sampled_from(schema["symbols"])
    elif kind == "array":
        strategy = st.lists(records(schema["items"], named), max_size=3)
    elif kind == "map":
        strategy = st.dictionaries(
            st.text(max_size=5), records(schema["values"], named), max_size=3
        )
    elif kind == "fixed":
        strategy = st.binary(min_size=schema["size"], max_size=schema["size"])
    else:
        return records(kind, named)
    if kind in ("record", "enum", "fixed"):
        named[schema["name"]] = strategy
    return strategy


def read_across(writer: CompiledSchema, reader: CompiledSchema, record: Any) -> None:
    """Write `record` with `writer`, read it with `reader`; fail unless resolution works."""
    out = io.BytesIO()
    schemaless_writer(out, writer.parsed, record)
    as_written = schemaless_reader(io.BytesIO(out.getvalue()), writer.parsed, None)
    as_read = schemaless_reader(io.BytesIO(out.getvalue()), writer.parsed, reader.parsed)
    assert isinstance(as_read, dict)
    assert isinstance(as_written, dict)
    # A field typed alike in both versions must carry its value across unchanged.
    for name in _identically_typed_fields(writer, reader):
        assert as_read[name] == as_written[name], f"{reader.full_name}.{name} changed value"


def _identically_typed_fields(writer: CompiledSchema, reader: CompiledSchema) -> Iterator[str]:
    writer_types = {f["name"]: f["type"] for f in json.loads(writer.schema_json)["fields"]}
    for field in json.loads(reader.schema_json)["fields"]:
        if writer_types.get(field["name"], object()) == field["type"]:
            yield field["name"]


VERSION_PAIRS = [
    pytest.param(record_type, version, id=f"{record_type.name}-{version}")
    for record_type in RecordType
    for version, schemas in CATALOG.history.items()
    if record_type in schemas
]


@settings(max_examples=60, deadline=None)
@pytest.mark.parametrize(("record_type", "version"), VERSION_PAIRS)
@given(data=st.data())
def test_the_current_reader_reads_every_released_writer(
    record_type: RecordType, version: str, data: st.DataObject
) -> None:
    released = CATALOG.history[version][record_type]
    record = data.draw(records(released.parsed))

    read_across(writer=released, reader=CATALOG.current[record_type], record=record)


@settings(max_examples=60, deadline=None)
@pytest.mark.parametrize(("record_type", "version"), VERSION_PAIRS)
@given(data=st.data())
def test_every_released_reader_reads_the_current_writer(
    record_type: RecordType, version: str, data: st.DataObject
) -> None:
    current = CATALOG.current[record_type]
    record = data.draw(records(current.parsed))

    read_across(writer=current, reader=CATALOG.history[version][record_type], record=record)


@pytest.mark.parametrize("record_type", RecordType)
def test_the_current_schema_is_committed_as_a_released_version(record_type: RecordType) -> None:
    released = {
        version
        for version, schemas in CATALOG.history.items()
        if record_type in schemas
        and schemas[record_type].fingerprint == (CATALOG.current[record_type].fingerprint)
    }

    assert released, (
        f"{record_type} changed: copy every schemas/*.avsc into a new schemas/history/v<N+1>/ "
        "so that records written with it stay decodable after the next change"
    )


def _changed(record_type: RecordType, edit: Any) -> CompiledSchema:
    """The current schema of `record_type` with `edit` applied to its file's JSON."""
    raw = read_avsc_files(files("kairos.schemas"))
    edit(raw[record_type])
    return compile_schemas(raw, "edited")[record_type]


def _add_required_field(schema: dict[str, Any]) -> None:
    schema["fields"].append({"name": "region", "type": "string", "doc": "No default."})


def _drop_required_field(schema: dict[str, Any]) -> None:
    schema["fields"] = [f for f in schema["fields"] if f["name"] != "changed_by"]


def _retype_field(schema: dict[str, Any]) -> None:
    for field in schema["fields"]:
        if field["name"] == "changed_by":
            field["type"] = "long"


@pytest.mark.parametrize(
    ("edit", "direction"),
    [
        pytest.param(_add_required_field, "backward", id="field-added-without-default"),
        pytest.param(_drop_required_field, "forward", id="field-without-default-removed"),
        pytest.param(_retype_field, "both", id="field-type-changed"),
    ],
)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_the_check_fails_on_an_incompatible_change(
    edit: Any, direction: str, data: st.DataObject
) -> None:
    current = CATALOG.current[RecordType.SCHEDULE_EVENT]
    edited = _changed(RecordType.SCHEDULE_EVENT, edit)

    if direction in ("backward", "both"):
        with pytest.raises(SchemaResolutionError):
            read_across(writer=current, reader=edited, record=data.draw(records(current.parsed)))
    if direction in ("forward", "both"):
        with pytest.raises(SchemaResolutionError):
            read_across(writer=edited, reader=current, record=data.draw(records(edited.parsed)))


CURRENT_FILES = read_avsc_files(files("kairos.schemas"))


def _rule_violations(schema: Any, path: str) -> Iterator[str]:
    """Where a schema breaks the house rules of docs/wire-format.md."""
    if isinstance(schema, list):
        for branch in schema:
            yield from _rule_violations(branch, path)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed") and not schema.get("doc"):
        yield f"{path}: named type {schema['name']} has no doc"
    if kind == "enum" and schema.get("default") not in schema["symbols"]:
        yield f"{path}: enum {schema['name']} has no default symbol for newer symbols"
    for field in schema.get("fields", ()):
        where = f"{path}.{field['name']}"
        if not field.get("doc"):
            yield f"{where}: no doc"
        branches = field["type"] if isinstance(field["type"], list) else []
        if "null" in branches and (branches[0] != "null" or field.get("default", 0) is not None):
            yield f'{where}: an optional field is ["null", T] with default null'
        yield from _rule_violations(field["type"], where)
    for key in ("items", "values", "type"):
        if isinstance(schema.get(key), (dict, list)):
            yield from _rule_violations(schema[key], path)


@pytest.mark.parametrize("full_name", sorted(CURRENT_FILES))
def test_every_schema_file_follows_the_house_rules(full_name: str) -> None:
    schema = CURRENT_FILES[full_name]

    assert schema.get("namespace") == "io.kairos.v1"
    assert list(_rule_violations(schema, full_name)) == []


SCHEMA_FILES = [
    pytest.param(path, id=str(path.relative_to(SCHEMAS_DIR)))
    for path in sorted(SCHEMAS_DIR.rglob("*.avsc"))
]


@pytest.mark.parametrize("path", SCHEMA_FILES)
def test_compiled_schemas_have_the_canonical_form_fastavro_gives_the_files(path: Path) -> None:
    version = "current" if path.parent == SCHEMAS_DIR else path.parent.name
    compiled = CATALOG.current if version == "current" else CATALOG.history[version]
    full_name = path.name.removesuffix(".avsc")

    expected = to_parsing_canonical_form(load_schema(str(path)))

    assert to_parsing_canonical_form(compiled[full_name].parsed) == expected


def _record(name: str, *fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": "t", "doc": "d", "fields": list(fields)}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        pytest.param(
            {"t.A": _record("A", {"name": "b", "type": "t.Missing", "doc": "d"})},
            "unknown type",
            id="unknown-reference",
        ),
        pytest.param({"t.A": _record("B")}, "the file defines t.B", id="file-name-mismatch"),
        pytest.param(
            {
                "t.A": _record("A", {"name": "b", "type": _record("B"), "doc": "d"}),
                "t.C": _record("C", {"name": "a", "type": "t.A", "doc": "d"},
                               {"name": "b", "type": _record("B"), "doc": "d"}),
            },
            "defined twice",
            id="type-defined-twice",
        ),
    ],
)  # fmt: skip
def test_an_inconsistent_file_set_is_a_schema_definition_error(
    raw: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SchemaDefinitionError, match=problem):
        compile_schemas(raw, "test")
