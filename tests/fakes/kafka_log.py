"""An in-memory Kafka cluster: partitioned logs, transactions and consumer groups.

It keeps the rules of `kairos.streams.kafka.ports` (read_committed, stable offsets, rebalance inside
`consume`, fencing, delivery on flush, plain records, offset commits outside transactions) and
nothing more: no replication, no retention, no
control records (offsets stay contiguous), one broker that always answers unless a test says
otherwise with `fail_next`. The clients over it are in `tests/fakes/kafka.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kairos.streams.kafka.partitioner import partition_for


@dataclass
class Transaction:
    transactional_id: str
    state: str = "open"
    """open, committed or aborted."""
    offsets: dict[tuple[str, int], TopicPartition] = field(default_factory=dict)
    """Offsets sent to the transaction, applied to `group` when it commits."""
    group: str | None = None


@dataclass
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, str | bytes | None]] | None
    timestamp_ms: int
    transaction: Transaction | None
    """None: written outside any transaction, visible at once."""

    @property
    def visible(self) -> bool:
        return self.transaction is None or self.transaction.state == "committed"

    @property
    def pending(self) -> bool:
        return self.transaction is not None and self.transaction.state == "open"


@dataclass
class GroupMembership:
    member_id: str
    generation: int
    topics: list[str]
    assigned: set[tuple[str, int]] = field(default_factory=set)
    to_revoke: list[tuple[str, int]] = field(default_factory=list)
    to_assign: list[tuple[str, int]] = field(default_factory=list)
    lost: bool = False


@dataclass
class Group:
    group_id: str
    generation: int = 0
    members: dict[str, GroupMembership] = field(default_factory=dict)
    committed: dict[tuple[str, int], TopicPartition] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupMetadata:
    """What `consumer_group_metadata()` hands to a transaction: who and of which generation."""

    group_id: str
    member_id: str
    generation: int


class FakeKafka:
    def __init__(self, clock: Callable[[], datetime]) -> None:
        self.clock = clock
        """The broker's clock: log-append timestamps (a ticker's clock skew is measured on it)."""
        self.logs: dict[str, list[list[Record]]] = {}
        self.groups: dict[str, Group] = {}
        self.epochs: dict[str, int] = {}
        """The current producer epoch of each transactional id."""
        self.open: dict[str, Transaction] = {}
        """The open transaction of each transactional id."""
        self._failures: dict[str, list[KafkaError]] = {}
        self._refused_deliveries: dict[str, list[KafkaError]] = {}
        self._hooks: dict[str, list[Callable[[], None]]] = {}
        self._members = 0
        self._settled: dict[tuple[str, int], int] = {}
        """Per partition, an offset before which no record is pending: a transaction once
        ended never opens again, so `stable_end` scans only from there (linear, not quadratic,
        in the log's length)."""

    # -- what tests set up and look at ------------------------------------------------------

    def create_topic(self, name: str, partitions: int) -> None:
        self.logs[name] = [[] for _ in range(partitions)]
        for partition in range(partitions):
            self._settled.pop((name, partition), None)

    def fail_next(self, operation: str, error: KafkaError) -> None:
        """The next call of `operation` (a producer or consumer method name) raises `error`."""
        self._failures.setdefault(operation, []).append(error)

    def fail_delivery(self, topic: str, error: KafkaError) -> None:
        """The next record a plain producer sends to `topic` is not written: its delivery
        callback gets `error` (a broker that timed out or refused it)."""
        self._refused_deliveries.setdefault(topic, []).append(error)

    def refused_delivery(self, topic: str) -> KafkaError | None:
        """The delivery error a test asked for on the next record to `topic`, if any."""
        refused = self._refused_deliveries.get(topic)
        return refused.pop(0) if refused else None

    def before_next(self, operation: str, hook: Callable[[], None]) -> None:
        """Run `hook` once, just before the next call of `operation` does its work."""
        self._hooks.setdefault(operation, []).append(hook)

    def visible(self, topic: str, partition: int | None = None) -> list[Record]:
        """The records a read_committed reader sees, in offset order per partition."""
        logs = self.logs[topic]
        chosen = range(len(logs)) if partition is None else [partition]
        return [r for p in chosen for r in logs[p] if r.visible]

    # -- what the clients call --------------------------------------------------------------

    def enter(self, operation: str) -> None:
        """Raise a failure a test asked for, or run its hook, on `operation`."""
        hooks = self._hooks.get(operation)
        if hooks:
            hooks.pop(0)()
        failures = self._failures.get(operation)
        if failures:
            raise KafkaException(failures.pop(0))

    def partition_of(self, topic: str, key: str | bytes | None, partition: int) -> int:
        if partition >= 0:
            return partition
        assert key is not None, "the fake partitions keyed records only"
        return partition_for(key, len(self.logs[topic]))

    def append(self, topic: str, partition: int, record: Record) -> int:
        log = self.logs[topic][partition]
        log.append(record)
        return len(log) - 1

    def stable_end(self, topic: str, partition: int) -> int:
        """The last stable offset: the first record of an open transaction, else the end."""
        log = self.logs[topic][partition]
        offset = self._settled.get((topic, partition), 0)
        while offset < len(log) and not log[offset].pending:
            offset += 1
        self._settled[topic, partition] = offset
        return offset

    def read_committed(
        self, topic: str, partition: int, position: int, limit: int
    ) -> tuple[list[tuple[int, Record]], int]:
        """Up to `limit` visible records from `position`, and the position after them."""
        end = self.stable_end(topic, partition)
        log = self.logs[topic][partition]
        taken: list[tuple[int, Record]] = []
        while position < end and len(taken) < limit:
            record = log[position]
            if record.visible:
                taken.append((position, record))
            position += 1
        return taken, position

    def begin(self, transactional_id: str) -> Transaction:
        transaction = Transaction(transactional_id)
        self.open[transactional_id] = transaction
        return transaction

    def end(self, transaction: Transaction, state: str) -> None:
        transaction.state = state
        self.open.pop(transaction.transactional_id, None)
        if state == "committed" and transaction.group is not None:
            self.groups[transaction.group].committed.update(transaction.offsets)

    def init_producer(self, transactional_id: str) -> int:
        """A new epoch for the id: the earlier producer's open transaction is aborted."""
        previous = self.open.get(transactional_id)
        if previous is not None:
            self.end(previous, "aborted")
        epoch = self.epochs.get(transactional_id, -1) + 1
        self.epochs[transactional_id] = epoch
        return epoch

    def commit_offsets(
        self, group_id: str, member_id: str, offsets: list[TopicPartition]
    ) -> list[TopicPartition]:
        """Store `offsets` for the group at once (rule 7); a member gone from it stores nothing."""
        group = self.groups[group_id]
        if member_id not in group.members:
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID, "not in the group"))
        group.committed.update({(tp.topic, tp.partition): tp for tp in offsets})
        return offsets

    def offsets_pending(self, group_id: str, topic: str, partition: int) -> bool:
        return any(
            t.group == group_id and (topic, partition) in t.offsets for t in self.open.values()
        )

    # -- groups -----------------------------------------------------------------------------

    def join(self, group_id: str, topics: list[str]) -> GroupMembership:
        group = self.groups.setdefault(group_id, Group(group_id))
        self._members += 1
        member = GroupMembership(f"member-{self._members}", group.generation, topics)
        group.members[member.member_id] = member
        self.rebalance(group_id)
        return member

    def leave(self, group_id: str, member_id: str, *, lost: bool = False) -> None:
        """The member leaves (closes) or, `lost`, is expelled (its session timed out)."""
        group = self.groups[group_id]
        member = group.members.pop(member_id)
        member.lost = lost
        self.rebalance(group_id)

    def rebalance(self, group_id: str) -> None:
        """A new generation: the partitions spread over the members in join order, each member
        told at its next `consume` what it gives up and what it gets (cooperative: a partition
        moves only once its owner gave it up, so never two owners at once in the fake)."""
        group = self.groups[group_id]
        group.generation += 1
        members = list(group.members.values())
        if not members:
            return
        wanted: list[tuple[str, int]] = sorted(
            {(t, p) for m in members for t in m.topics for p in range(len(self.logs[t]))}
        )
        owner = {tp: members[i % len(members)] for i, tp in enumerate(wanted)}
        held = {tp for m in members for tp in m.assigned}
        for member in members:
            keep = {tp for tp in member.assigned if owner[tp] is member}
            member.to_revoke = sorted(member.assigned - keep)
            member.to_assign = sorted(
                tp
                for tp, chosen in owner.items()
                if chosen is member and tp not in member.assigned and tp not in held
            )

    def handed_over(self, group_id: str) -> None:
        """After a member gave partitions up, they go to whoever the assignment chose."""
        self.rebalance(group_id)


def group_metadata(group_id: str, member: GroupMembership) -> Any:
    return GroupMetadata(group_id, member.member_id, member.generation)
