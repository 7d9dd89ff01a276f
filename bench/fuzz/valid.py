"""Records that keep their topic's contract, and schema-valid records that break it in content.

Each builder returns the plain dict the codecs of `kairos.streams.wire.codec` encode; the content
breakers start from a valid record and change one thing, named by the variant they return, so
a record that is not refused points at the rule that let it through.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kairos.core.run_id import run_id
from kairos.core.schedule import JobSpec, Schedule
from kairos.streams.wire.records import definition_record

ZONES = ("UTC", "America/New_York", "Europe/Paris", "Asia/Kolkata", "Australia/Lord_Howe")

Record = dict[str, Any]
Breaker = Callable[[random.Random, Record], Record]


def valid_schedule(schedule_id: str, fire_at: datetime, rng: random.Random) -> Schedule:
    """A schedule with exactly one occurrence, at `fire_at` (a whole second): a one-off, an
    every-minute cron bounded to that minute, or an interval bounded to its first fire."""
    zone = rng.choice(ZONES)
    shape = rng.randrange(3)
    if shape == 0:
        return Schedule(id=schedule_id, at=fire_at, timezone=zone)
    if shape == 1:
        minute = fire_at.replace(second=0)
        return Schedule(
            id=schedule_id,
            cron="* * * * *",
            timezone=zone,
            start_at=minute - timedelta(seconds=20),
            end_at=minute + timedelta(seconds=20),
        )
    return Schedule(
        id=schedule_id,
        every=timedelta(minutes=10),
        start_at=fire_at,
        end_at=fire_at + timedelta(minutes=1),
        timezone=zone,
    )


def only_nominal(schedule: Schedule) -> datetime:
    """The one occurrence `valid_schedule` gave the schedule."""
    if schedule.at is not None:
        return schedule.at
    assert schedule.start_at is not None
    if schedule.cron is not None:
        return schedule.start_at + timedelta(seconds=20)
    return schedule.start_at


def schedule_event(schedule_id: str, definition: Record | None, change: str = "upserted") -> Record:
    return {
        "schedule_id": schedule_id,
        "event_id": uuid.uuid4(),
        "change": change,
        "definition": definition,
        "revision": 0,
        "changed_by": "fuzz",
        "changed_at": datetime.now(UTC),
        "reason": "bench.fuzz",
    }


def run_requested(run: str, schedule_id: str, nominal: datetime, job: JobSpec) -> Record:
    now = datetime.now(UTC)
    params = job.model_dump(mode="json", exclude={"kind"})
    return {
        "run_id": run,
        "schedule_id": schedule_id,
        "nominal_at": nominal,
        "due_at": nominal,
        "fired_at": now,
        "lateness_ms": 0,
        "job": {"kind": job.kind, "params_json": json.dumps(params)},
        "attempt": 1,
        "max_attempts": 1,
        "timeout_ms": 60_000,
        "retry_backoff_ms": 1_000,
        "overlap": "allow",
        "schedules_partition": 0,
        "schedule_offset": 0,
        "ticker_instance": "fuzz-forger",
        "owner": None,
    }


def forged_run(schedule_id: str, rng: random.Random, before: datetime) -> Record:
    """A valid noop run of a schedule no ticker owns, due in the hour up to `before`: the
    executor must run it. (The storm passes `before`, so one seed makes one storm.)"""
    nominal = before - timedelta(seconds=rng.randrange(3600))
    return run_requested(run_id(schedule_id, nominal), schedule_id, nominal, JobSpec(kind="noop"))


def run_event(schedule_id: str, rng: random.Random, before: datetime) -> Record:
    now = datetime.now(UTC).replace(microsecond=0)
    nominal = before - timedelta(seconds=rng.randrange(3600))
    return {
        "run_id": run_id(schedule_id, nominal),
        "schedule_id": schedule_id,
        "kind": rng.choice(["started", "succeeded", "failed", "retrying", "skipped"]),
        "attempt": 1,
        "executor_instance": "fuzz-forger",
        "nominal_at": nominal,
        "fired_at": nominal,
        "started_at": nominal,
        "finished_at": now,
        "reason": None,
        "next_attempt_at": None,
    }


def dead_letter(source_topic: str, rng: random.Random) -> Record:
    return {
        "source_topic": source_topic,
        "source_partition": rng.randrange(12),
        "source_offset": rng.randrange(10_000),
        "key": b"fuzz-key",
        "value": rng.randbytes(rng.randrange(64)),
        "reason": "forged by bench.fuzz",
        "error_class": "FuzzError",
        "dead_lettered_at": datetime.now(UTC),
        "dead_lettered_by": "fuzz-forger",
        "truncated": False,
        "key_size": 8,
        "value_size": None,
    }


# -- content breakers, schema-valid ------------------------------------------------------------

_YEAR_9999_MS = 253_402_300_799_000
NOT_OBJECTS = ("[1, 2]", "null", '"text"', "3")
"""JSON that is not an object: a job's parameters must be one."""


