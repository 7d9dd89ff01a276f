"""Loads the `.avsc` files of `kairos.schemas`: the one place that turns files into schemas.

Each file holds one named type, named `<full name>.avsc`, and refers to the types of other files by
full name. A file's type is compiled into one self-contained schema by inlining each referenced
type at its first use, depth first, and referring to it by name afterwards: the form Avro's
parsing canonical form (and so the fingerprint) is defined on, and the form a Java or Go parser
builds from the same files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from kairos.core.errors import KairosError

CURRENT = "current"
"""Version label of the schemas at the top of `kairos.schemas`, the ones every writer uses."""

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})


class RecordType(StrEnum):
    """The full name of every record published on a Kairos topic."""

    SCHEDULE_EVENT = "io.kairos.v1.ScheduleEvent"
    RUN_REQUESTED = "io.kairos.v1.RunRequested"
    RUN_EVENT = "io.kairos.v1.RunEvent"
    TICKER_STATE = "io.kairos.v1.TickerStateRecord"
    TICKER_PROGRESS = "io.kairos.v1.TickerProgress"
    DEAD_LETTER = "io.kairos.v1.DeadLetter"
    CALENDAR_EVENT = "io.kairos.v1.CalendarEvent"
    TEAM_EVENT = "io.kairos.v1.TeamEvent"


class SchemaDefinitionError(KairosError):
    """An `.avsc` file set is inconsistent: a fix to the files, never to the data."""

    def __init__(self, version: str, name: str, problem: str) -> None:
        self.version = version
        self.name = name
        self.problem = problem
        super().__init__(f"schema {name} ({version}): {problem}")


@dataclass(frozen=True)
class CompiledSchema:
    """One version of one named type, compiled into a self-contained schema."""

    version: str
    full_name: str
    schema_json: str
    """The self-contained schema as JSON text, as registered in a Confluent Schema Registry."""
    parsed: Any
    """fastavro's parsed form, for `schemaless_writer` and `schemaless_reader`."""
    fingerprint: bytes
    """The 8-byte CRC-64-AVRO fingerprint of the parsing canonical form, in wire order."""


@dataclass(frozen=True)
class SchemaCatalog:
    """Every version of every schema this process knows: what decoders resolve writers against."""

    current: Mapping[str, CompiledSchema]
    history: Mapping[str, Mapping[str, CompiledSchema]]
    """Released versions by label (`v1`, `v2`, ...), then by full name."""
    by_fingerprint: Mapping[bytes, CompiledSchema]

    def current_schema(self, full_name: str) -> CompiledSchema:
        try:
            return self.current[full_name]
        except KeyError:
            raise SchemaDefinitionError(CURRENT, full_name, "no such schema file") from None


def read_avsc_files(directory: Traversable) -> dict[str, dict[str, Any]]:
    """Every `.avsc` file of `directory`, by the full name its file name gives."""
    raw: dict[str, dict[str, Any]] = {}
    for entry in directory.iterdir():
        if entry.is_file() and entry.name.endswith(".avsc"):
            raw[entry.name.removesuffix(".avsc")] = json.loads(entry.read_text(encoding="utf-8"))
    return raw


def compile_schemas(raw: Mapping[str, dict[str, Any]], version: str) -> dict[str, CompiledSchema]:
    """Compile each file's type of one version (`raw`: full name -> file content)."""
    compiled: dict[str, CompiledSchema] = {}
    for full_name, definition in raw.items():
        declared = _full_name(definition, "")
        if declared != full_name:
            raise SchemaDefinitionError(version, full_name, f"the file defines {declared}")
        expanded = _Inliner(raw, version).expand(definition, "")
        schema_json = json.dumps(expanded, separators=(",", ":"))
        compiled[full_name] = compile_schema_json(schema_json, version, full_name)
    return compiled


def compile_schema_json(schema_json: str, version: str, name: str = "schema") -> CompiledSchema:
    """Compile one self-contained schema given as JSON text; `name` labels errors."""
    try:
        parsed = parse_schema(json.loads(schema_json), named_schemas={})
    except Exception as exc:  # fastavro raises several types for a schema it rejects
        raise SchemaDefinitionError(version, name, f"not a valid Avro schema: {exc}") from exc
    full_name = parsed["name"] if isinstance(parsed, dict) and "name" in parsed else str(parsed)
    return CompiledSchema(
        version=version,
        full_name=full_name,
        schema_json=schema_json,
        parsed=parsed,
        # fastavro renders CRC-64-AVRO in the byte order single-object encoding puts on the wire
        fingerprint=bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO")),
    )


@cache
def load_catalog() -> SchemaCatalog:
    """The current schemas and every released version under `history/`, loaded once."""
    root = files("kairos.schemas")
    current = compile_schemas(read_avsc_files(root), CURRENT)
    history = {
        entry.name: compile_schemas(read_avsc_files(entry), entry.name)
        for entry in sorted(root.joinpath("history").iterdir(), key=lambda e: e.name)
        if entry.is_dir()
    }
    by_fingerprint: dict[bytes, CompiledSchema] = {}
    # Current first: a released version with the same fingerprint is the same wire layout.
    for schemas in (current, *history.values()):
        for schema in schemas.values():
            by_fingerprint.setdefault(schema.fingerprint, schema)
    return SchemaCatalog(current=current, history=history, by_fingerprint=by_fingerprint)


def _full_name(definition: Mapping[str, Any], enclosing_namespace: str) -> str:
    name = str(definition["name"])
    if "." in name:
        return name
    namespace = str(definition.get("namespace", enclosing_namespace))
    return f"{namespace}.{name}" if namespace else name


class _Inliner:
    """Expands one file's type: each other file's type inlined at its first use."""

    def __init__(self, files_by_name: Mapping[str, dict[str, Any]], version: str) -> None:
        self._files = files_by_name
        self._version = version
        self._defined: set[str] = set()

    def expand(self, schema: Any, namespace: str) -> Any:
        if isinstance(schema, str):
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            return [self.expand(branch, namespace) for branch in schema]
        if not isinstance(schema, dict):
            raise SchemaDefinitionError(self._version, str(schema), "not a schema")
        kind = schema.get("type")
        expanded = dict(schema)
        if kind in _NAMED:
            full_name = _full_name(schema, namespace)
            if full_name in self._defined:
                raise SchemaDefinitionError(self._version, full_name, "defined twice")
            self._defined.add(full_name)
            namespace = full_name.rpartition(".")[0]
            if "fields" in schema:
                expanded["fields"] = [
                    {**field, "type": self.expand(field["type"], namespace)}
                    for field in schema["fields"]
                ]
        elif kind in ("array", "map"):
            key = "items" if kind == "array" else "values"
            expanded[key] = self.expand(schema[key], namespace)
        elif kind not in _PRIMITIVES:
            expanded["type"] = self.expand(kind, namespace)
        return expanded

    def _reference(self, name: str, namespace: str) -> Any:
        if name in _PRIMITIVES:
            return name
        full_name = name if "." in name or not namespace else f"{namespace}.{name}"
        if full_name in self._defined:
            return full_name
        if full_name in self._files:
            return self.expand(self._files[full_name], "")
        raise SchemaDefinitionError(
            self._version, full_name, "unknown type: define it earlier or in a file of its own"
        )
