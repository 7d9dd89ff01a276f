"""murmur2 against the vectors of Kafka's own `UtilsTest.testMurmur2`.

They cover tails of 0, 2 and 3 bytes; the broker test `tests/broker/test_publisher.py` checks
many more keys (every tail length) against the partitions librdkafka chose.
"""

from __future__ import annotations

import pytest

from kairos.streams.kafka.partitioner import murmur2, partition_for

# Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("data", KAFKA_VECTORS, ids=[k.decode() for k in KAFKA_VECTORS])
def test_murmur2_matches_kafka(data: bytes) -> None:
    assert murmur2(data) == KAFKA_VECTORS[data]


def test_partition_is_the_positive_hash_modulo_the_count() -> None:
    # Java's toPositive: -790332482 & 0x7fffffff = 1357151166, and 1357151166 % 12 = 6.
    assert partition_for("foobar", 12) == 6
    assert partition_for("foobar", 12) == partition_for(b"foobar", 12)


def test_a_topic_has_partitions() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for("x", 0)