def _definition_breakers() -> dict[str, Breaker]:
    def with_(**fields: Any) -> Breaker:
        return lambda _, d: {**d, **fields}

    return {
        "bad_cron": lambda r, d: {
            **d,
            "at": None,
            "every_ms": None,
            "cron": r.choice(["61 * * * *", "* * *", "@fortnightly", "*/0 * * * *", "a b c d e"]),
        },
        "bad_zone": lambda r, d: {
            **d,
            "timezone": r.choice(["Mars/Olympus", "localtime", "Factory", "", "../etc/passwd"]),
        },
        "end_before_start": lambda _, d: {
            **d,
            "start_at": datetime(2030, 1, 1, tzinfo=UTC),
            "end_at": datetime(2029, 1, 1, tzinfo=UTC),
        },
        "no_trigger": with_(cron=None, at=None, every_ms=None),
        "two_triggers": with_(cron="* * * * *", at=datetime(2030, 1, 1, tzinfo=UTC)),
        "every_without_start": with_(cron=None, at=None, every_ms=60_000, start_at=None),
        "jitter_too_long": with_(jitter_ms=30 * 24 * 3600 * 1000),
        "bad_attempts": lambda r, d: {**d, "max_attempts": r.choice([0, -1, 2**31 - 1])},
        "negative_timeout": with_(timeout_ms=-5),
        "huge_interval": with_(cron=None, at=None, every_ms=2**62, start_at=datetime.now(UTC)),
        "unknown_policy": with_(misfire="unknown"),
        "year_9999": with_(cron=None, every_ms=None, at=_YEAR_9999_MS),
        "before_1970": with_(cron=None, every_ms=None, at=-86_400_000),
        "params_not_json": with_(job={"kind": "noop", "params_json": "{"}),
        "params_not_object": lambda r, d: {
            **d,
            "job": {"kind": "noop", "params_json": r.choice(NOT_OBJECTS)},
        },
        "blank_kind": with_(job={"kind": " ", "params_json": "{}"}),
    }


DEFINITION_BREAKERS = _definition_breakers()


def broken_schedule_event(
    schedule_id: str, definition: Record, rng: random.Random
) -> tuple[str, Record]:
    """A decodable `ScheduleEvent` of `schedule_id` whose content the contract refuses."""
    variant = rng.choice([*DEFINITION_BREAKERS, "id_differs", "upsert_without_definition"])
    if variant == "id_differs":
        return variant, schedule_event(schedule_id, {**definition, "id": f"{schedule_id}-other"})
    if variant == "upsert_without_definition":
        return variant, schedule_event(schedule_id, None, rng.choice(["upserted", "paused"]))
    broken = DEFINITION_BREAKERS[variant](rng, definition)
    return variant, schedule_event(schedule_id, broken)


def unknown_kind_schedule(schedule: Schedule) -> Record:
    """A valid schedule whose job kind no executor runs: it fires, the executor refuses it."""
    definition = definition_record(schedule)
    definition["job"] = {"kind": "teleport", "params_json": "{}"}
    return schedule_event(schedule.id, definition)


def broken_run(schedule_id: str, rng: random.Random, before: datetime) -> tuple[str, Record]:
    """A decodable `RunRequested` the executor must refuse, and what is wrong with it."""
    run = forged_run(schedule_id, rng, before)
    variants: dict[str, Record] = {
        "zero_attempts": {**run, "max_attempts": 0},
        "negative_timeout": {**run, "timeout_ms": -1},
        "negative_backoff": {**run, "retry_backoff_ms": -1},
        "unparseable_run_id": {**run, "run_id": f"{schedule_id}-no-instant"},
        "run_id_mismatch": {**run, "schedule_id": f"{schedule_id}-other"},
        "unknown_overlap": {**run, "overlap": "unknown"},
        "unknown_kind": {**run, "job": {"kind": "teleport", "params_json": "{}"}},
        "params_not_json": {**run, "job": {"kind": "noop", "params_json": "{"}},
        "params_not_object": {
            **run,
            "job": {"kind": rng.choice(["noop", "shell"]), "params_json": rng.choice(NOT_OBJECTS)},
        },
        "shell_without_command": {**run, "job": {"kind": "shell", "params_json": "{}"}},
        "http_bad_url": {**run, "job": {"kind": "http", "params_json": '{"url": "ftp:x"}'}},
    }
    variant = rng.choice(sorted(variants))
    return variant, variants[variant]


def broken_run_event(schedule_id: str, rng: random.Random, before: datetime) -> tuple[str, Record]:
    """A decodable `RunEvent` whose content no executor or ticker would write."""
    event = run_event(schedule_id, rng, before)
    variants: dict[str, Record] = {
        "unknown_kind": {**event, "kind": "unknown"},
        "unparseable_run_id": {**event, "run_id": "no instant here"},
        "schedule_mismatch": {**event, "schedule_id": f"{schedule_id}-other"},
        "negative_attempt": {**event, "attempt": -7},
        "finished_before_started": {
            **event,
            "started_at": event["finished_at"],
            "finished_at": event["nominal_at"] - timedelta(days=400),
        },
        "year_9999": {**event, "nominal_at": _YEAR_9999_MS, "fired_at": _YEAR_9999_MS},
    }
    variant = rng.choice(sorted(variants))
    return variant, variants[variant]


def broken_dead_letter(source_topic: str, rng: random.Random) -> tuple[str, Record]:
    """A decodable `DeadLetter` whose content no Kairos process would write."""
    letter = dead_letter(source_topic, rng)
    variants: dict[str, Record] = {
        "negative_partition": {**letter, "source_partition": -3},
        "huge_offset": {**letter, "source_offset": 2**62},
        "empty_reason": {**letter, "reason": "", "error_class": ""},
        "sizes_lie": {**letter, "key_size": -1, "value_size": 2**40, "truncated": True},
        "year_9999": {**letter, "dead_lettered_at": _YEAR_9999_MS},
    }
    variant = rng.choice(sorted(variants))
    return variant, variants[variant]
