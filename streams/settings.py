"""Connection settings every Kairos process shares, frozen once read at the CLI edge."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kairos.streams.topics import TopicLayout


class KafkaSettings(BaseModel):
    """Where the broker is and how topics are named.

    Environment variables are read by the CLI (`KAIROS_BOOTSTRAP_SERVERS`,
    `KAIROS_TOPIC_PREFIX`), never here, so library users pass settings explicitly.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(min_length=1)
    topic_prefix: str = "kairos."
    schedules_partitions: int = Field(default=12, ge=1)

    @property
    def layout(self) -> TopicLayout:
        return TopicLayout(prefix=self.topic_prefix, schedules_partitions=self.schedules_partitions)

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """Base librdkafka configuration; every producer and consumer starts from it."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            # librdkafka's default partitioner is not Java's; murmur2 makes a schedule land on the
            # same partition whichever language's client published it.
            "partitioner": "murmur2_random",
        }
        config.update(overrides)
        return config

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
