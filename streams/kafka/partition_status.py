"""Who owns each schedules partition, how far behind it is, and what the tickers' group is doing.

Three sources, read with the admin API (nothing joins the group): the group's description (its
state, and each member's assignment: the owner *now*); the group's committed offsets, whose
metadata holds the `OwnershipInfo` the owner wrote in its last firing transaction; and the end
offsets of the schedules and changelog topics, read_committed.

The metadata is as fresh as the last transaction on any of the owner's partitions. Right after a
handover it may still be the previous owner's: `PartitionStatus.reported_by_owner` says so.
"""

from __future__ import annotations

import time
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from kairos.core.errors import KairosError
from kairos.core.run_id import format_instant
from kairos.streams.kafka.ownership import Judged, OwnershipInfo
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole

_STATES = {
    ConsumerGroupState.STABLE: "stable",
    ConsumerGroupState.PREPARING_REBALANCING: "rebalancing",
    ConsumerGroupState.COMPLETING_REBALANCING: "rebalancing",
    ConsumerGroupState.EMPTY: "empty",
    ConsumerGroupState.DEAD: "dead",
}

_ELECTING = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE}


class PartitionStatusError(KairosError):
    """The group or the topics could not be described."""

    retryable = True

    def __init__(self, what: str, reason: str) -> None:
        self.what = what
        self.reason = reason
        super().__init__(f"cannot describe {what}: {reason}")


@dataclass(frozen=True)
class GroupMember:
    instance: str
    """The member's client id: the ticker's `--instance`."""
    member_id: str
    host: str
    partitions: tuple[int, ...]


@dataclass(frozen=True)
class PartitionStatus:
    partition: int
    owner: str | None
    """The instance the group assigns the partition to now; `None`: nobody fires it."""
    owner_host: str | None
    committed_offset: int | None
    """The next schedules offset the owner's state reflects; `None` before the first commit."""
    end_offset: int
    changelog_end_offset: int
    ownership: OwnershipInfo | None
    """What the last committing owner wrote with its offsets (see the module docstring)."""

    @property
    def lag(self) -> int | None:
        """Schedule changes not yet applied by the owner."""
        if self.committed_offset is None:
            return None
        return max(0, self.end_offset - self.committed_offset)

    @property
    def changelog_lag(self) -> int | None:
        """Changelog records (and transaction markers) beyond what the owner's store reflected
        at its last commit: what a new owner would restore on top of that store."""
        if self.ownership is None or self.ownership.changelog_offset is None:
            return None
        return max(0, self.changelog_end_offset - self.ownership.changelog_offset)

    @property
    def reported_by_owner(self) -> bool:
        return self.ownership is not None and self.ownership.instance == self.owner


@dataclass(frozen=True)
class GroupStatus:
    group_id: str
    topic: str
    state: str
    """stable, rebalancing, empty (no member), dead (no such group), or unknown."""
    members: tuple[GroupMember, ...]
    partitions: tuple[PartitionStatus, ...]

    @property
    def unowned(self) -> list[int]:
        return [p.partition for p in self.partitions if p.owner is None]


def read_group_status(
    settings: KafkaSettings, group_id: str, timeout_s: float = 10.0
) -> GroupStatus:
    """The tickers' group and every schedules partition, as the broker sees them now."""
    admin = AdminClient(settings.consumer_config())
    schedules = settings.layout.name(TopicRole.SCHEDULES)
    changelog = settings.layout.name(TopicRole.CHANGELOG)
    count = _partition_count(admin, schedules, timeout_s)
    description = _result(
        admin.describe_consumer_groups([group_id], request_timeout=timeout_s)[group_id],
        f"consumer group {group_id}",
        timeout_s,
    )
    members = tuple(
        GroupMember(
            instance=member.client_id,
            member_id=member.member_id,
            host=member.host,
            partitions=tuple(
                sorted(
                    tp.partition
                    for tp in member.assignment.topic_partitions
                    if tp.topic == schedules
                )
            ),
        )
        for member in description.members
    )
    owners = {p: m for m in members for p in m.partitions}
    by_partition = _committed(settings, group_id, schedules, count, timeout_s)
    ends = _end_offsets(admin, [schedules, changelog], count, timeout_s)
    partitions = []
    for p in range(count):
        tp = by_partition.get(p)
        owner = owners.get(p)
        partitions.append(
            PartitionStatus(
                partition=p,
                owner=owner.instance if owner else None,
                owner_host=owner.host if owner else None,
                committed_offset=tp.offset if tp is not None and tp.offset >= 0 else None,
                end_offset=ends[schedules, p],
                changelog_end_offset=ends[changelog, p],
                ownership=OwnershipInfo.decode(tp.metadata if tp is not None else None),
            )
        )
    state = _STATES.get(description.state, "unknown")
    return GroupStatus(group_id, schedules, state, members, tuple(partitions))


def read_judged(
    settings: KafkaSettings, group_id: str, timeout_s: float = 10.0
) -> dict[int, Judged]:
    """What the tickers' group committed for each schedules partition: how far its changes were
    judged, and in which ownership mode (`Judged`), for readers that show what tickers took."""
    admin = AdminClient(settings.consumer_config())
    schedules = settings.layout.name(TopicRole.SCHEDULES)
    count = _partition_count(admin, schedules, timeout_s)
    committed = _committed(settings, group_id, schedules, count, timeout_s)
    judged = {}
    for p in range(count):
        tp = committed.get(p)
        offset = tp.offset if tp is not None and tp.offset >= 0 else None
        info = OwnershipInfo.decode(tp.metadata if tp is not None else None)
        judged[p] = Judged.of(offset, info)
    return judged


