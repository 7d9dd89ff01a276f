"""The runs that ended, as a ticker follows them for `pause_on_failure`: the run-events topic.

Only executors may write run events (their ACL role; `kairos acls`), so a ticker can act on
them without a signature: a team can publish schedule changes, not run outcomes. The feed reads
every partition of the topic from its end as of the start (a streak in progress before is not
counted, `kairos.core.failure_streaks`), and decodes only the events of the schedules its
caller asks about: the run id in the key names the schedule, so the rest cost no decoding.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import OFFSET_END, Consumer, KafkaException, Message, TopicPartition

from kairos.core.run_id import RunIdError, parse_run_id, rerun_request_of
from kairos.streams.kafka.settings import HISTORY_READERS_GROUP, KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.wire.codec import Codec, DecodeError

logger = logging.getLogger(__name__)

_ENDED = frozenset({"succeeded", "dead_lettered"})
_METADATA_TIMEOUT_S = 10.0
_RETRY_S = 30.0
"""How long the feed waits after a failed read before it tries again (each try logs)."""


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """A scheduled run that ended: `failure` is the reason it was dead-lettered, `None` if it
    succeeded."""

    schedule_id: str
    nominal_at: datetime
    failure: str | None


Wanted = Callable[[str], bool]
"""Whether the outcomes of a schedule id are wanted (decoded and returned)."""


class RunOutcomeFeed:
    """Follows the run-events topic from its end. Not thread-safe: one thread reads."""

    def __init__(self, settings: KafkaSettings, codec: Codec) -> None:
        self.topic = settings.layout.name(TopicRole.RUN_EVENTS)
        self._codec = codec
        self._consumer = Consumer(
            settings.consumer_config(
                **{
                    # Assigned, never joined nor committed: the history readers' id, as
                    # every reader of run events carries.
                    "group.id": settings.deployment_id(HISTORY_READERS_GROUP),
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                }
            )
        )
        self._assigned = False
        self._retry_at = 0.0

    def take(self, wanted: Wanted, max_records: int = 10_000) -> list[RunOutcome]:
        """The wanted outcomes published since the last take; none when the topic cannot be
        read (logged, tried again at the first take 30 s later)."""
        if time.monotonic() < self._retry_at:
            return []
        try:
            if not self._assigned:
                self._assign()
            messages = self._consumer.consume(num_messages=max_records, timeout=0)
        except KafkaException as error:
            logger.warning(
                "%s not read (pause_on_failure waits; next try in %gs): %s",
                self.topic,
                _RETRY_S,
                error,
            )
            self._retry_at = time.monotonic() + _RETRY_S
            return []
        outcomes = []
        for message in messages:
            outcome = self._outcome(message, wanted)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    def close(self) -> None:
        self._consumer.close()

    def _assign(self) -> None:
        metadata = self._consumer.list_topics(self.topic, timeout=_METADATA_TIMEOUT_S)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            problem = "missing" if topic is None else topic.error or "no partitions"
            raise KafkaException(f"topic {self.topic}: {problem}")
        self._consumer.assign(
            [TopicPartition(self.topic, partition, OFFSET_END) for partition in topic.partitions]
        )
        self._assigned = True

    def _outcome(self, message: Message, wanted: Wanted) -> RunOutcome | None:
        key, value = message.key(), message.value()
        if message.error() is not None or key is None or value is None:
            return None
        # A schedule id holds no '@': what precedes the first names the schedule, so the events
        # of schedules not wanted (most of a herd's) cost no parsing.
        if not wanted(key.partition(b"@")[0].decode("utf-8", errors="replace")):
            return None
        try:
            run_id = key.decode("utf-8")
            schedule_id, nominal = parse_run_id(run_id)
        except (UnicodeDecodeError, RunIdError):
            return None
        if rerun_request_of(run_id) is not None:
            return None
        try:
            event = self._codec.decode(value)
        except DecodeError as error:
            logger.warning("%s offset %d not decoded: %s", self.topic, message.offset(), error)
            return None
        if event["kind"] not in _ENDED or event["run_id"] != run_id:
            return None
        failed = event["kind"] == "dead_lettered"
        return RunOutcome(schedule_id, nominal, (event["reason"] or "failed") if failed else None)
