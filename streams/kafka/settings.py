"""Connection settings every Kairos process shares, frozen once read at the CLI edge."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError
from pydantic import BaseModel, ConfigDict, Field

from kairos.streams.kafka.topics import TopicLayout

if TYPE_CHECKING:
    from pydantic._internal._repr import ReprArgs

SECRET_MARKERS = ("password", "secret", "key.pem", "ssl_key", "oauthbearer.config")
"""A property whose name contains one of these holds a secret (sasl.password,
ssl.key.password, ssl.keystore.password, ssl.key.pem, sasl.oauthbearer.client.secret, …)."""

REDACTED = "[redacted]"

# The names a deployment claims on the cluster, each under its prefix (`deployment_id`).
TICKER_GROUP = "tickers"
EXECUTOR_GROUP = "executors"
NOTIFIERS_GROUP = "notifiers"
TICKER_TRANSACTIONAL_ID = "ticker-"
"""Followed by the ticker's instance name."""
RESTORE_GROUP = "restore-"
"""Followed by the ticker's instance name: its restore consumer's group id (never joined)."""
SCHEDULE_READERS_GROUP = "schedule-readers"
HISTORY_READERS_GROUP = "history-readers"
CALENDAR_READERS_GROUP = "calendar-readers"
TEAM_READERS_GROUP = "team-readers"
CONSOLE_READERS_GROUP = "console-readers"
"""The group ids of the assigned (never joined) consumers of `kairos apply`, `kairos schedules`,
the audit and the calendars readers (tickers, `kairos calendars`, the audit): confluent-kafka
requires one, and librdkafka looks its coordinator up."""

client_log = logging.getLogger("kairos.kafka")

# librdkafka reports a broker it cannot reach both as log lines (facility FAIL/ERROR, at error
# level, once per reconnect attempt) and through error_cb; the error_cb report is the one kept,
# the log lines are demoted to DEBUG so an unreachable broker is not a screenful.
_REPEATED_FACILITIES = frozenset({"FAIL", "ERROR"})
# Errors librdkafka retries by itself: worth a line while a service waits, not a warning.
_RETRIED_CODES = frozenset(
    {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE}
)
_REPEAT_EVERY_S = 60.0


def is_secret(name: str) -> bool:
    return any(marker in name.lower() for marker in SECRET_MARKERS)


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration with every secret's value replaced: the only form that may be logged."""
    return {name: REDACTED if is_secret(name) else value for name, value in config.items()}


class _ClientLog:
    """Where each client's librdkafka log goes (confluent-kafka's `logger`): Python logging."""

    def log(self, level: int, message: str, *args: Any) -> None:
        facility = args[0] if args else ""
        if facility in _REPEATED_FACILITIES:
            level = logging.DEBUG
        client_log.log(level, message, *args)


class _ErrorReport:
    """Each client's error_cb: one line per distinct error per minute, not one per retry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[int, str], float] = {}

    def __call__(self, error: KafkaError) -> None:
        key = (error.code(), error.str())
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -_REPEAT_EVERY_S) < _REPEAT_EVERY_S:
                return
            self._last[key] = now
        if error.fatal():
            level = logging.ERROR
        elif error.code() in _RETRIED_CODES:
            level = logging.INFO
        else:
            level = logging.WARNING
        client_log.log(level, "kafka client: %s (%s)", error.str(), error.name())


_CLIENT_LOG = _ClientLog()


class KafkaSettings(BaseModel):
    """Where the broker is, how topics are named, and the librdkafka properties of every client.

    Environment variables and properties files are read by the CLI (`kairos --help`), never
    here, so library users pass settings explicitly. `properties` reach every producer,
    consumer and admin client; the properties a client's correctness depends on (its group,
    transactional id, isolation, commits, acks) are set by Kairos over them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(min_length=1)
    topic_prefix: str = "kairos."
    schedules_partitions: int = Field(default=12, ge=1)
    properties: dict[str, str] = Field(default_factory=dict)
    signing_key: Path | None = None
    """The team's signing key file (`kairos.streams.wire.signing`): schedule changes published with
    these settings are signed with it; `None`: published unsigned."""

    def __repr_args__(self) -> ReprArgs:
        # A settings object in a log line or a traceback shows no secret.
        for name, value in super().__repr_args__():
            yield name, redacted(value) if name == "properties" else value

    @property
    def layout(self) -> TopicLayout:
        return TopicLayout(prefix=self.topic_prefix, schedules_partitions=self.schedules_partitions)

    def deployment_id(self, name: str) -> str:
        """An id this deployment claims on a shared cluster (a group, a transactional id): the
        topic prefix is the deployment's namespace, so two deployments never share one."""
        return f"{self.topic_prefix}{name}"

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """Base librdkafka configuration; every producer, consumer and admin starts from it."""
        config: dict[str, Any] = {
            # librdkafka's default partitioner is not Java's; murmur2 makes a schedule land on the
            # same partition whichever language's client published it.
            "partitioner": "murmur2_random",
            **self.properties,
            "bootstrap.servers": self.bootstrap_servers,
            "logger": _CLIENT_LOG,
            "error_cb": _ErrorReport(),
        }
        config.update(overrides)
        return config

    def producer_config(self, **overrides: Any) -> dict[str, Any]:
        """A producer whose acknowledged writes survive a broker's loss and are never doubled.

        acks=all: a record is acknowledged once every in-sync replica has it, so a leader
        failing right after the ack loses nothing (a fire or a run event lost is a lost run).
        Idempotence: a retried send after a timeout is not written twice.
        """
        return self.client_config(**{"acks": "all", "enable.idempotence": True, **overrides})

    def group_member_config(
        self, group_id: str, instance: str, session_timeout_ms: int, **overrides: Any
    ) -> dict[str, Any]:
        """A long-lived consumer-group member (ticker, executor) that reads only committed data.

        read_committed also makes the offset fetch at assignment wait for a pending transaction
        of the previous owner (KIP-447 require_stable); offsets are committed by the service.
        """
        return self.consumer_config(
            **{
                "group.id": group_id,
                "client.id": instance,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": max(100, session_timeout_ms // 5),
                "partition.assignment.strategy": "cooperative-sticky",
                **overrides,
            }
        )

    def consumer_config(self, **overrides: Any) -> dict[str, Any]:
        base = self.client_config(**overrides)
        # A consumer rejects producer-only properties.
        base.pop("partitioner", None)
        return base
