"""Between the domain (`kairos.core`) and the Avro records of `schemas/`: one mapping each way.

Records are the plain dicts the codecs in `kairos.streams.wire.codec` encode; instants are aware
UTC datetimes (Avro `timestamp-millis`), durations are milliseconds.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

from kairos.core.data_interval import data_interval
from kairos.core.definitions import shared_definition
from kairos.core.firing import Decision, ScheduleState
from kairos.core.identifiers import SCHEDULE_ID_PATTERN
from kairos.core.lru import LruCache
from kairos.core.pools import run_pool
from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.schedule import (
    DURATIONS_IN_MS,
    JobSpec,
    OverlapPolicy,
    Schedule,
)
from kairos.core.schedule_dependencies import PeriodMatch
from kairos.core.schedule_lifecycle import Deadline
from kairos.core.upstream_wait import Resolution, UpstreamPeriod

_MS = timedelta(milliseconds=1)
_JOBS: LruCache[tuple[str, str], JobSpec] = LruCache(65_536)
_FIELDS_SETS: LruCache[frozenset[str], set[str]] = LruCache(1_024)
_SHAPES: LruCache[tuple[Any, ...], Schedule] = LruCache(16_384)
"""Validated definitions, as `shared_definition` gives them, by their record but for the id
(`shared_definition_of`)."""


def _ms(value: timedelta | None) -> int | None:
    return None if value is None else value // _MS


def _utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(UTC)


def job_record(job: JobSpec) -> dict[str, Any]:
    params = job.model_dump(mode="json", exclude={"kind"})
    return {"kind": job.kind, "params_json": json.dumps(params, sort_keys=True)}


_JSON_TYPES = {
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


class JobParamsRecordError(ValueError):
    """A job's `params_json` is not a JSON object: the record's bytes are untrusted."""


def job_from_record(record: dict[str, Any]) -> JobSpec:
    """The job a `JobSpec` record describes; `JobParamsRecordError` when its parameters are not
    a JSON object, pydantic's `ValidationError` when they are not a valid job.

    Equal records give the one (frozen) `JobSpec`: schedules made from one template share their
    job, in memory (about 600 bytes each) and in validation.
    """
    key = (record["kind"], record["params_json"])
    job = _JOBS.get(key)
    if job is None:
        job = _JOBS.put(key, _validated_job(record))
    return job


def _validated_job(record: dict[str, Any]) -> JobSpec:
    try:
        params = json.loads(record["params_json"])
    except json.JSONDecodeError as error:
        raise JobParamsRecordError(
            f"job.params_json is not JSON ({error}); it must be a JSON object of the job's "
            'fields, such as {"command": "echo hi"}'
        ) from None
    if not isinstance(params, dict):
        raise JobParamsRecordError(
            f"job.params_json is {_JSON_TYPES.get(type(params), 'not an object')}; it must be a "
            'JSON object of the job\'s fields, such as {"command": "echo hi"}'
        )
    return JobSpec.model_validate({**params, "kind": record["kind"]})


def definition_record(schedule: Schedule, *, schedule_id: str | None = None) -> dict[str, Any]:
    """The record of `schedule`, under `schedule_id` when given (a shared definition's id is
    no schedule's: `kairos.core.definitions`)."""
    return {
        "id": schedule.id if schedule_id is None else schedule_id,
        "cron": schedule.cron,
        "at": _utc(schedule.at),
        "every_ms": _ms(schedule.every),
        "timezone": schedule.timezone,
        "start_at": _utc(schedule.start_at),
        "end_at": _utc(schedule.end_at),
        "jitter_ms": _ms(schedule.jitter),
        "misfire": schedule.misfire.value,
        "catchup_window_ms": _ms(schedule.catchup_window),
        "overlap": schedule.overlap.value,
        "dst_gap": schedule.dst_gap.value,
        "dst_repeat": schedule.dst_repeat.value,
        "paused": schedule.paused,
        "pause_until": _utc(schedule.pause_until),
        "exclude": list(schedule.exclude),
        "roll": schedule.roll.value if schedule.roll is not None else None,
        "business_day": schedule.business_day,
        "blackout": list(schedule.blackout),
        "blackout_action": schedule.blackout_action.value,
        "job": job_record(schedule.job),
        "max_attempts": schedule.max_attempts,
        "timeout_ms": _ms(schedule.timeout),
        "retry_backoff_ms": _ms(schedule.retry_backoff),
        "owner": schedule.owner,
        "labels": dict(schedule.labels),
        "description": schedule.description,
        "deadline": _deadline_record(schedule.deadline),
        "pause_on_failure": schedule.pause_on_failure,
        "max_runs": schedule.max_runs,
        "after_last_run": schedule.after_last_run.value,
        "pool": schedule.pool,
        "upstream": [
            {"schedule_id": upstream.schedule, "match": upstream.match.value}
            for upstream in schedule.upstream
        ],
        "upstream_wait_ms": _ms(schedule.upstream_wait) if schedule.upstream else None,
        "upstream_timeout": schedule.upstream_timeout.value,
        "downstream_teams": list(schedule.downstream_teams),
    }


def _deadline_record(deadline: Deadline | None) -> dict[str, Any] | None:
    if deadline is None:
        return None
    return {"start_by_ms": _ms(deadline.start_by), "finish_by_ms": _ms(deadline.finish_by)}


def _deadline_fields(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    fields = {"start_by": record["start_by_ms"], "finish_by": record["finish_by_ms"]}
    return {name: value for name, value in fields.items() if value is not None}


def schedule_from_definition(record: dict[str, Any]) -> Schedule:
    """The schedule a definition record describes, validated like any other input.

    A definition written by a newer producer may carry an enum symbol this version does not
    know; Avro resolves it to `unknown`, and validation then rejects it with the field named.
    Durations are validated as the milliseconds they are, so that one beyond any bound (even
    beyond `timedelta`) is a validation error of its field too.

    Schedules made from one template differ in their id alone, and no rule of the model reads
    the id with another field: a definition equal but for its id to one validated before is
    that schedule under its own id, once the id itself passes its rule (a bulk load of a
    million schedules validates each shape once).
    """
    schedule_id, definition = shared_definition_of(record)
    return _sharing_fields_set(definition.model_copy(update={"id": schedule_id}))


def shared_definition_of(record: dict[str, Any]) -> tuple[str, Schedule]:
    """The id of the schedule a definition record describes and its definition as
    `shared_definition` gives it, validated as `schedule_from_definition` validates."""
    schedule_id = record["id"]
    shape = _shape(record)
    if isinstance(schedule_id, str) and SCHEDULE_ID_PATTERN.fullmatch(schedule_id):
        definition = _SHAPES.get(shape)
        if definition is not None:
            return schedule_id, definition
    schedule = _validated_schedule(record)
    return schedule.id, _SHAPES.put(shape, shared_definition(schedule))


def _shape(record: dict[str, Any]) -> tuple[Any, ...]:
    """Every field of a definition record but the id, hashable (in the schema's field order,
    so that equal shapes are equal records)."""
    return tuple(_frozen(value) for name, value in record.items() if name != "id")


def _frozen(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((key, _frozen(item)) for key, item in value.items())
    if isinstance(value, list):
        return tuple(_frozen(item) for item in value)
    return value


def _validated_schedule(record: dict[str, Any]) -> Schedule:
    fields: dict[str, Any] = {
        "id": record["id"],
        "cron": record["cron"],
        "at": record["at"],
        "every": record["every_ms"],
        "timezone": record["timezone"],
        "start_at": record["start_at"],
        "end_at": record["end_at"],
        "jitter": record["jitter_ms"],
        "misfire": record["misfire"],
        "catchup_window": record["catchup_window_ms"],
        "overlap": record["overlap"],
        "dst_gap": record["dst_gap"],
        "dst_repeat": record["dst_repeat"],
        "paused": record["paused"],
        "pause_until": record["pause_until"],
        "exclude": record["exclude"] or None,
        "roll": record["roll"],
        "business_day": record["business_day"],
        "blackout": record["blackout"] or None,
        "blackout_action": record["blackout_action"],
        "job": job_from_record(record["job"]),
        "max_attempts": record["max_attempts"],
        "timeout": record["timeout_ms"],
        "retry_backoff": record["retry_backoff_ms"],
        "owner": record["owner"],
        "labels": record["labels"],
        "description": record["description"],
        "deadline": _deadline_fields(record["deadline"]),
        "pause_on_failure": record["pause_on_failure"],
        "max_runs": record["max_runs"],
        "after_last_run": record["after_last_run"],
        "pool": record["pool"],
        **_dependency_fields(record),
    }
    schedule = Schedule.model_validate(
        {k: v for k, v in fields.items() if v is not None}, context=DURATIONS_IN_MS
    )
    return _sharing_fields_set(schedule)


def _dependency_fields(record: dict[str, Any]) -> dict[str, Any]:
    upstream = [
        {"schedule": entry["schedule_id"], "match": entry["match"]} for entry in record["upstream"]
    ]
    return {
        "upstream": upstream or None,
        "upstream_wait": record["upstream_wait_ms"],
        "upstream_timeout": record["upstream_timeout"],
        "downstream_teams": record["downstream_teams"] or None,
    }


def _sharing_fields_set(schedule: Schedule) -> Schedule:
    """The schedule, its set of fields given replaced by an equal one shared by every schedule
    given the same fields.

    pydantic keeps a set of the fields given per model (about 730 bytes for a schedule's
    fifteen), the largest part of a held schedule after its fields. It never changes on a
    frozen model: pydantic copies it before a `model_copy(update=...)` adds to it.
    """
    given = schedule.__pydantic_fields_set__
    shared = _FIELDS_SETS.setdefault(frozenset(given), given)
    object.__setattr__(schedule, "__pydantic_fields_set__", shared)
    return schedule


def schedule_event_record(
    schedule_id: str,
    change: str,
    definition: Schedule | None,
    *,
    changed_by: str,
    changed_at: datetime,
    reason: str | None,
    revision: int = 0,
    rerun: RerunRequest | None = None,
) -> dict[str, Any]:
    """A `ScheduleEvent` record: every writer of the schedules topic builds its events here."""
    return {
        "schedule_id": schedule_id,
        "event_id": uuid.uuid4(),
        "change": change,
        "definition": None if definition is None else definition_record(definition),
        "revision": revision,
        "changed_by": changed_by,
        "changed_at": changed_at,
        "reason": reason,
        "rerun": None if rerun is None else rerun_record(rerun),
    }


def rerun_record(request: RerunRequest) -> dict[str, Any]:
    """The `rerun` of a rerun_requested `ScheduleEvent` (read back by `schedule_events`)."""
    return {
        "request_id": request.request_id,
        "kind": request.kind.value,
        "start_at": request.start,
        "end_at": request.end,
        "overlap": None if request.overlap is None else request.overlap.value,
    }


def rerun_from_event(event: dict[str, Any]) -> RerunRequest:
    """The request a rerun_requested `ScheduleEvent` carries (checked by `schedule_events`)."""
    rerun = event["rerun"]
    overlap = rerun["overlap"]
    return RerunRequest(
        request_id=rerun["request_id"],
        schedule_id=event["schedule_id"],
        kind=RerunKind(rerun["kind"]),
        start=rerun["start_at"],
        end=rerun["end_at"],
        overlap=None if overlap is None else OverlapPolicy(overlap),
        requested_by=event["changed_by"],
        requested_at=event["changed_at"],
        reason=event["reason"],
    )


def run_requested_record(
    decision: Decision,
    state: ScheduleState,
    *,
    fired_at: datetime,
    partition: int,
    ticker_instance: str,
    with_interval: bool = True,
    upstream: Sequence[UpstreamPeriod] = (),
) -> dict[str, Any]:
    """The run the decision fires; `with_interval` false leaves its data interval null (the run
    encoder's per-definition template, whose runs each write their own). `upstream` is what
    it waits for, as the ticker resolved it (`kairos.core.upstream_wait.resolve`)."""
    schedule = state.schedule
    rerun = decision.rerun
    overlap = schedule.overlap if rerun is None or rerun.overlap is None else rerun.overlap
    return {
        "run_id": decision.run_id,
        "schedule_id": decision.schedule_id,
        "nominal_at": decision.nominal,
        "due_at": decision.fire_at,
        "fired_at": fired_at,
        "lateness_ms": max(0, (fired_at - decision.fire_at) // _MS),
        "job": job_record(schedule.job),
        "attempt": 1,
        "max_attempts": schedule.max_attempts,
        "timeout_ms": _ms(schedule.timeout),
        "retry_backoff_ms": _ms(schedule.retry_backoff),
        "overlap": overlap.value,
        "schedules_partition": partition,
        "schedule_offset": state.version,
        "ticker_instance": ticker_instance,
        "owner": schedule.owner,
        "rerun_request_id": None if rerun is None else rerun.request_id,
        "labels": schedule.labels,
        "pool": run_pool(schedule.pool),
        # Durations, not instants: the same for every run of the definition, so they stay in
        # the bytes the run encoder keeps per definition (`kairos.streams.wire.run_encoder`).
        **_run_deadline(schedule.deadline),
        **_run_upstream(schedule, upstream),
        "timezone": schedule.timezone,
        # The last field, and the only one after the offset that differs per run: the run
        # encoder writes it after the definition's bytes.
        "interval_start": run_interval_start(decision, state) if with_interval else None,
    }


def _run_upstream(schedule: Schedule, periods: Sequence[UpstreamPeriod]) -> dict[str, Any]:
    upstream = [
        {
            "schedule_id": period.schedule_id,
            "match": period.match.value,
            "resolution": period.resolution.value,
            "period_at": period.period_at,
            "reason": period.reason,
        }
        for period in periods
    ]
    return {
        "upstream": upstream,
        "upstream_wait_ms": _ms(schedule.upstream_wait) if upstream else None,
        "upstream_timeout": schedule.upstream_timeout.value,
    }


def upstream_periods_of(record: RunRequestedRecord) -> list[UpstreamPeriod]:
    """The upstream periods a run waits for; `ValueError` for a rule or resolution newer than
    this reader (Avro reads them as `unknown`)."""
    return [
        UpstreamPeriod(
            entry["schedule_id"],
            PeriodMatch(entry["match"]),
            Resolution(entry["resolution"]),
            entry["period_at"],
            entry["reason"],
        )
        for entry in record.upstream
    ]


def run_interval_start(decision: Decision, state: ScheduleState) -> datetime:
    """Where the data interval of the decision's run starts (`kairos.core.data_interval`): a
    re-run's is its occurrence's, whose nominal instant it carries."""
    return data_interval(state.schedule, decision.nominal, state.calendars).start


# Not frozen: a frozen dataclass sets each of its 21 fields through object.__setattr__, and
# reading a record cost 3.3 us that way against 0.5 us, beside about 10 us to decode it, once
# per record of every executor's intake and every history read. Read it, never change it.
@dataclass(slots=True)
class RunRequestedRecord:
    """A decoded `RunRequested` as every reader reads it (`read_run_requested`): the schema's
    fields by name and type, instants aware UTC, durations in milliseconds as on the wire."""

    run_id: str
    schedule_id: str
    nominal_at: datetime
    due_at: datetime
    fired_at: datetime
    lateness_ms: int
    job: dict[str, Any]
    """The `JobSpec` record, untrusted: `job_from_record` validates it."""
    attempt: int
    max_attempts: int
    timeout_ms: int
    retry_backoff_ms: int
    overlap: str
    schedules_partition: int
    schedule_offset: int
    ticker_instance: str
    owner: str | None
    rerun_request_id: str | None
    deadline_start_by_ms: int | None
    deadline_finish_by_ms: int | None
    labels: dict[str, str]
    pool: str
    upstream: list[dict[str, Any]]
    """The `UpstreamPeriod` records the run waits for (schema history v13; empty before):
    `upstream_periods_of` reads them."""
    upstream_wait_ms: int | None
    upstream_timeout: str
    timezone: str | None
    """The schedule's zone (None in records older than schema history v12)."""
    interval_start: datetime | None
    """The data interval's start; it ends at `nominal_at` (None before v12)."""

    @property
    def job_kind(self) -> str:
        return str(self.job["kind"])


_RUN_REQUESTED_FIELDS = itemgetter(*RunRequestedRecord.__dataclass_fields__)


def read_run_requested(record: dict[str, Any]) -> RunRequestedRecord:
    """The run a decoded `RunRequested` record asks for: the one reading of its fields."""
    return RunRequestedRecord(*_RUN_REQUESTED_FIELDS(record))


def _run_deadline(deadline: Deadline | None) -> dict[str, int | None]:
    record = _deadline_record(deadline) or {"start_by_ms": None, "finish_by_ms": None}
    return {f"deadline_{name}": value for name, value in record.items()}


def skipped_run_event_record(
    decision: Decision, *, decided_at: datetime, ticker_instance: str, owner: str | None
) -> dict[str, Any]:
    """A misfire the policy chose not to run, recorded so that an audit can tell it from a loss."""
    return {
        "run_id": decision.run_id,
        "schedule_id": decision.schedule_id,
        "kind": "skipped",
        "attempt": 0,
        "executor_instance": ticker_instance,
        "nominal_at": decision.nominal,
        "fired_at": decided_at,
        "started_at": None,
        "finished_at": decided_at,
        "reason": decision.reason,
        "next_attempt_at": None,
        "owner": owner,
    }
