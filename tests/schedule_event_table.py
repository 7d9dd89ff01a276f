"""One table of schedules-topic records, malformed and valid, with what each one means.

The contract's unit test reads each row through `read_schedule_event`; the broker test publishes
every row and checks that the ticker, the schedule reader and the history reader agree with the
table and with each other.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from kairos.core.schedule import Schedule
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.records import definition_record

CODECS = make_codecs()
PARTITIONS = 4
"""The schedules partitions of a test deployment (tests/conftest.py)."""


@dataclass(frozen=True)
class Row:
    name: str
    key: bytes | None
    value: bytes | None
    outcome: str
    """`upserted`, `deleted`, or the `error_class` of the rejection."""
    reason: str = ""
    """A fragment of the rejection's reason."""
    misplaced: bool = False
    """Published on a partition murmur2 does not assign to the key."""

    @property
    def partition(self) -> int:
        if self.key is None:
            return 0
        right = partition_for(self.key, PARTITIONS)
        return (right + 1) % PARTITIONS if self.misplaced else right


def event(schedule_id: str, change: str, definition: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "schedule_id": schedule_id,
        "event_id": uuid.uuid4(),
        "change": change,
        "definition": definition,
        "revision": 0,
        "changed_by": "mallory",
        "changed_at": datetime.now(UTC),
        "reason": None,
    }


def definition(schedule_id: str, due: datetime, **changes: Any) -> dict[str, Any]:
    return definition_record(Schedule(id=schedule_id, at=due)) | changes


def encoded(schedule_id: str, change: str, body: dict[str, Any] | None) -> bytes:
    return CODECS.schedule_event.encode(event(schedule_id, change, body))


def rows(prefix: str, due: datetime) -> list[Row]:
    """The table; ids start with `prefix`, and the valid upserts are due at `due`."""
    table = _Table(prefix, due)
    return [
        *table.applied(),
        *table.undecodable(),
        *table.badly_keyed(),
        *table.invalid_definitions(),
        *table.misplaced(),
    ]


@dataclass(frozen=True)
class _Table:
    """Builds the rows in groups, by what is wrong with them; ids are `<prefix>.<name>`."""

    prefix: str
    due: datetime

    def sid(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def upsert_of(self, name: str) -> bytes:
        """A valid upsert event of schedule `name`, due at the table's instant."""
        return encoded(self.sid(name), "upserted", definition(self.sid(name), self.due))

    @cached_property
    def valid(self) -> bytes:
        """The one valid upsert, also the value of the rows whose key or header is wrong."""
        return self.upsert_of("ok")

    def applied(self) -> list[Row]:
        """Records the ticker applies: upserts, deletes, and what it reads as a delete."""
        sid = self.sid
        return [
            Row("valid upsert", sid("ok").encode(), self.valid, "upserted"),
            Row(
                "deleted event",
                sid("gone").encode(),
                encoded(sid("gone"), "deleted", None),
                "deleted",
            ),
            Row(
                "a newer change kind without a definition",
                sid("newer").encode(),
                encoded(sid("newer"), "unknown", None),
                "deleted",
            ),
            Row("tombstone", sid("tomb").encode(), None, "deleted"),
        ]

    def undecodable(self) -> list[Row]:
        """Bytes that are not a schedule event in a schema the reader knows."""
        sid = self.sid
        return [
            Row(
                "garbage",
                sid("garbage").encode(),
                b"not avro at all",
                "CorruptRecordError",
                "bad_marker",
            ),
            Row(
                "truncated header",
                sid("short").encode(),
                b"\xc3\x01\x00",
                "CorruptRecordError",
                "truncated",
            ),
            Row(
                "unknown fingerprint",
                sid("unknown").encode(),
                b"\xc3\x01" + bytes(8) + self.valid[10:],
                "UnknownSchemaError",
                "unknown_fingerprint",
            ),
            Row(
                "another record type",
                sid("run").encode(),
                CODECS.run_event.encode(self.run_event()),
                "IncompatibleSchemaError",
                "wrong_record_type",
            ),
        ]

    def run_event(self) -> dict[str, Any]:
        """A valid `RunEvent`: right bytes, wrong topic."""
        return {
            "run_id": f"{self.sid('run')}@2027-01-01T00:00:00Z",
            "schedule_id": self.sid("run"),
            "kind": "started",
            "attempt": 1,
            "executor_instance": "x",
            "nominal_at": self.due,
            "fired_at": self.due,
            "started_at": self.due,
            "finished_at": None,
            "reason": None,
            "next_attempt_at": None,
        }

    def badly_keyed(self) -> list[Row]:
        """A valid event under a key that does not name its schedule."""
        sid = self.sid
        return [
            Row("no key", None, self.valid, "InvalidScheduleEventError", "must be keyed"),
            Row(
                "a key that is not UTF-8",
                b"\xff\xfe",
                self.valid,
                "InvalidScheduleEventError",
                "not UTF-8",
            ),
            Row(
                "key differs from schedule_id",
                sid("key").encode(),
                self.upsert_of("other"),
                "InvalidScheduleEventError",
                "differs from the event's schedule_id",
            ),
            Row(
                "definition id differs from the key",
                sid("defid").encode(),
                encoded(sid("defid"), "upserted", definition(sid("elsewhere"), self.due)),
                "InvalidScheduleEventError",
                "the definition's id",
            ),
        ]

    def invalid_definitions(self) -> list[Row]:
        """Well-formed events whose definition is missing, invalid or too large."""
        sid, due = self.sid, self.due
        bad_job = definition(sid("job"), due)
        bad_job["job"] = {"kind": "shell", "params_json": json.dumps(["not", "an", "object"])}
        large = definition(sid("large"), due, description="x" * (600 * 1024))
        return [
            Row(
                "upserted without a definition",
                sid("nodef").encode(),
                encoded(sid("nodef"), "upserted", None),
                "InvalidScheduleEventError",
                "must carry the whole definition",
            ),
            Row(
                "paused without a definition",
                sid("nodefp").encode(),
                encoded(sid("nodefp"), "paused", None),
                "InvalidScheduleEventError",
                "must carry the whole definition",
            ),
            Row(
                "invalid cron",
                sid("cron").encode(),
                encoded(
                    sid("cron"), "upserted", definition(sid("cron"), due, at=None, cron="61 * *")
                ),
                "InvalidScheduleEventError",
                "invalid definition: cron",
            ),
            Row(
                "job params that are not a JSON object",
                sid("job").encode(),
                encoded(sid("job"), "upserted", bad_job),
                "InvalidScheduleEventError",
                "invalid definition",
            ),
            Row(
                "an event over the size limit",
                sid("large").encode(),
                encoded(sid("large"), "upserted", large),
                "ScheduleEventTooLargeError",
                "over the limit",
            ),
        ]

    def misplaced(self) -> list[Row]:
        """Records on a partition the key does not hash to."""
        sid = self.sid
        return [
            Row(
                "a valid upsert on the wrong partition",
                sid("misplaced").encode(),
                self.upsert_of("misplaced"),
                "MisplacedScheduleEventError",
                "murmur2_random",
                misplaced=True,
            ),
            Row(
                "a tombstone on the wrong partition",
                sid("misplaced-tomb").encode(),
                None,
                "MisplacedScheduleEventError",
                "murmur2_random",
                misplaced=True,
            ),
        ]


def a_due_instant() -> datetime:
    """Soon enough for a test to see the valid upsert fire, late enough to be owed after it."""
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=6)
