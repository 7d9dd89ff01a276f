"""The one reader of `RunRequested` records gives each field of the schema under its own name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kairos.streams.wire.records import RunRequestedRecord, read_run_requested

pytestmark = pytest.mark.unit

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "io.kairos.v1.RunRequested.avsc"


def test_every_field_of_the_schema_is_read_under_its_name() -> None:
    names = [field["name"] for field in json.loads(SCHEMA.read_text())["fields"]]
    assert sorted(names) == sorted(RunRequestedRecord.__dataclass_fields__)
    record = {name: f"value of {name}" for name in reversed(names)}
    read = read_run_requested(record)
    assert {name: getattr(read, name) for name in names} == record
