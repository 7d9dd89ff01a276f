"""How far back the topics are complete: the audit horizon (docs/operations.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.topic_scan import NO_TOPIC, HistoryReadError


@dataclass(frozen=True)
class HistoryHorizon:
    """How far back the topics are complete: `kept` before now, limited by `limited_by`."""

    kept: timedelta | None
    """`None`: nothing is ever dropped."""
    limited_by: str | None


def history_horizon(settings: KafkaSettings, timeout_s: float = 10.0) -> HistoryHorizon:
    """The shortest of the schedules topic's compaction lag and the runs topics' retention.

    Before it, compaction may have dropped superseded schedule versions and retention old runs,
    so an audit window reaching further back proves nothing.
    """
    # Notices (level 6) off: a one-shot client closed at once reports the events it did not
    # serve, which is noise on a command's stderr.
    admin = AdminClient(settings.consumer_config(log_level=5))
    wanted = {
        TopicRole.SCHEDULES: "min.compaction.lag.ms",
        TopicRole.RUNS: "retention.ms",
        TopicRole.RUN_EVENTS: "retention.ms",
    }
    resources = {
        ConfigResource(ResourceType.TOPIC, settings.layout.name(role)): key
        for role, key in wanted.items()
    }
    shortest: tuple[int, str] | None = None
    for resource, future in admin.describe_configs(list(resources)).items():
        key = resources[resource]
        try:
            entries = future.result(timeout=timeout_s)
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise HistoryReadError(resource.name, NO_TOPIC) from None
            reason = f"cannot read its config: {error.str()}"
            raise HistoryReadError(resource.name, reason) from None
        except TimeoutError:
            reason = f"no answer from the broker within {timeout_s:.0f}s; is it running?"
            raise HistoryReadError(resource.name, reason) from None
        value = int(entries[key].value) if key in entries else -1
        # -1 keeps forever; a lag of 0 compacts at once (nothing is kept beyond the latest).
        if value >= 0 and (shortest is None or value < shortest[0]):
            shortest = (value, f"{resource.name} {key}={value}")
    if shortest is None:
        return HistoryHorizon(None, None)
    return HistoryHorizon(timedelta(milliseconds=shortest[0]), shortest[1])
