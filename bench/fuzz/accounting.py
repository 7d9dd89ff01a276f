"""Each storm record matched to what happened to it, and judged against what must happen.

Two consumers judge every record: the service that consumes its topic (the ticker the
schedules topic, the executor the runs topic; nothing else consumes the run-events and
dead-letters topics as a service) and the history reader every `kairos audit`, `replay` and
`runs` command reads through. A hostile record must be refused with its reason by both (the
service dead-letters it, the reader skips it); a valid one must fire and run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.fuzz.records import FuzzRecord
from bench.fuzz.services import reason_class
from bench.fuzz.storm import Seen
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole

UNDECODABLE = frozenset(
    {
        "garbage",
        "bad_header",
        "unknown_fingerprint",
        "wrong_schema",
        "truncated",
        "trailing_bytes",
        "null_value",
    }
)
"""Classes no reader can read as a record of the topic (a null value is not a run or event)."""


@dataclass(frozen=True)
class Judged:
    record: FuzzRecord
    service: str
    readers: str
    as_expected: bool


@dataclass
class Row:
    """One topic and class: how many records, and what became of them."""

    topic: str
    cls: str
    records: int = 0
    service: Counter[str] = field(default_factory=Counter)
    readers: Counter[str] = field(default_factory=Counter)
    unexpected: int = 0
    unexpected_examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "class": self.cls,
            "records": self.records,
            "service": dict(self.service.most_common()),
            "readers": dict(self.readers.most_common()),
            "unexpected": self.unexpected,
            "unexpected_examples": self.unexpected_examples,
        }


def judge_all(records: list[FuzzRecord], seen: Seen, settings: KafkaSettings) -> list[Judged]:
    return [_judge(record, seen, settings) for record in records]


def _judge(record: FuzzRecord, seen: Seen, settings: KafkaSettings) -> Judged:
    topic = settings.layout.name(record.topic)
    where = (topic, record.partition, record.offset if record.offset is not None else -1)
    service = _service_outcome(record, seen, where)
    skipped = seen.skipped_by_readers.get(where)
    readers = (
        "refused by the broker"
        if record.broker_error
        else ("read" if skipped is None else f"skipped: {reason_class(skipped)}")
    )
    return Judged(record, service, readers, _expected(record, service, readers))


def _service_outcome(record: FuzzRecord, seen: Seen, where: tuple[str, int, int]) -> str:
    if record.broker_error is not None:
        return "refused by the broker"
    letter = seen.dead_letters.get(where)
    if letter is not None:
        return f"dead-lettered: {letter['error_class']}"
    if record.topic not in (TopicRole.SCHEDULES, TopicRole.RUNS):
        return "no service reads it"
    owed = record.owed_run
    if owed is None:
        return "applied as a delete" if record.value is None else "not refused"
    if record.topic is TopicRole.RUNS:
        return "ran" if owed in seen.ran else "NOT RUN"
    if owed not in seen.fired:
        return "NOT FIRED"
    refused = seen.refused_runs.get(owed)
    if refused is not None:
        return f"fired, dead-lettered by the executor: {refused['error_class']}"
    return "fired, ran" if owed in seen.ran else "fired, NOT RUN"


def _expected(record: FuzzRecord, service: str, readers: str) -> bool:
    cls = record.cls
    if record.topic is TopicRole.SCHEDULES:
        wanted = {
            "valid": ("fired, ran", "read"),
            "unknown_job_kind": ("fired, dead-lettered by the executor", "read"),
            "null_value": ("applied as a delete", "read"),
            "null_key": ("refused by the broker", "refused by the broker"),
        }.get(cls, ("dead-lettered", "skipped"))
        return service.startswith(wanted[0]) and readers.startswith(wanted[1])
    if record.topic is TopicRole.RUNS:
        if cls in ("valid", "oversized"):
            return service == "ran" and readers == "read"
        refused = service.startswith("dead-lettered")
        return refused and (readers.startswith("skipped") or cls not in UNDECODABLE)
    return readers.startswith("skipped") or cls not in UNDECODABLE


def rows(judged: list[Judged]) -> list[Row]:
    table: dict[tuple[str, str], Row] = {}
    for item in judged:
        record = item.record
        row = table.setdefault(
            (record.topic.value, record.cls), Row(record.topic.value, record.cls)
        )
        row.records += 1
        row.service[item.service] += 1
        row.readers[item.readers] += 1
        if not item.as_expected:
            row.unexpected += 1
            if len(row.unexpected_examples) < 3:
                row.unexpected_examples.append(
                    f"{record.variant} p{record.partition}@{record.offset}: "
                    f"service {item.service}; readers {item.readers}"
                )
    return sorted(table.values(), key=lambda r: (r.topic, r.cls))


def dead_letter_reasons(seen: Seen, settings: KafkaSettings) -> dict[str, int]:
    """The storm's dead letters by who wrote them, their error class and short reason."""
    counted = Counter[str]()
    for (topic, _, _), letter in seen.dead_letters.items():
        by = letter["dead_lettered_by"].split(":")[0]
        role = topic.removeprefix(settings.topic_prefix)
        counted[f"{by} {role} {letter['error_class']}: {reason_class(letter['reason'])}"] += 1
    return dict(counted.most_common())
