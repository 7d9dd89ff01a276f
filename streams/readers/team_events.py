"""The contract of the teams topic, in one place: how a team registration becomes a record and back.

- The topic has one partition and is written by the deployment's administrators only (ACLs,
  docs/teams.md); every ticker that enforces ownership reads it whole and follows it.
- The key is the team's name, as UTF-8 text.
- A null value (a tombstone) removes the team: its changes are refused from then on.
- Any other value is a `TeamEvent` whose `team` is the key and whose keys are Ed25519 public
  keys. A record breaking this is skipped (logged), never read as a removal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from kairos.core.errors import KairosError
from kairos.core.ownership import Team, TeamDefinitionError
from kairos.core.quotas import Quota, QuotaDefinitionError
from kairos.streams.kafka.settings import TEAM_READERS_GROUP, KafkaSettings
from kairos.streams.kafka.topic_check import teams_partition_problem
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.table_feed import TableFeed, TopicReadError
from kairos.streams.wire.codec import Codec, Codecs, DecodeError, make_codecs

logger = logging.getLogger(__name__)


class TeamReadError(TopicReadError):
    """The teams topic could not be read to its end: the broker or the topic is unavailable."""

    retryable = True
    kind = "teams"


class TeamPublishError(KairosError):
    """The broker did not acknowledge a team change; nothing may be assumed registered."""

    retryable = True


@dataclass(frozen=True)
class TeamChange:
    """A record of the teams topic: `team` registered as it now is, or `None`: removed."""

    name: str
    team: Team | None
    changed_by: str | None
    changed_at: datetime


@dataclass(frozen=True)
class SkippedTeamRecord:
    offset: int
    reason: str


def encode_team_event(codec: Codec, team: Team, changed_by: str, now: datetime) -> bytes:
    return codec.encode(
        {
            "team": team.name,
            "public_keys": list(team.public_keys),
            "admin": team.admin,
            "max_schedules": team.quota.max_schedules,
            "max_fires_per_minute": team.quota.max_fires_per_minute,
            "changed_by": changed_by,
            "changed_at": now,
        }
    )


def read_team_message(codec: Codec, message: Message) -> TeamChange | SkippedTeamRecord:
    """What a record of the teams topic means."""
    offset = message.offset()
    assert offset is not None  # set on every consumed record
    key, value = message.key(), message.value()
    _, timestamp_ms = message.timestamp()
    try:
        if key is None:
            raise TeamDefinitionError("a team record must be keyed by the team's name")
        name = key.decode("utf-8")
        if value is None:
            return TeamChange(name, None, None, datetime.fromtimestamp(timestamp_ms / 1000, UTC))
        event = codec.decode(value)
        if event["team"] != name:
            raise TeamDefinitionError(f"the key {name!r} differs from the event's team")
        quota = Quota(event["max_schedules"], event["max_fires_per_minute"])
        team = Team(name, tuple(event["public_keys"]), event["admin"], quota)
        return TeamChange(name, team, event["changed_by"], event["changed_at"])
    except (DecodeError, TeamDefinitionError, QuotaDefinitionError, UnicodeDecodeError) as problem:
        logger.warning("skipping teams record at offset %d: %s", offset, problem)
        return SkippedTeamRecord(offset, f"{type(problem).__name__}: {problem}")


class TeamFeed:
    """Follows the teams topic: each `refresh` folds in what was published since the last."""

    def __init__(
        self, settings: KafkaSettings, *, timeout_s: float = 30.0, codecs: Codecs | None = None
    ) -> None:
        codec = (codecs or make_codecs()).team_event
        self._table: TableFeed[TeamChange | SkippedTeamRecord] = TableFeed(
            settings,
            TopicRole.TEAMS,
            group=TEAM_READERS_GROUP,
            read_record=partial(read_team_message, codec),
            read_error=TeamReadError,
            partition_problem=teams_partition_problem,
            timeout_s=timeout_s,
        )
        self.topic = self._table.topic
        self.teams: dict[str, TeamChange] = {}
        """Every registered team's latest change, by name."""

    def refresh(self, timeout_s: float | None = None) -> dict[str, TeamChange]:
        """The registered teams as of the topic's end now; raises `TeamReadError`."""
        teams = dict(self.teams)
        for record in self._table.read_new(timeout_s):
            if isinstance(record, TeamChange):
                if record.team is None:
                    teams.pop(record.name, None)
                else:
                    teams[record.name] = record
        self.teams = teams
        return teams

    def close(self) -> None:
        self._table.close()

    def __enter__(self) -> TeamFeed:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def publish_team_change(
    settings: KafkaSettings,
    name: str,
    team: Team | None,
    changed_by: str,
    *,
    timeout_s: float = 30.0,
) -> None:
    """Register `team` under `name`, or remove it (`None`): returns once acknowledged."""
    value = (
        None
        if team is None
        else encode_team_event(make_codecs().team_event, team, changed_by, datetime.now(UTC))
    )
    outcome: list[KafkaError | None] = []
    producer = Producer(settings.producer_config(**{"message.timeout.ms": int(timeout_s * 1000)}))
    try:
        producer.produce(
            settings.layout.name(TopicRole.TEAMS),
            key=name.encode(),
            value=value,
            on_delivery=lambda error, _: outcome.append(error),
        )
        producer.flush(timeout_s)
    except KafkaException as failure:
        raise TeamPublishError(f"team {name!r} was not published: {failure}") from failure
    if not outcome or outcome[0] is not None:
        error = outcome[0] if outcome else None
        reason = "no acknowledgement in time" if error is None else error.str()
        raise TeamPublishError(f"team {name!r} was not published: {reason}")
