"""A job's `params_json` that is JSON but not an object: refused with the field named, never raised.

Found by `python -m bench.fuzz`: such a `RunRequested` raised `TypeError` out of the executor's
admission check, so the executor exited and met the same record again after every restart.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kairos.core.run_id import run_id
from kairos.core.schedule import Schedule
from kairos.services.executor.admission import Rejected, ServedJobs, read_request
from kairos.services.executor.handlers import Handlers
from kairos.services.executor.settings import BUILT_IN_KINDS
from kairos.streams.dedupe.base import SourceRecord
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import definition_record
from kairos.streams.wire.schedule_events import RejectedEvent, read_schedule_event

pytestmark = pytest.mark.unit

CODECS = make_codecs()
NOMINAL = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)
NOT_OBJECTS = ["[1, 2]", "null", '"text"', "3", "{"]


def a_run(params_json: str) -> dict[str, object]:
    run = run_id("nightly", NOMINAL)
    return {
        "run_id": run,
        "schedule_id": "nightly",
        "nominal_at": NOMINAL,
        "due_at": NOMINAL,
        "fired_at": NOMINAL,
        "lateness_ms": 0,
        "job": {"kind": "shell", "params_json": params_json},
        "attempt": 1,
        "max_attempts": 1,
        "timeout_ms": 60_000,
        "retry_backoff_ms": 1_000,
        "overlap": "allow",
        "schedules_partition": 0,
        "schedule_offset": 0,
        "ticker_instance": "t1",
        "owner": None,
    }


@pytest.mark.parametrize("params_json", NOT_OBJECTS)
def test_the_executor_dead_letters_a_run_whose_params_are_not_an_object(params_json: str) -> None:
    record = a_run(params_json)
    verdict = read_request(
        str(record["run_id"]).encode(),
        CODECS.run_requested.encode(record),
        SourceRecord("kairos.runs", 0, 0),
        CODECS.run_requested,
        ServedJobs(BUILT_IN_KINDS, Handlers()),
    )
    assert isinstance(verdict, Rejected)
    assert verdict.error_class == "RunRequestInvalidError"
    assert "job.params_json is" in verdict.reason
    assert "must be a JSON object of the job's fields" in verdict.reason


@pytest.mark.parametrize("params_json", NOT_OBJECTS)
def test_the_schedules_topic_refuses_such_a_definition_naming_the_field(params_json: str) -> None:
    definition = definition_record(Schedule(id="nightly", cron="0 2 * * *"))
    definition["job"] = {"kind": "shell", "params_json": params_json}
    event = {
        "schedule_id": "nightly",
        "event_id": "0b6f2c4e-6a43-4d8e-9a59-5c1f2f9d8e11",
        "change": "upserted",
        "definition": definition,
        "revision": 0,
        "changed_by": "test",
        "changed_at": NOMINAL,
        "reason": None,
    }
    change = read_schedule_event(
        CODECS.schedule_event,
        key=b"nightly",
        value=CODECS.schedule_event.encode(event),
        partition=partition_for(b"nightly", 12),
        offset=0,
        timestamp=NOMINAL,
        partitions=12,
    )
    assert isinstance(change, RejectedEvent)
    assert change.reason.startswith("invalid definition: job.params_json is")
