"""The console's actions (pause, resume, trigger now, backfill), off unless the console knows
its users (a users file or a trusted proxy).

An action is the CLI's own SDK call (`SchedulesClient.pause`, `.resume`, `.request_rerun`), so
what the console publishes is what `kairos schedules pause|resume|trigger|backfill` would,
validated the same way (`kairos.core.reruns`), with the person's name as `changed_by`
(`<name> via console`) for the history.

Who may act, and as which team, is `kairos.services.console.acting`'s; how a request proves
who sends it, `kairos.services.console.identity`'s and `.door`'s.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

from kairos.core.errors import KairosError
from kairos.core.rerun_request import RerunKind
from kairos.core.reruns import MAX_BACKFILL_RUNS, planned_rerun_ids, rerun_request
from kairos.core.run_id import format_instant
from kairos.core.time_arguments import parse_time
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.team_events import TeamFeed, TeamReadError

logger = logging.getLogger(__name__)

TEAMS_READ_S = 5.0


class AdminTeams:
    """The administrators' teams as the teams topic has them: an action asks before it picks
    the team it signs as. Unreadable, no team is an administrators' (the log says why), so a
    user acts only on their own teams' schedules."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._feed: TeamFeed | None = None
        self._lock = threading.Lock()

    def names(self) -> frozenset[str]:
        with self._lock:
            try:
                if self._feed is None:
                    self._feed = TeamFeed(self._settings, timeout_s=TEAMS_READ_S)
                teams = self._feed.refresh(TEAMS_READ_S)
            except TeamReadError as error:
                logger.warning("administrators' teams unknown: %s", error)
                return frozenset()
        return frozenset(name for name, c in teams.items() if c.team and c.team.admin)

    def close(self) -> None:
        with self._lock:
            if self._feed is not None:
                self._feed.close()


ACTIONS = ("pause", "resume", "trigger", "backfill")


class ActionError(KairosError):
    """An action asked with fields it cannot use; the message says what to send."""


def act(
    settings: KafkaSettings, action: str, schedule_id: str, who: str, fields: dict[str, str]
) -> str:
    """Do `action` on the schedule as the CLI does, with the form's or the JSON's `fields`
    (`reason`; a backfill's `from` and `to`); returns what was done, for the page."""
    changed_by = f"{who} via console"
    reason = fields.get("reason") or None
    with SchedulesClient(settings, changed_by) as client:
        if action == "pause":
            client.pause(schedule_id, reason)
            return f"paused {schedule_id}"
        if action == "resume":
            client.resume(schedule_id, reason)
            return f"resumed {schedule_id}"
        now = datetime.now(UTC).replace(microsecond=0)
        kind, window = (RerunKind.TRIGGER, (now, now))
        if action == "backfill":
            kind, window = RerunKind.BACKFILL, _backfill_window(fields, now)
        stored = client.get(schedule_id)
        request = rerun_request(
            schedule_id,
            kind,
            window,
            request_id=None,
            overlap=None,
            reason=reason,
            requested=(changed_by, now),
            definition_offset=stored.offset,
        )
        limit = MAX_BACKFILL_RUNS if kind is RerunKind.BACKFILL else None
        runs = planned_rerun_ids(stored.schedule, request, limit)
        partition = client.request_rerun(request)
    return (
        f"requested {kind.value} {request.request_id} of {schedule_id}: {len(runs)} run(s), "
        f"fired by the ticker of partition {partition}"
    )


def _backfill_window(fields: dict[str, str], now: datetime) -> tuple[datetime, datetime]:
    """The window as `kairos schedules backfill --from --to` takes it."""
    if not fields.get("from") or not fields.get("to"):
        raise ActionError("a backfill needs from and to, e.g. 2027-03-14T07:00:00Z or -2h")
    first, last = parse_time(fields["from"], now), parse_time(fields["to"], now)
    if last < first:
        raise ActionError(f"to {format_instant(last)} is before from {format_instant(first)}")
    if last > now:
        raise ActionError(
            f"to {format_instant(last)} is in the future: a backfill re-runs occurrences that "
            "are due already; future ones fire on schedule"
        )
    return first, last
