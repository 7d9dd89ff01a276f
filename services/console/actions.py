"""The console's actions (pause, resume, trigger now, backfill), off unless a users file is
given.

An action is the CLI's own SDK call (`SchedulesClient.pause`, `.resume`, `.request_rerun`), so
what the console publishes is what `kairos schedules pause|resume|trigger|backfill` would,
validated the same way (`kairos.core.reruns`), with the person's name as `changed_by`
(`<name> via console`) for the history.

Who may act is a file of `name:token` lines, readable by the console's user only. A request
proves who it is with HTTP Basic authentication (the name and the token, over TLS in front of
the console when it is reached from another host); a browser asks for them once at `/login`.
A form posted from another site is refused by its `Origin`, so a page elsewhere cannot make an
authenticated browser act.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import stat
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from kairos.core.errors import KairosError
from kairos.core.rerun_request import RerunKind
from kairos.core.reruns import MAX_BACKFILL_RUNS, planned_rerun_ids, rerun_request
from kairos.core.run_id import format_instant
from kairos.core.time_arguments import parse_time
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.kafka.settings import KafkaSettings

SHORTEST_TOKEN = 16
REALM = "Kairos console actions"


class UsersFileError(KairosError):
    """The users file cannot be used; the message names the line or the fix."""


@dataclass(frozen=True)
class Users:
    tokens: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> Users:
        try:
            mode = path.stat().st_mode
            text = path.read_text()
        except OSError as error:
            raise UsersFileError(f"--users-file {path}: {error.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise UsersFileError(
                f"--users-file {path} is readable by other users; `chmod 600 {path}`"
            )
        tokens: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, colon, token = line.strip().partition(":")
            if not colon or not name or len(token) < SHORTEST_TOKEN or name in tokens:
                raise UsersFileError(
                    f"--users-file {path} line {number}: write name:token, one name once, with "
                    f"a token of at least {SHORTEST_TOKEN} characters (e.g. from "
                    "`openssl rand -hex 16`)"
                )
            tokens[name] = token
        if not tokens:
            raise UsersFileError(f"--users-file {path} names nobody; add a name:token line")
        return cls(tokens)

    def authenticated(self, authorization: str | None) -> str | None:
        """The name a `Basic` Authorization header proves, or `None`."""
        scheme, _, encoded = (authorization or "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, _, token = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        known = self.tokens.get(name)
        # Compared whatever the name, in constant time: neither names nor tokens leak by timing.
        matches = hmac.compare_digest(token.encode(), (known or "\0").encode())
        return name if known is not None and matches else None


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
