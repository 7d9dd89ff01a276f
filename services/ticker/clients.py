"""What a ticker session is made of: the clients, behind the ports of `kairos.streams.kafka.ports`.

`ConfluentTickerClients` makes the real ones for a deployment; the unit tests pass in-memory ones
(`tests/fakes/kafka.py`) with the same rules, so the session, take-over and commit paths run the
same code on both.
"""

from __future__ import annotations

from typing import Any, Protocol

from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kairos.core.calendar_versions import CalendarBook
from kairos.core.errors import KairosError
from kairos.services.ticker.upstream_book import PartitionOf, PartitionRead
from kairos.streams.kafka.authorization import RoleAccess
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.passing import BROKER_GONE, LEADER_MOVING, ask_until_answered
from kairos.streams.kafka.ports import (
    EndOffsets,
    GroupMember,
    PartitionReader,
    TransactionalProducer,
)
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.calendar_ownership import SignedCalendars
from kairos.streams.readers.calendar_reader import CalendarFeed
from kairos.streams.readers.run_outcomes import RunOutcome, RunOutcomeFeed, Wanted
from kairos.streams.readers.schedule_reader import ScheduleReader
from kairos.streams.readers.team_events import TeamChange, TeamFeed
from kairos.streams.wire.codec import Codecs


class CalendarSource(Protocol):
    """The calendars topic, followed: each `refresh` judges what was published since the last,
    with the registered teams when ownership is enforced (raises `CalendarReadError` when the
    topic cannot be read)."""

    topic: str

    def refresh(
        self, timeout_s: float | None = None, signed: SignedCalendars | None = None
    ) -> CalendarBook: ...
    def close(self) -> None: ...


class TeamSource(Protocol):
    """The teams topic, followed: each `refresh` gives every registered team (raises
    `TeamReadError` when the topic cannot be read)."""

    topic: str

    def refresh(self, timeout_s: float | None = None) -> dict[str, TeamChange]: ...
    def close(self) -> None: ...


class RunOutcomeSource(Protocol):
    """The run-events topic, followed from its end: the wanted runs that ended since the last
    `take` (`kairos.streams.readers.run_outcomes`)."""

    def take(self, wanted: Wanted, max_records: int = 10_000) -> list[RunOutcome]: ...
    def close(self) -> None: ...


class UpstreamUntrustedError(KairosError):
    """A partition's schedules were read, but not which of its changes its ticker took."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(
            f"partition {partition} of {topic}: the tickers' verdicts could not be read, so its "
            "changes cannot be trusted (a signed deployment)"
        )


UPSTREAM_READ_TIMEOUT_S = 5.0
"""The longest a read of an upstream's partition may take before its runs are fired unread."""


class TickerClients(Protocol):
    """Makes the clients of one group session; each is closed by the session that asked."""

    def check_access(self) -> None:
        """Refuse to start (`NotAuthorizedError`) without the ticker's grants, when asked first."""

    def calendars(self) -> CalendarSource: ...
    def teams(self) -> TeamSource: ...
    def run_outcomes(self) -> RunOutcomeSource: ...
    def upstream_partitions(self, signed: bool) -> PartitionOf:
        """Reads the partition of a schedule the ticker's schedules wait for (`upstream_book`);
        `signed`: only as a signed ticker judged it."""

    def group_member(self, config: dict[str, Any]) -> GroupMember: ...
    def transactional_producer(self, config: dict[str, Any]) -> TransactionalProducer: ...
    def partition_reader(self, config: dict[str, Any]) -> PartitionReader: ...
    def end_offsets(self) -> EndOffsets: ...


class AdminEndOffsets:
    """`EndOffsets` through the admin client's ListOffsets (read_uncommitted: the log's end)."""

    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin

    def end_offset(self, partition: TopicPartition, timeout_s: float) -> int:
        admin = self._admin

        def ask(attempt_s: float) -> int:
            futures = admin.list_offsets(
                # confluent-kafka ships OffsetSpec's factories without annotations.
                {partition: OffsetSpec.latest()},  # type: ignore[no-untyped-call]
                isolation_level=IsolationLevel.READ_UNCOMMITTED,
                request_timeout=attempt_s,
            )
            return int(futures[partition].result().offset)

        return ask_until_answered(ask, timeout_s, LEADER_MOVING | BROKER_GONE)


class ConfluentTickerClients:
    """The real clients of a deployment's cluster."""

    def __init__(self, kafka: KafkaSettings, codecs: Codecs, access: RoleAccess) -> None:
        self._kafka = kafka
        self._codecs = codecs
        self._access = access

    def check_access(self) -> None:
        self._access.check()

    def calendars(self) -> CalendarSource:
        return CalendarFeed(self._kafka, codecs=self._codecs)

    def teams(self) -> TeamSource:
        return TeamFeed(self._kafka, codecs=self._codecs)

    def run_outcomes(self) -> RunOutcomeSource:
        return RunOutcomeFeed(self._kafka, self._codecs.run_event)

    def upstream_partitions(self, signed: bool) -> PartitionOf:
        def partition_of(schedule_id: str) -> PartitionRead:
            # Bounded: a first read may happen as a run is fired (usually ahead, in idle time).
            reader = ScheduleReader(self._kafka, self._codecs, timeout_s=UPSTREAM_READ_TIMEOUT_S)
            snapshot = reader.read_partition_of(schedule_id)
            partition = partition_for(schedule_id, snapshot.partitions)
            if signed and not snapshot.signed(partition):
                # The tickers' verdicts were not read: a change they may refuse (another team's
                # forgery) would count. Nothing is trusted rather than that.
                raise UpstreamUntrustedError(reader.topic, partition)
            held = snapshot.schedules
            schedules = {i: stored.schedule for i, stored in held.items()}
            return PartitionRead(partition, schedules, snapshot.partitions)

        return partition_of

    def group_member(self, config: dict[str, Any]) -> GroupMember:
        return Consumer(config)

    def transactional_producer(self, config: dict[str, Any]) -> TransactionalProducer:
        return Producer(config)

    def partition_reader(self, config: dict[str, Any]) -> PartitionReader:
        return Consumer(config)

    def end_offsets(self) -> EndOffsets:
        return AdminEndOffsets(AdminClient(self._kafka.client_config()))
