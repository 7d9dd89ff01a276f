"""Ownership enforced where every schedule change passes: the ticker that owns its partition.

With `--ownership signed`, a change is taken only when its signature verifies against a key its
team registered on the teams topic (`kairos.streams.wire.signing`) and that team may make it
(`kairos.core.ownership`). Anything else is refused: dead-lettered with the reason and reported
to the team that signed it, inside the transaction that passes its offset. The teams topic is
read to its end before the ticker joins its group and followed after, as the calendars are.

After refusing a change, the ticker publishes in the same transaction the definition it holds
(a tombstone when it holds none) marked as a restoration (`kairos.streams.wire.schedule_events`), so
the key's latest record on the compacted topic, which readers and compaction go by, is again
what the ticker holds; reading it back changes nothing.

Three kinds of change are taken unsigned, because they change nothing the ticker would not: a
delete of a schedule the ticker does not hold, the change a ticker itself publishes when a
schedule's runs ran out (its `after_last_run`, `services/ticker/lifecycle.py`), and the pause it
publishes when the schedule's `pause_on_failure` is reached, when its own count of the runs'
outcomes says so too (`services/ticker/failure_pause.py`). A record that
names a team (`kairos-team`) is verified whatever its kind: on every change a signed ticker
took, the team named is one whose signature it verified, which readers show beside the
self-asserted `changed_by` (`kairos.streams.kafka.ownership.Judged.verified_team`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime

from confluent_kafka import Message

from kairos.core.firing import ScheduleState
from kairos.core.ownership import Change, Held, Team, refusal, upsert_change
from kairos.core.quotas import UNLIMITED, Quota
from kairos.core.schedule_lifecycle import AfterLastRun
from kairos.services.ticker.clients import TeamSource
from kairos.streams.readers.team_events import TeamChange, TeamReadError
from kairos.streams.state.changelog import Floor
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.records import schedule_event_record
from kairos.streams.wire.schedule_events import (
    TOMBSTONE,
    RerunRequested,
    ScheduleDeleted,
    ScheduleUpserted,
)
from kairos.streams.wire.signing import Refused, Verifier, named_team

logger = logging.getLogger(__name__)

REFRESH_S = 1.0
"""How soon a registered team (or a revoked key) reaches the ticker's decisions."""
REFRESH_TIMEOUT_S = 2.0
RETRY_S = 10.0

Taken = ScheduleUpserted | ScheduleDeleted | RerunRequested
PauseEarned = Callable[[ScheduleState], bool]
"""Whether the ticker's own count of a schedule's failed runs reached its `pause_on_failure`."""


