"""`python -m bench.fuzz`'s storm: repeatable by seed, every class on every consumed topic."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from bench.fuzz.records import COMMON_CLASSES, SCHEDULES_ONLY, TOPIC_SHARES, StormBuilder
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import make_codecs
from kairos.streams.wire.schedule_events import MAX_SCHEDULE_EVENT_BYTES

pytestmark = pytest.mark.unit

PARTITIONS = {role: 1 if role is TopicRole.DEAD_LETTERS else 12 for role in TopicRole}
FIRES_FROM = datetime(2027, 3, 14, 7, 0, tzinfo=UTC)


def storm(seed: int, events: int) -> list[tuple[object, ...]]:
    builder = StormBuilder(random.Random(seed), make_codecs(), PARTITIONS, FIRES_FROM)
    return [
        (r.topic, r.cls, r.variant, r.key, r.partition, r.owed_run, len(r.value or b""))
        for r in builder.build(events).records
    ]


def test_the_same_seed_makes_the_same_storm_and_another_seed_another() -> None:
    assert storm(7, 300) == storm(7, 300)
    assert storm(7, 300) != storm(8, 300)


def test_every_class_lands_on_every_topic_within_its_partitions() -> None:
    records = storm(15, 3000)
    for role in TOPIC_SHARES:
        classes = {cls for topic, cls, *_ in records if topic is role}
        wanted = {*COMMON_CLASSES, *(SCHEDULES_ONLY if role is TopicRole.SCHEDULES else ())}
        assert classes == wanted, role
    assert all(0 <= partition < PARTITIONS[topic] for topic, _, _, _, partition, *_ in records)
    oversized = [size for _, cls, *_, size in records if cls == "oversized"]
    assert oversized and min(oversized) > MAX_SCHEDULE_EVENT_BYTES
