"""Kafka's Java default partitioner for keyed records, so Kairos can find a schedule's partition.

Every producer of the schedules topic uses it (librdkafka clients set
`partitioner=murmur2_random`, see `KafkaSettings.client_config`), so a reader that wants one
schedule reads only `partition_for(schedule_id, partitions)` instead of the whole topic.
"""

from __future__ import annotations

_MASK = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """MurmurHash2 exactly as Kafka's `Utils.murmur2`: a signed 32-bit result, like Java's int.

    Java multiplies in wrapping 32-bit ints; Python ints are unbounded, so every product is
    masked back to 32 bits, and the result is converted to signed at the end.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    body = length - length % 4
    for i in range(0, body, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> _R
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = data[body:]
    if tail:
        # Java's switch falls through from case 3 to case 1, so every tail byte is mixed in.
        h ^= int.from_bytes(tail, "little")
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str | bytes, partitions: int) -> int:
    """The partition Java's default partitioner (and librdkafka's `murmur2_random`) picks.

    `toPositive(murmur2(key)) % partitions`; a str key is hashed as its UTF-8 bytes, which is
    how every Kairos producer encodes schedule ids.
    """
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    data = key.encode("utf-8") if isinstance(key, str) else key
    return (murmur2(data) & 0x7FFFFFFF) % partitions
