"""What an executor checks about its fleet before it runs anything: one store, long enough memory.

**One store per consumer group.** A run's claim lives in the dedupe store of the executor that
admitted it. When a partition moves (a crash, a rebalance, a restart), its next owner is
redelivered the records consumed since the last commit, and suppresses them only if it reads
the same store. So each executor advertises its store's id (`DedupeStore.store_id`) in its
client id, and refuses a group where a member advertises another:

1. at start, before joining: a member on another store makes it refuse, after waiting one
   session timeout in case that member is the lingering entry of an executor that died;
2. at every assignment, before any record of the assigned partitions is admitted: two executors
   that started together passed step 1 side by side, and each now sees the other. An executor
   whose first check found the group on its store alone has admitted and keeps running (the
   newcomer refuses at its own first assignment, before it admits anything); one that never
   found it so stops with the error, so the two never both execute.

A member whose client id advertises no store (an older executor, during a rolling upgrade) is
logged, not refused.

**The store remembers at least as long as the runs topic.** A finished run is pruned from the
store after `retention`; a record of the runs topic older than that, redelivered (a new group, a
reset of offsets), would be claimed again and execute twice. So the executor refuses to start
when the runs topic keeps records longer than the store remembers them.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConsumerGroupDescription,
    ResourceType,
)

from kairos.core.durations import format_duration
from kairos.core.errors import KairosError
from kairos.streams.dedupe.base import DedupeStore
from kairos.streams.kafka.passing import COORDINATOR_MOVING, passes

logger = logging.getLogger(__name__)

_STORE_TAG = "@dedupe-store-"
_RECHECK_S = 0.5
_ADMIN_TIMEOUT_S = 10.0
_ADMIN_RETRY_S = 30.0
_SHARED_STORE_FIX = (
    "give every executor of the group one shared store: "
    "--dedupe-url postgresql://user@host:5432/db (executors on several hosts) or "
    "--dedupe-url sqlite:////shared/path/dedupe.sqlite3 (executors of one host); "
    "or give this executor a group of its own (--group-id)"
)


class SeparateStoresError(KairosError):
    """A member of the executors' group keeps its claims in another dedupe store."""

    def __init__(self, group_id: str, store: str, store_id: str, member: str) -> None:
        self.group_id = group_id
        self.store = store
        self.store_id = store_id
        self.member = member
        super().__init__(
            f"executor group {group_id} has a member ({member}) whose dedupe store is not this "
            f"executor's ({store}, id {store_id}): a partition that moves between them lands on "
            f"a store that never saw its claims, and runs execute twice. To fix it, "
            f"{_SHARED_STORE_FIX}"
        )


class FleetCheckError(KairosError):
    """The broker did not answer a check the executor must make before it runs."""

    retryable = True

    def __init__(self, check: str, problem: str) -> None:
        self.check = check
        self.problem = problem
        super().__init__(f"cannot check {check}: {problem}; is the broker running?")


class DedupeRetentionError(KairosError):
    """The dedupe store forgets finished runs before the runs topic drops their records."""

    def __init__(self, topic: str, topic_keeps: str, store_retention: timedelta) -> None:
        self.topic = topic
        self.topic_keeps = topic_keeps
        self.store_retention = store_retention
        super().__init__(
            f"the dedupe store forgets finished runs after {format_duration(store_retention)} "
            f"(--dedupe-retention) but {topic} keeps its records {topic_keeps}: a run "
            f"redelivered after the store forgot it would execute again. Set --dedupe-retention "
            f"to at least the topic's retention.ms, or lower retention.ms of {topic}"
        )


def advertised_client_id(instance: str, store_id: str) -> str:
    """The client id an executor joins its group with: its instance and its store's id."""
    return f"{instance}{_STORE_TAG}{store_id}"


def advertised_store(client_id: str) -> str | None:
    """The store id a member advertises, or `None` (not an executor that advertises one)."""
    _, tag, store_id = client_id.rpartition(_STORE_TAG)
    return store_id if tag else None


