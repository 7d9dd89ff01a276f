"""The lifecycle fields of a schedule: `deadline`, `pause_on_failure`, `max_runs`, `after_last_run`.

Each is read from a schedules file (YAML and JSON), refused with the field and the fix when it
is wrong, and carried unchanged through the Avro definition of the schedules topic.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from pydantic import ValidationError

from kairos.core.schedule import Schedule, SchedulesInvalidError, load_schedules, parse_schedule
from kairos.core.schedule_lifecycle import (
    LONGEST_DEADLINE,
    MOST_FAILURES_IN_A_ROW,
    MOST_RUNS,
    AfterLastRun,
    Deadline,
)
from kairos.streams.wire.avro_schemas import RecordType, load_catalog
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import definition_record, schedule_from_definition

pytestmark = pytest.mark.unit

CODECS = make_codecs()
CATALOG = load_catalog()


def cron(**fields: Any) -> dict[str, Any]:
    return {"id": "nightly", "cron": "@daily", **fields}


def through_the_topic(schedule: Schedule) -> Schedule:
    """The schedule as a ticker reads it back from an `upserted` event of the schedules topic."""
    decoded = CODECS.schedule_event.decode(CODECS.schedule_event.encode(_upserted(schedule)))
    return schedule_from_definition(decoded["definition"])


def _upserted(schedule: Schedule) -> dict[str, Any]:
    return {
        "schedule_id": schedule.id,
        "event_id": uuid.UUID(int=1),
        "change": "upserted",
        "definition": definition_record(schedule),
        "revision": 0,
        "changed_by": "test",
        "changed_at": datetime(2027, 1, 1, tzinfo=UTC),
        "reason": None,
    }


def test_by_default_a_schedule_has_no_deadline_no_failure_pause_and_no_run_limit() -> None:
    schedule = parse_schedule(cron())

    assert schedule.deadline is None
    assert schedule.pause_on_failure is None
    assert schedule.max_runs is None
    assert schedule.after_last_run is AfterLastRun.PAUSE


def test_a_schedules_file_sets_every_lifecycle_field_in_yaml_and_json() -> None:
    yaml_text = """
schedules:
  - id: nightly
    cron: "0 2 * * *"
    deadline: {start_by: 10m, finish_by: PT1H30M}
    pause_on_failure: 3
    max_runs: 5
    after_last_run: delete
