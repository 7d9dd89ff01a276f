"""What an executor session is made of: the clients, behind the ports of
`kairos.streams.kafka.ports`.

`ConfluentExecutorClients` makes the real ones for a deployment; the unit tests pass in-memory
ones (`tests/fakes/kafka.py`) with the same rules, so the session, the turn, the intake and the
rebalance callbacks run the same code on both. What needs an admin client (the ACL check, the
fleet checks) is a method here, so the rooms never hold one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Protocol

from confluent_kafka import Consumer
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient

from kairos.services.executor.fleet import StoreGuard, check_retention
from kairos.services.executor.settings import ExecutorSettings
from kairos.streams.dedupe.base import DedupeStore
from kairos.streams.kafka.authorization import RoleAccess
from kairos.streams.kafka.ports import GroupMember, Producer
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole

_LINGERING_MARGIN = timedelta(seconds=2)
"""Beyond a session timeout, how long a dead executor's member may take to leave the group."""


class AssignmentCheck(Protocol):
    """Asked at every assignment, before a record of it is admitted (`fleet.StoreGuard`)."""

    def check_assignment(self) -> None: ...


class ExecutorClients(Protocol):
    """Makes the clients of one executor session; each is closed by the session that asked."""

    def check_access(self) -> None:
        """Refuse to start (`NotAuthorizedError`) without the executor's grants, when asked
        first."""

    def check_fleet(self, settings: ExecutorSettings, store: DedupeStore) -> AssignmentCheck:
        """Refuse a store that forgets too soon or a group on another store (`fleet`), before
        joining; what it returns checks each assignment the same way."""

    def group_member(self, config: dict[str, Any]) -> GroupMember: ...
    def producer(self, config: dict[str, Any]) -> Producer: ...


class ConfluentExecutorClients:
    """The real clients of a deployment's cluster."""

    def __init__(self, kafka: KafkaSettings, access: RoleAccess) -> None:
        self._kafka = kafka
        self._access = access

    def check_access(self) -> None:
        self._access.check()

    def check_fleet(self, settings: ExecutorSettings, store: DedupeStore) -> AssignmentCheck:
        kafka = self._kafka
        # Notices (level 6) off: the admin client's closing would log them as noise.
        admin = AdminClient(kafka.consumer_config(log_level=5))
        check_retention(admin, kafka.layout.name(TopicRole.RUNS), settings.retention)
        lingering = timedelta(milliseconds=settings.session_timeout_ms) + _LINGERING_MARGIN
        guard = StoreGuard(admin, settings.group(kafka), store, lingering)
        guard.check_before_joining()
        return guard

    def group_member(self, config: dict[str, Any]) -> GroupMember:
        return Consumer(config)

    def producer(self, config: dict[str, Any]) -> Producer:
        return KafkaProducer(config)