def _committed(
    settings: KafkaSettings, group_id: str, topic: str, count: int, timeout_s: float
) -> dict[int, TopicPartition]:
    """The group's committed offset (with its metadata) of each partition of `topic`.

    Asked through a consumer of the group that never subscribes (so never joins it) and never
    commits, not through the admin API: librdkafka's admin ListConsumerGroupOffsets dereferences
    a null group handle when the coordinator answers NOT_COORDINATOR or
    COORDINATOR_LOAD_IN_PROGRESS, as a freshly started broker does, and the process dies of a
    segmentation fault (confluentinc/librdkafka#5040, seen here with 2.16.0). The consumer
    returns those answers as errors instead; they are asked again until `timeout_s`.
    """
    consumer = Consumer(
        settings.consumer_config(
            **{
                "group.id": group_id,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                # read_committed would ask for stable offsets (require_stable): every call would
                # wait out the tickers' open transactions, and time out behind a hung one, just
                # when an operator looks after a ticker died. The admin API asked for none.
                "isolation.level": "read_uncommitted",
            }
        )
    )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                committed = consumer.committed(
                    [TopicPartition(topic, p) for p in range(count)],
                    timeout=max(0.1, deadline - time.monotonic()),
                )
                return {tp.partition: tp for tp in committed}
            except KafkaException as error:
                # NOT_COORDINATOR and COORDINATOR_LOAD_IN_PROGRESS (a broker just started, a
                # coordinator moving) are answered at once, not retried by the client.
                if not _coordinator_busy(error.args[0]) or time.monotonic() >= deadline:
                    raise PartitionStatusError(
                        f"the committed offsets of {group_id}", str(error.args[0])
                    ) from error
                time.sleep(0.2)
    finally:
        consumer.close()


_COORDINATOR_BUSY = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


def _coordinator_busy(error: KafkaError) -> bool:
    """An answer that a moment later is another (librdkafka does not mark them retriable)."""
    return error.code() in _COORDINATOR_BUSY or error.retriable()


def _partition_count(admin: AdminClient, topic: str, timeout_s: float) -> int:
    try:
        metadata = admin.list_topics(topic, timeout=timeout_s)
    except KafkaException as error:
        raise PartitionStatusError(topic, f"the broker did not answer: {error}") from error
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise PartitionStatusError(
            topic,
            "the topic does not exist; check --bootstrap-servers and --topic-prefix, or create "
            "the topics with `kairos topics create`",
        )
    return len(found.partitions)


def _end_offsets(
    admin: AdminClient, topics: list[str], count: int, timeout_s: float
) -> dict[tuple[str, int], int]:
    """Each partition's end as a read_committed reader sees it (the changelog is transactional,
    and a pending transaction's records are not there yet for a restoring owner)."""
    # confluent-kafka leaves OffsetSpec's factory methods unannotated.
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    asked = {TopicPartition(t, p): latest for t in topics for p in range(count)}
    deadline = time.monotonic() + timeout_s
    while True:
        futures = admin.list_offsets(
            asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=timeout_s
        )
        try:
            return {
                (tp.topic, tp.partition): future.result(timeout=timeout_s).offset
                for tp, future in futures.items()
            }
        except FutureTimeoutError:
            # A future the admin client did not settle in time: a slow broker, asked again.
            if time.monotonic() > deadline:
                what = f"the ends of {', '.join(topics)}"
                raise PartitionStatusError(what, f"no answer within {timeout_s:g}s") from None
            continue
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            # A new topic's leaders are still being elected, or leadership just moved; the
            # admin client does not retry these itself.
            passing = error.retriable() or error.code() in _ELECTING
            if not passing or time.monotonic() > deadline:
                what = f"the ends of {', '.join(topics)}"
                raise PartitionStatusError(what, error.str()) from None
            time.sleep(0.2)


def _result(future: Any, what: str, timeout_s: float) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as error:
        raise PartitionStatusError(what, str(error.args[0])) from error
    except FutureTimeoutError:
        raise PartitionStatusError(
            what, f"the broker did not answer within {timeout_s:g}s"
        ) from None


def group_status_document(status: GroupStatus) -> dict[str, Any]:
    """`kairos partitions --json`'s document, which the console's API serves too."""
    return {
        "group_id": status.group_id,
        "topic": status.topic,
        "state": status.state,
        "members": [
            {
                "instance": m.instance,
                "member_id": m.member_id,
                "host": m.host,
                "partitions": list(m.partitions),
            }
            for m in status.members
        ],
        "partitions": [_partition_document(p) for p in status.partitions],
        "unowned": status.unowned,
    }


def _partition_document(p: PartitionStatus) -> dict[str, Any]:
    info = p.ownership
    return {
        "partition": p.partition,
        "owner": p.owner,
        "owner_host": p.owner_host,
        "committed_offset": p.committed_offset,
        "end_offset": p.end_offset,
        "lag": p.lag,
        "changelog_end_offset": p.changelog_end_offset,
        "changelog_offset": info.changelog_offset if info else None,
        "changelog_lag": p.changelog_lag,
        # The rest is what the last committing owner reported, which after a handover may be
        # the previous owner: `reported_by` names it.
        "reported_by": info.instance if info else None,
        "reported_host": info.host if info else None,
        "since": _text(info.since) if info else None,
        "schedules": info.schedules if info else None,
        "next_due": _text(info.next_due) if info else None,
        "last_fire_lateness_ms": info.last_fire_lateness_ms if info else None,
        # The mode the partition's changes were last judged in, since which offset.
        "mode": info.mode.value if info and info.mode else None,
        "mode_since": info.mode_since if info else None,
    }


def _text(instant: datetime | None) -> str | None:
    return None if instant is None else format_instant(instant)