"""
    json_text = (
        '{"schedules": [{"id": "nightly", "cron": "0 2 * * *", '
        '"deadline": {"start_by": "10m", "finish_by": "1h30m"}, "pause_on_failure": 3, '
        '"max_runs": 5, "after_last_run": "delete"}]}'
    )

    [from_yaml] = load_schedules(yaml_text, "yaml")
    [from_json] = load_schedules(json_text, "json")

    assert from_yaml == from_json
    assert from_yaml.deadline == Deadline(
        start_by=timedelta(minutes=10), finish_by=timedelta(minutes=90)
    )
    assert (from_yaml.pause_on_failure, from_yaml.max_runs) == (3, 5)
    assert from_yaml.after_last_run is AfterLastRun.DELETE


@pytest.mark.parametrize(
    "deadline",
    [
        pytest.param({"start_by": "5m"}, id="start-only"),
        pytest.param({"finish_by": "2h"}, id="finish-only"),
        pytest.param({"start_by": "1h", "finish_by": "1h"}, id="equal"),
        pytest.param({"start_by": "1ms", "finish_by": "366d"}, id="at-the-bounds"),
    ],
)
def test_a_deadline_may_set_either_or_both(deadline: dict[str, str]) -> None:
    schedule = parse_schedule(cron(deadline=deadline))

    assert schedule.deadline is not None
    assert through_the_topic(schedule) == schedule


REFUSED = [
    pytest.param(
        cron(deadline={}), "deadline", ["names no deadline", "start_by, finish_by"], id="empty"
    ),
    pytest.param(
        cron(deadline={"start_by": "1h", "finish_by": "10m"}),
        "deadline.finish_by",
        ["10m is earlier than start_by 1h", "make finish_by at least start_by"],
        id="finish-before-start",
    ),
    pytest.param(
        cron(deadline={"start_by": "0s"}),
        "deadline.start_by",
        ["must be longer than zero"],
        id="zero",
    ),
    pytest.param(
        cron(deadline={"finish_by": "366d1ms"}),
        "deadline.finish_by",
        ["longer than the maximum, 366d", "shorten it"],
        id="over-a-year",
    ),
    pytest.param(
        cron(deadline={"start_by": 600}),
        "deadline.start_by",
        ["needs a unit"],
        id="bare-number",
    ),
    pytest.param(
        cron(deadline={"start": "10m"}), "deadline.start", ["unknown field"], id="misspelled"
    ),
    pytest.param(
        cron(pause_on_failure=0),
        "pause_on_failure",
        ["greater than or equal to 1"],
        id="zero-failures",
    ),
    pytest.param(
        cron(pause_on_failure=MOST_FAILURES_IN_A_ROW + 1),
        "pause_on_failure",
        [f"less than or equal to {MOST_FAILURES_IN_A_ROW}"],
        id="too-many-failures",
    ),
    pytest.param(cron(max_runs=0), "max_runs", ["greater than or equal to 1"], id="zero-runs"),
    pytest.param(
        cron(max_runs=MOST_RUNS + 1),
        "max_runs",
        [f"less than or equal to {MOST_RUNS}"],
        id="runs-beyond-avro-int",
    ),
    pytest.param(
        cron(after_last_run="delete"),
        "after_last_run",
        ["max_runs is not set", "max_runs: 1"],
        id="delete-without-max-runs",
    ),
    pytest.param(
        cron(max_runs=1, after_last_run="archive"),
        "after_last_run",
        ["'pause' or 'delete'"],
        id="unknown-action",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("data", "field", "fragments"), REFUSED)
def test_a_wrong_lifecycle_field_is_refused_with_the_field_and_the_fix(
    data: dict[str, Any], field: str, fragments: list[str]
) -> None:
    with pytest.raises(SchedulesInvalidError) as caught:
        parse_schedule(data)

    [error] = caught.value.errors
    assert error.field == field
    for fragment in fragments:
        assert fragment in error.problem


def test_every_lifecycle_field_travels_through_the_schedules_topic_unchanged() -> None:
    schedule = parse_schedule(
        cron(
            deadline={"start_by": "10m", "finish_by": "1h"},
            pause_on_failure=MOST_FAILURES_IN_A_ROW,
            max_runs=MOST_RUNS,
            after_last_run="delete",
        )
    )

    assert through_the_topic(schedule) == schedule


def test_an_event_of_a_writer_before_these_fields_reads_with_their_defaults() -> None:
    v4 = CATALOG.history["v4"][RecordType.SCHEDULE_EVENT]
    event = _upserted(parse_schedule(cron()))
    for field in ("deadline", "pause_on_failure", "max_runs", "after_last_run"):
        del event["definition"][field]
    written = io.BytesIO()
    schemaless_writer(written, v4.parsed, event)

    read = schemaless_reader(
        io.BytesIO(written.getvalue()), v4.parsed, CATALOG.current[RecordType.SCHEDULE_EVENT].parsed
    )

    assert isinstance(read, dict)
    assert schedule_from_definition(read["definition"]) == parse_schedule(cron())


def test_an_action_newer_than_this_version_is_refused_with_its_field_named() -> None:
    record = definition_record(parse_schedule(cron(max_runs=1)))
    record["after_last_run"] = "unknown"

    with pytest.raises(ValidationError) as caught:
        schedule_from_definition(record)

    [error] = caught.value.errors()
    assert error["loc"] == ("after_last_run",)


def test_a_deadline_record_beyond_its_bound_is_refused_with_its_field_named() -> None:
    record = definition_record(parse_schedule(cron(deadline={"start_by": "1m"})))
    record["deadline"] = {"start_by_ms": LONGEST_DEADLINE // timedelta(milliseconds=1) + 1,
                          "finish_by_ms": None}  # fmt: skip

    with pytest.raises(ValidationError) as caught:
        schedule_from_definition(record)

    [error] = caught.value.errors()
    assert error["loc"] == ("deadline", "start_by")
    assert "longer than the maximum, 366d" in error["msg"]
