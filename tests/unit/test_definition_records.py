"""Definitions read back into schedules: validated once per shape, shared where equal, never
less checked than a fresh validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from kairos.core.schedule import JobSpec, Schedule
from kairos.core.schedule_dependencies import PeriodMatch
from kairos.streams.wire.avro_schemas import RecordType
from kairos.streams.wire.codec import SingleObjectCodec
from kairos.streams.wire.records import (
    definition_record,
    schedule_event_record,
    schedule_from_definition,
)

T0 = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def _templated(schedule_id: str) -> Schedule:
    return Schedule(
        id=schedule_id,
        cron="30 2 * * MON-FRI",
        timezone="Europe/Berlin",
        jitter=timedelta(seconds=30),
        labels={"team": "billing", "tier": "1"},
        job=JobSpec.model_validate({"kind": "http", "url": "https://billing.internal/settle"}),
    )


def test_schedules_of_one_template_are_each_their_own_schedule() -> None:
    first, second = _templated("settle-1"), _templated("settle-2")

    read = [schedule_from_definition(definition_record(s)) for s in (first, second, first)]

    assert read == [first, second, first]
    assert [s.id for s in read] == ["settle-1", "settle-2", "settle-1"]


def test_a_known_shape_under_an_invalid_id_is_refused_with_the_id_named() -> None:
    schedule_from_definition(definition_record(_templated("settle-1")))
    record = {**definition_record(_templated("settle-1")), "id": "not valid!"}

    with pytest.raises(ValidationError) as refused:
        schedule_from_definition(record)

    assert refused.value.errors()[0]["loc"] == ("id",)


def test_a_shape_that_differs_in_any_other_field_is_validated_afresh() -> None:
    schedule_from_definition(definition_record(_templated("settle-1")))
    record = {**definition_record(_templated("settle-2")), "timezone": "Mars/Olympus"}

    with pytest.raises(ValidationError) as refused:
        schedule_from_definition(record)

    assert refused.value.errors()[0]["loc"] == ("timezone",)


def test_equal_jobs_and_given_fields_are_held_once() -> None:
    first = schedule_from_definition(definition_record(_templated("settle-1")))
    second = schedule_from_definition(definition_record(_templated("settle-2")))

    assert first.job is second.job
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__


def test_what_a_schedule_waits_for_and_whom_it_grants_travel_in_its_definition() -> None:
    codec = SingleObjectCodec(RecordType.SCHEDULE_EVENT)
    waiting = Schedule.model_validate(
        {
            "id": "ledger/export",
            "cron": "0 2 * * *",
            "timezone": "America/New_York",
            "upstream": [
                {"schedule": "settlement/close", "match": "same_local_date"},
                {"schedule": "fx/rates"},
            ],
            "upstream_wait": "3h",
            "upstream_timeout": "skip",
            "downstream_teams": ["audit"],
        }
    )

    event = schedule_event_record(
        waiting.id, "upserted", waiting, changed_by="ledger", changed_at=T0, reason=None
    )
    read = schedule_from_definition(codec.decode(codec.encode(event))["definition"])

    assert read == waiting
    assert read.upstream[1].match is PeriodMatch.LATEST_BEFORE
    assert read.upstream_wait == timedelta(hours=3)
    plain = schedule_from_definition(definition_record(_templated("settle-1")))
    assert plain.upstream == () and "upstream_wait" not in plain.model_fields_set


def test_a_period_rule_newer_than_the_reader_is_refused_with_the_field_named() -> None:
    record = definition_record(_templated("settle-1"))
    record["upstream"] = [{"schedule_id": "settlement/close", "match": "unknown"}]

    with pytest.raises(ValidationError) as refused:
        schedule_from_definition(record)

    assert refused.value.errors()[0]["loc"] == ("upstream", 0, "match")
