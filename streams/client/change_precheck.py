"""A change its ticker would refuse, refused before it is published: the CLI's and the SDK's check.

In a signed deployment the tickers decide (`services/ticker/ownership.py`): the topic takes any
team's records, and the ticker refuses a change its signer may not make. A publisher that signs
checks the same rules first (`kairos.core.ownership.refusal`) against what the ticker holds
(`kairos.streams.readers.held_schedules`), so that `kairos schedules pause` of another team's
schedule fails at once, saying why, rather than printing "paused" for a change the ticker then
refuses. It saves the round trip and nothing more: a team's own Kafka client skips it, and the
ticker refuses the change anyway.

It applies only where the schedule's partition was last judged in signed mode (an open ticker
takes every change), and uses the team registrations as the teams topic has them now; a
publisher that may not read the teams topic is warned and publishes unchecked.
"""

from __future__ import annotations

import logging

from kairos.core.errors import KairosError
from kairos.core.ownership import Change, Held, Team, refusal
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.held_schedules import StoredSchedule
from kairos.streams.readers.team_events import TeamFeed, TeamReadError

logger = logging.getLogger(__name__)


class ChangeRefusedError(KairosError):
    """A change the deployment's signed tickers would refuse; nothing was published."""


class OwnershipPrecheck:
    """The ownership rules, applied before publishing to what a team signs."""

    def __init__(self, settings: KafkaSettings, team: str, timeout_s: float) -> None:
        self._settings = settings
        self._team_name = team
        self._timeout_s = timeout_s
        self._team: Team | None = None

    def check(
        self,
        schedule_id: str,
        change: Change,
        held: StoredSchedule | None,
        new_owner: str | None,
    ) -> None:
        """Raise `ChangeRefusedError` when the signed ticker would refuse `change`; nothing when
        the teams topic cannot be read (the ticker decides)."""
        team = self._registered()
        if team is None:
            return
        state = None if held is None else Held(held.schedule.owner, held.schedule.paused)
        reason = refusal(team, schedule_id, change, state, new_owner)
        if reason is not None:
            raise ChangeRefusedError(
                f"{reason}; not published: this deployment's tickers would refuse it"
            )

    def _registered(self) -> Team | None:
        if self._team is None:
            try:
                with TeamFeed(self._settings, timeout_s=self._timeout_s) as feed:
                    registered = feed.refresh().get(self._team_name)
            except TeamReadError as error:
                logger.warning("ownership not checked before publishing: %s", error)
                return None
            if registered is None or registered.team is None:
                raise ChangeRefusedError(
                    f"team {self._team_name!r}, which the signing key names, is not registered "
                    "in this deployment: its tickers refuse every change it signs; an "
                    "administrator registers it (`kairos teams put`)"
                )
            self._team = registered.team
        return self._team
