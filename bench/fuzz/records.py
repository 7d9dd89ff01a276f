"""The storm: N seeded records over every topic Kairos consumes, each with its class.

A class says how a record was made (valid, garbage bytes, a truncated encoding, ...); a variant
says which rule of the class it breaks. Every record keeps where it must land (`partition`), and
a valid schedule the run id it owes, so that every outcome can be matched back to its record.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from bench.fuzz import valid
from kairos.core.run_id import run_id
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codec, Codecs
from kairos.streams.wire.dead_letters import VALUE_COPY_LIMIT
from kairos.streams.wire.records import definition_record
from kairos.streams.wire.schedule_events import MAX_SCHEDULE_EVENT_BYTES

TOPIC_SHARES = {
    TopicRole.SCHEDULES: 0.4,
    TopicRole.RUNS: 0.3,
    TopicRole.RUN_EVENTS: 0.15,
    TopicRole.DEAD_LETTERS: 0.15,
}
"""The consumed topics and their share of the storm. The ticker changelog is left out: only
tickers write it, inside their transactions; a foreign writer there is not input but damage."""

COMMON_CLASSES = (
    "valid",
    "invalid_content",
    "garbage",
    "bad_header",
    "unknown_fingerprint",
    "wrong_schema",
    "truncated",
    "trailing_bytes",
    "oversized",
    "null_key",
    "null_value",
    "wrong_key",
)
SCHEDULES_ONLY = ("wrong_partition", "unknown_job_kind")
CLASS_WEIGHTS = {"valid": 2.0, "oversized": 0.1}
"""Valid records are drawn twice as often as each other class: they are what must not be lost.
Oversized ones a tenth as often: each is over half a megabyte, which every reader reads again."""

_OTHER_TYPE = {
    TopicRole.SCHEDULES: "run_event",
    TopicRole.RUNS: "schedule_event",
    TopicRole.RUN_EVENTS: "run_requested",
    TopicRole.DEAD_LETTERS: "ticker_progress",
}


@dataclass
class FuzzRecord:
    topic: TopicRole
    cls: str
    variant: str
    key: bytes | None
    value: bytes | None
    partition: int
    owed_run: str | None = None
    """A valid schedule's one run id (it must fire and run), or a valid forged run's."""
    offset: int | None = None
    """Set once the broker acknowledged the record."""
    broker_error: str | None = None
    """Set when the broker refused the record instead."""


@dataclass(frozen=True)
class Plan:
    """What the storm owes: its records and the window its valid schedules fire in."""

    records: list[FuzzRecord]
    fires_from: datetime
    fires_until: datetime


class StormBuilder:
    def __init__(
        self,
        rng: random.Random,
        codecs: Codecs,
        partitions: dict[TopicRole, int],
        fires_from: datetime,
    ) -> None:
        self.rng = rng
        self.codecs = codecs
        self.counts = partitions
        self.partitions = partitions[TopicRole.SCHEDULES]
        self.fires_from = fires_from.replace(microsecond=0)
        self.forged_before = self.fires_from - timedelta(minutes=1)
        """Forged runs and run events are of the hour before this: the past, when the storm
        is sent, and the same instants for the same seed and `fires_from`."""
        self.serial = 0

    def build(self, events: int) -> Plan:
        records = [self._record(self._topic()) for _ in range(events)]
        return Plan(records, self.fires_from, self.fires_from + timedelta(minutes=1))

    def _topic(self) -> TopicRole:
        roles = list(TOPIC_SHARES)
        return self.rng.choices(roles, weights=[TOPIC_SHARES[r] for r in roles])[0]

    def _record(self, topic: TopicRole) -> FuzzRecord:
        classes = [*COMMON_CLASSES, *(SCHEDULES_ONLY if topic is TopicRole.SCHEDULES else ())]
        weights = [CLASS_WEIGHTS.get(c, 1.0) for c in classes]
        cls = self.rng.choices(classes, weights=weights)[0]
        self.serial += 1
        ident = f"fuzz-{topic.value}-{self.serial:06d}"
        if topic is TopicRole.SCHEDULES:
            return self._schedule_record(cls, ident)
        return self._other_record(topic, cls, ident)

    # -- schedules ---------------------------------------------------------------------------

    def _schedule_record(self, cls: str, schedule_id: str) -> FuzzRecord:
        offset_s = self.rng.randrange(60)
        fire_at = (self.fires_from + timedelta(seconds=offset_s)).replace(microsecond=0)
        schedule = valid.valid_schedule(schedule_id, fire_at, self.rng)
        definition = definition_record(schedule)
        good = self.codecs.schedule_event.encode(valid.schedule_event(schedule_id, definition))
        key = schedule_id.encode()
        place = partition_for(key, self.partitions)
        owed = run_id(schedule_id, valid.only_nominal(schedule))
        if cls == "valid":
            return FuzzRecord(
                TopicRole.SCHEDULES, cls, schedule.cron or "at/every", key, good, place, owed
            )
        if cls == "unknown_job_kind":
            value = self.codecs.schedule_event.encode(valid.unknown_kind_schedule(schedule))
            return FuzzRecord(TopicRole.SCHEDULES, cls, "teleport", key, value, place, owed)
        if cls == "invalid_content":
            variant, event = valid.broken_schedule_event(schedule_id, definition, self.rng)
            value = self.codecs.schedule_event.encode(event)
            return FuzzRecord(TopicRole.SCHEDULES, cls, variant, key, value, place)
        if cls == "wrong_partition":
            wrong = (place + 1 + self.rng.randrange(self.partitions - 1)) % self.partitions
            return FuzzRecord(TopicRole.SCHEDULES, cls, "crc32-like", key, good, wrong)
        if cls == "oversized":
            padded = {**definition, "description": "x" * self._oversize()}
            value = self.codecs.schedule_event.encode(valid.schedule_event(schedule_id, padded))
            return FuzzRecord(TopicRole.SCHEDULES, cls, "description", key, value, place)
        return self._mutated(TopicRole.SCHEDULES, cls, key, good, self.codecs.schedule_event)

    # -- runs, run events, dead letters ------------------------------------------------------

    def _other_record(self, topic: TopicRole, cls: str, ident: str) -> FuzzRecord:
        build: dict[TopicRole, Callable[[], dict[str, Any]]] = {
            TopicRole.RUNS: lambda: valid.forged_run(ident, self.rng, self.forged_before),
            TopicRole.RUN_EVENTS: lambda: valid.run_event(ident, self.rng, self.forged_before),
            TopicRole.DEAD_LETTERS: lambda: valid.dead_letter(f"kairos.{ident}", self.rng),
        }
        codec = self._codec(topic)
        record = build[topic]()
        if cls == "invalid_content":
            variant, record = self._broken(topic, ident)
        elif cls == "oversized":
            variant, record = self._padded(topic, record)
        else:
            variant = "-"
        key = str(record.get("run_id", ident)).encode()
        value = codec.encode(record)
        place = partition_for(key, self.counts[topic])
        owes = topic is TopicRole.RUNS and cls in ("valid", "oversized")
        owed = record["run_id"] if owes else None
        if cls in ("valid", "invalid_content", "oversized"):
            return FuzzRecord(topic, cls, variant, key, value, place, owed)
        return self._mutated(topic, cls, key, value, codec)

    def _broken(self, topic: TopicRole, ident: str) -> tuple[str, dict[str, Any]]:
        if topic is TopicRole.RUNS:
            return valid.broken_run(ident, self.rng, self.forged_before)
        if topic is TopicRole.RUN_EVENTS:
            return valid.broken_run_event(ident, self.rng, self.forged_before)
        return valid.broken_dead_letter(f"kairos.{ident}", self.rng)

    def _padded(self, topic: TopicRole, record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        size = self._oversize()
        if topic is TopicRole.RUNS:
            # No contract bounds a run (a ticker's are bounded by their schedule event): a
            # large but valid one must run.
            return "owner", {**record, "owner": "x" * size}
        if topic is TopicRole.RUN_EVENTS:
            return "reason", {**record, "reason": "x" * size}
        return "value copy", {**record, "value": b"x" * size, "value_size": size}

    def _oversize(self) -> int:
        """Past the 512 KiB contract, well below Kafka's 1 MiB record limit."""
        return max(MAX_SCHEDULE_EVENT_BYTES, VALUE_COPY_LIMIT) + self.rng.randrange(1, 100_000)

    # -- mutations of a valid encoding -------------------------------------------------------

    def _mutated(
        self, topic: TopicRole, cls: str, key: bytes, good: bytes, codec: Codec
    ) -> FuzzRecord:
        rng = self.rng
        place = partition_for(key, self.counts[topic])
        variant = "-"
        value: bytes | None = good
        kept_key: bytes | None = key
        if cls == "garbage":
            value = rng.randbytes(rng.randrange(0, 2000))
        elif cls == "bad_header":
            variant, value = self._bad_header(good)
        elif cls == "unknown_fingerprint":
            value = good[:2] + rng.randbytes(8) + good[10:]
        elif cls == "wrong_schema":
            variant = _OTHER_TYPE[topic]
            value = self._other_type_value(variant)
        elif cls == "truncated":
            cut = rng.randrange(1, len(good))
            variant, value = ("in header" if cut < 10 else "in payload"), good[:cut]
        elif cls == "trailing_bytes":
            value = good + rng.randbytes(rng.randrange(1, 32))
        elif cls == "null_key":
            kept_key, place = None, rng.randrange(self.counts[topic])
        elif cls == "null_value":
            value = None
        elif cls == "wrong_key":
            kept_key = f"fuzz-other-{rng.randrange(10**6)}".encode()
            place = partition_for(kept_key, self.counts[topic])
        else:
            raise ValueError(f"no mutation named {cls}")
        return FuzzRecord(topic, cls, variant, kept_key, value, place)

    def _bad_header(self, good: bytes) -> tuple[str, bytes]:
        headers = {
            "confluent framing": b"\x00" + self.rng.randbytes(4) + good[10:],
            "wrong marker": b"\xc3\x02" + good[2:],
            "empty": b"",
            "one byte": b"\xc3",
            "json text": json.dumps({"schedule_id": "x", "cron": "* * * * *"}).encode(),
        }
        variant = self.rng.choice(sorted(headers))
        return variant, headers[variant]

    def _other_type_value(self, record_type: str) -> bytes:
        ident = f"fuzz-foreign-{self.serial:06d}"
        if record_type == "run_event":
            return self.codecs.run_event.encode(
                valid.run_event(ident, self.rng, self.forged_before)
            )
        if record_type == "schedule_event":
            definition = definition_record(valid.valid_schedule(ident, self.fires_from, self.rng))
            return self.codecs.schedule_event.encode(valid.schedule_event(ident, definition))
        if record_type == "run_requested":
            return self.codecs.run_requested.encode(
                valid.forged_run(ident, self.rng, self.forged_before)
            )
        progress = {
            "schedule_id": ident,
            "schedule_offset": 0,
            "next_nominal_at": None,
            "last_decided_nominal_at": None,
            "settle_before_at": None,
        }
        return self.codecs.ticker_progress.encode(progress)

    def _codec(self, topic: TopicRole) -> Codec:
        return {
            TopicRole.RUNS: self.codecs.run_requested,
            TopicRole.RUN_EVENTS: self.codecs.run_event,
            TopicRole.DEAD_LETTERS: self.codecs.dead_letter,
        }[topic]


def must_run(record: FuzzRecord) -> bool:
    """The record owes a run that must succeed (an unknown job kind owes one to be refused)."""
    return record.owed_run is not None and record.cls != "unknown_job_kind"


def by_topic(records: list[FuzzRecord]) -> Iterator[tuple[TopicRole, list[FuzzRecord]]]:
    for role in TOPIC_SHARES:
        yield role, [r for r in records if r.topic is role]