class TickerOwnership:
    """The registered teams, followed, and the rules applied to each change taken."""

    def __init__(self, max_age_ms: int, pause_earned: PauseEarned) -> None:
        self._max_age_ms = max_age_ms
        self._pause_earned = pause_earned
        self._feed: TeamSource | None = None
        self._teams: dict[str, Team] = {}
        self._limits_any = False
        self._verifier = Verifier({}, max_age_ms)
        self._next_read_at = 0.0

    def start(self, feed: TeamSource) -> None:
        """Read `feed` to its end (raises `TeamReadError` when it cannot), and follow it."""
        self._feed = feed
        self._take(feed.refresh())
        self._next_read_at = time.monotonic() + REFRESH_S
        logger.info("teams read: %d from %s", len(self._teams), feed.topic)

    def follow(self) -> None:
        """Read what was registered since the last read, when `REFRESH_S` has passed."""
        if self._feed is None or time.monotonic() < self._next_read_at:
            return
        try:
            self._take(self._feed.refresh(timeout_s=REFRESH_TIMEOUT_S))
        except TeamReadError as error:
            # Changes go on being checked against the teams read last; a later read catches up.
            logger.warning("teams not read again (next try in %gs): %s", RETRY_S, error)
            self._next_read_at = time.monotonic() + RETRY_S
            return
        self._next_read_at = time.monotonic() + REFRESH_S

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None

    def refused(
        self, message: Message, change: Taken, state: ScheduleState | None, left: Floor | None
    ) -> Refused | None:
        """Why `change` (consumed as `message`) may not be taken, or `None` when it may.

        `left` is what a deletion or quarantine left of the id when `state` is `None`: its
        last owner keeps it (`kairos.core.ownership.refusal`)."""
        held = None if state is None else Held(state.schedule.owner, state.paused)
        kind = _kind(change, held)
        unsigned = named_team(message.headers()) is None
        if unsigned and _unsigned_taken(state, change, kind, self._pause_earned):
            return None
        signer = self._signed_by(message)
        if isinstance(signer, Refused):
            return signer
        new_owner = change.schedule.owner if isinstance(change, ScheduleUpserted) else None
        last_owner = None if left is None else left.last_owner
        team = self._teams[signer]
        reason = refusal(team, change.schedule_id, kind, held, new_owner, last_owner=last_owner)
        return None if reason is None else Refused(reason, signer)

    def signer(self, message: Message) -> str | None:
        """The registered team whose key signed `message`, verified again; `None` if none."""
        signer = self._signed_by(message)
        return None if isinstance(signer, Refused) else signer

    def _signed_by(self, message: Message) -> str | Refused:
        return self._verifier.signer(
            str(message.topic()),
            message.key(),
            message.value(),
            message.headers(),
            message.timestamp(),
        )

    def registered_teams(self) -> Mapping[str, Team]:
        """The registered teams as last read; the same object until they change."""
        return self._teams

    @property
    def limits_any(self) -> bool:
        """Whether a registered team has a quota (the tickers then count each partition's use)."""
        return self._limits_any

    def quota_of(self, team: str) -> Quota:
        """The registered team's quota; an unregistered team's schedules are not limited (no
        change signed by it is taken anyway; an administrators' may give it schedules)."""
        registered = self._teams.get(team)
        return UNLIMITED if registered is None else registered.quota

    def _take(self, registered: dict[str, TeamChange]) -> None:
        teams = {name: change.team for name, change in registered.items() if change.team}
        if teams != self._teams:
            self._teams = teams
            self._limits_any = any(team.quota.limited for team in teams.values())
            self._verifier = Verifier(
                {name: team.public_keys for name, team in teams.items()}, self._max_age_ms
            )


def _kind(change: Taken, held: Held | None) -> Change:
    if isinstance(change, RerunRequested):
        return Change.RERUN
    if isinstance(change, ScheduleDeleted):
        return Change.TOMBSTONE if change.change == TOMBSTONE else Change.DELETE
    return upsert_change(held, change.schedule.paused)


def _unsigned_taken(
    state: ScheduleState | None, change: Taken, kind: Change, pause_earned: PauseEarned
) -> bool:
    """Whether `change` is one of the three kinds taken without a signature."""
    if state is None:
        return kind in (Change.DELETE, Change.TOMBSTONE)
    if _ends_ran_out(state, change, kind):
        return True
    return _pauses_as_is(state, change, kind) and pause_earned(state)


def _pauses_as_is(state: ScheduleState, change: Taken, kind: Change) -> bool:
    """Whether `change` pauses `state`'s definition and changes nothing else."""
    return (
        isinstance(change, ScheduleUpserted)
        and kind is Change.PAUSE
        and change.schedule
        == state.schedule.model_copy(update={"paused": True, "id": state.schedule_id})
    )


def _ends_ran_out(state: ScheduleState, change: Taken, kind: Change) -> bool:
    """Whether `change` is what the ticker publishes itself once `state`'s runs ran out."""
    if not state.ran_out:
        return False
    if state.schedule.after_last_run is AfterLastRun.DELETE:
        return kind in (Change.DELETE, Change.TOMBSTONE)
    return _pauses_as_is(state, change, kind)


def restoring_event(
    state: ScheduleState, codecs: Codecs, changed_by: str, now: datetime, refused_offset: int
) -> bytes:
    """The value that restates `state`'s definition after refusing the change at the offset."""
    schedule = state.schedule_with_id()
    return codecs.schedule_event.encode(
        schedule_event_record(
            schedule.id,
            "paused" if schedule.paused else "upserted",
            schedule,
            changed_by=changed_by,
            changed_at=now,
            reason=f"restores the definition in force after the refused change at offset "
            f"{refused_offset}",
        )
    )