class StoreGuard:
    """Keeps an executor out of a group whose members use another dedupe store."""

    def __init__(
        self, admin: AdminClient, group_id: str, store: DedupeStore, lingering: timedelta
    ) -> None:
        self._admin = admin
        self._group_id = group_id
        self._store = store
        self._lingering_s = lingering.total_seconds()
        self._established = False

    def check_before_joining(self) -> None:
        """Refuse if a member on another store is still there after one session timeout."""
        deadline = time.monotonic() + self._lingering_s
        while True:
            other = self._other_store_member()
            if other is None:
                return
            if time.monotonic() >= deadline:
                raise self._error(other)
            logger.info(
                "executor group %s: member %s uses another dedupe store; waiting %.0fs for it "
                "to leave (a dead executor's member lingers until its session times out)",
                self._group_id,
                other,
                self._lingering_s,
            )
            time.sleep(_RECHECK_S)

    def check_assignment(self) -> None:
        """At an assignment: raise unless this executor already ran alone on its store."""
        try:
            other = self._other_store_member()
        except FleetCheckError:
            if not self._established:
                raise
            logger.warning("executor group %s: membership not checked", self._group_id)
            return
        if other is None:
            self._established = True
        elif self._established:
            logger.error(
                "executor group %s: member %s joined with another dedupe store; it refuses to "
                "run, and this executor keeps its partitions",
                self._group_id,
                other,
            )
        else:
            raise self._error(other)

    def _error(self, member: str) -> SeparateStoresError:
        return SeparateStoresError(self._group_id, self._store.name, self._store.store_id, member)

    def _describe(self) -> ConsumerGroupDescription:
        """The group as the broker has it; retries what a starting broker or group answers."""
        deadline = time.monotonic() + _ADMIN_RETRY_S
        while True:
            future = self._admin.describe_consumer_groups(
                [self._group_id], request_timeout=_ADMIN_TIMEOUT_S
            )[self._group_id]
            try:
                described: ConsumerGroupDescription = future.result(timeout=_ADMIN_TIMEOUT_S)
                return described
            except KafkaException as failure:
                error: KafkaError = failure.args[0]
                problem = f"{error.name()} {error.str()}"
                transient = passes(error, COORDINATOR_MOVING)
            except TimeoutError:
                problem, transient = "no answer", True
            if not transient or time.monotonic() >= deadline:
                raise FleetCheckError(f"consumer group {self._group_id}", problem)
            logger.info("executor group %s not described yet: %s", self._group_id, problem)
            time.sleep(_RECHECK_S)

    def _other_store_member(self) -> str | None:
        """The client id of a member that advertises another store, if there is one."""
        for member in self._describe().members:
            store_id = advertised_store(member.client_id)
            if store_id is None:
                logger.warning(
                    "executor group %s: member %s advertises no dedupe store (an older "
                    "executor?); make sure it uses this one (%s)",
                    self._group_id,
                    member.client_id,
                    self._store.name,
                )
            elif store_id != self._store.store_id:
                return str(member.client_id)
        return None


def check_retention(admin: AdminClient, runs_topic: str, store_retention: timedelta) -> None:
    """Refuse a store that forgets runs before the runs topic drops them (module docstring)."""
    resource = ConfigResource(ResourceType.TOPIC, runs_topic)
    future = admin.describe_configs([resource], request_timeout=_ADMIN_TIMEOUT_S)[resource]
    try:
        entries = future.result(timeout=_ADMIN_TIMEOUT_S)
    except KafkaException as failure:
        error: KafkaError = failure.args[0]
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise FleetCheckError(
                f"topic {runs_topic}", "it does not exist; run `kairos topics create`"
            ) from None
        raise FleetCheckError(f"topic {runs_topic}", error.str()) from None
    except TimeoutError:
        raise FleetCheckError(f"topic {runs_topic}", "no answer") from None
    policy = entries["cleanup.policy"].value if "cleanup.policy" in entries else "delete"
    if "delete" not in policy.split(","):
        raise DedupeRetentionError(
            runs_topic, f"forever (cleanup.policy={policy})", store_retention
        )
    retention_ms = int(entries["retention.ms"].value) if "retention.ms" in entries else -1
    if retention_ms < 0:
        raise DedupeRetentionError(runs_topic, "forever (retention.ms=-1)", store_retention)
    topic_retention = timedelta(milliseconds=retention_ms)
    if topic_retention > store_retention:
        keeps = f"for {format_duration(topic_retention)} (retention.ms={retention_ms})"
        raise DedupeRetentionError(runs_topic, keeps, store_retention)
