"""The Kafka clients the ticker and the executor use, as the small ports they are used through.

Each port is the part of a confluent-kafka client one room needs, with the rules the room relies
on. The real clients satisfy them as they are (`ConfluentTickerClients` and
`ConfluentExecutorClients` make them); the in-memory fakes in `tests/fakes/kafka.py` keep the
same rules, so the turn logic is unit-tested without a broker.
The broker tests stay: a fake shows the logic right on the rules, only a broker shows the rules.

Rules every implementation keeps:

1. **read_committed.** A consumer sees a transaction's records only once it committed, never
   those of one aborted; an open transaction holds back everything after its first record on
   that partition (the last stable offset), and `get_watermark_offsets` answers (low, last
   stable offset).
2. **Stable offsets.** `GroupMember.committed` does not answer (raises `_TIMED_OUT` or
   `UNSTABLE_OFFSET_COMMIT`) while a transaction carrying offsets for that partition of the
   group is open (KIP-447 `require_stable`); it answers with the offset and its metadata once
   that transaction ended.
3. **Rebalance callbacks run inside `consume`** (and `close`), between transactions: an
   assignment is `incremental_assign`ed by the callback, a revocation `incremental_unassign`ed;
   a callback that does neither has it done for it once it returns (as confluent-kafka does).
4. **Fencing.** `send_offsets_to_transaction` with the metadata of a member whose generation is
   no longer the group's fails with an error that requires an abort; `init_transactions` of a
   producer with the same transactional id aborts the old one's open transaction and fences it:
   every later call of the old one fails fatally.
5. **Delivery.** A produced record's delivery callback runs, with its offset, during `flush` or
   `poll`; `flush` returns how many records are still undelivered.
6. **Plain records.** A `Producer` without a transactional id writes outside any transaction: a
   read_committed consumer sees the record as soon as it is written, and it is durable once
   its delivery callback ran without an error (after `flush`).
7. **Offset commits outside a transaction.** `GroupMember.commit(offsets=...,
   asynchronous=False)` returns once the group stored the offsets: `committed` answers them,
   and a member assigned the partition next starts there. A member the group expelled fails
   with a `KafkaException`, one closed with a `RuntimeError` (the client refuses before asking
   the group, as confluent-kafka documents); neither stores anything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from confluent_kafka import KafkaError, Message, TopicPartition

RebalanceCallback = Callable[[Any, list[TopicPartition]], None]
DeliveryCallback = Callable[[KafkaError | None, Message], None]
Headers = list[tuple[str, str | bytes | None]]


class GroupMember(Protocol):
    """A consumer in a consumer group, assigned partitions incrementally (cooperative)."""

    def subscribe(
        self,
        topics: list[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None: ...
    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]: ...
    def incremental_assign(self, partitions: list[TopicPartition]) -> None: ...
    def incremental_unassign(self, partitions: list[TopicPartition]) -> None: ...
    def pause(self, partitions: list[TopicPartition]) -> None: ...
    def resume(self, partitions: list[TopicPartition]) -> None: ...
    def seek(self, partition: TopicPartition) -> None: ...
    def committed(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]: ...
    def commit(
        self, *, offsets: list[TopicPartition], asynchronous: Literal[False]
    ) -> list[TopicPartition]: ...
    def consumer_group_metadata(self) -> Any: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]: ...
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...
    def close(self) -> None: ...


class PartitionReader(Protocol):
    """A consumer outside any group, reading the partitions it is assigned from given offsets.

    Configured with `enable.partition.eof`: reaching the end yields a message whose error is
    `_PARTITION_EOF`.
    """

    def assign(self, partitions: list[TopicPartition]) -> None: ...
    def unassign(self) -> None: ...
    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]: ...
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...
    def close(self) -> None: ...


class Producer(Protocol):
    """A producer; without a transactional id, what it sends is visible once written (rule 6)."""

    # confluent-kafka's own signature: the ticker passes the arguments by position, which costs a
    # herd less than keywords.
    def produce(  # noqa: PLR0917
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Headers | None = None,
    ) -> None: ...
    def poll(self, timeout: float = -1) -> int: ...
    def flush(self, timeout: float = -1) -> int: ...


class TransactionalProducer(Producer, Protocol):
    """A producer with a transactional id: what it sends is visible only once committed."""

    def init_transactions(self, timeout: float = -1) -> None: ...
    def begin_transaction(self) -> None: ...
    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float = -1
    ) -> None: ...
    def commit_transaction(self, timeout: float = -1) -> None: ...
    def abort_transaction(self, timeout: float = -1) -> None: ...
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...


class EndOffsets(Protocol):
    """Where a partition ends, records of open transactions included (read_uncommitted)."""

    def end_offset(self, partition: TopicPartition, timeout_s: float) -> int: ...
