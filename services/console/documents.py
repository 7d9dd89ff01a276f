"""What each page shows, as one document: the page renders it, the JSON API returns it as is.

Instants are ISO-8601 UTC text, as in the CLI's `--json` output; where a document overlaps a
CLI command's (`kairos partitions`, `kairos schedules describe`), it has that command's shape.
"""

from __future__ import annotations

import difflib
import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from kairos.core.calendar import never_fires_reason
from kairos.core.calendar_rules import uses_calendars
from kairos.core.errors import KairosError
from kairos.core.preview_listing import fire_document, upcoming
from kairos.core.run_id import format_instant
from kairos.core.schedule import Schedule
from kairos.services.console import queries
from kairos.services.console.dependencies import dependencies
from kairos.services.console.follower import trigger_of
from kairos.services.console.identity import Identity
from kairos.services.console.lateness import OVER_AN_HOUR, merged, percentile_ms
from kairos.services.console.redaction import redacted, sees_secrets
from kairos.services.console.runs import HIDDEN_REASON, OUTPUT_STATES
from kairos.services.console.view import ConsoleView
from kairos.streams.kafka.ownership import NOT_JUDGED, Judged, Ownership
from kairos.streams.kafka.partition_status import group_status_document, read_group_status
from kairos.streams.kafka.settings import KafkaSettings

_GROUP_FRESH_S = 5.0


def instant_text(epoch_ms: int | None) -> str | None:
    if epoch_ms is None:
        return None
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat().replace("+00:00", "Z")


class LiveGroup:
    """The tickers' group as `kairos partitions` reads it, read again at most every 5 s."""

    def __init__(self, settings: KafkaSettings, group_id: str) -> None:
        self._settings = settings
        self._group_id = group_id
        self._lock = threading.Lock()
        self._read_at = -_GROUP_FRESH_S
        self._document: dict[str, Any] = {}

    def document(self) -> dict[str, Any]:
        """`kairos partitions --json`'s document, or `{"error": why}` when it cannot be read."""
        with self._lock:
            if time.monotonic() - self._read_at >= _GROUP_FRESH_S:
                try:
                    status = read_group_status(self._settings, self._group_id)
                    self._document = group_status_document(status)
                except KairosError as error:
                    self._document = {"group_id": self._group_id, "error": str(error)}
                self._read_at = time.monotonic()
            return self._document


def schedules_page(view: ConsoleView, chosen: queries.ScheduleFilter, after: str) -> dict[str, Any]:
    shown = queries.list_schedules(view, chosen, after, queries.PAGE_SIZE + 1)
    more = len(shown) > queries.PAGE_SIZE
    shown = shown[: queries.PAGE_SIZE]
    return {
        "total": queries.count_schedules(view),
        "schedules": shown,
        "next_after": shown[-1]["schedule_id"] if more else None,
    }


def schedule_page(
    view: ConsoleView,
    group: LiveGroup,
    schedule_id: str,
    now: datetime,
    viewer: Identity | None = None,
) -> dict[str, Any] | None:
    """The schedule as its page and `/api/v1/schedules/<id>` show it to `viewer`: secret values
    only to the owning team's users (`kairos.services.console.redaction`)."""
    held = held_schedule(view, group, schedule_id)
    if held is None:
        return None
    found, placement, judged = held
    schedule = Schedule.model_validate(found["definition"])
    # Unjudged (the group unreadable, or no verdict yet), what the ticker holds is not known:
    # secrets are then shown to no one.
    hide = judged.mode is None or not sees_secrets(viewer, schedule.owner)
    if hide:
        found["definition"] = redacted(found["definition"])
    fires = upcoming(schedule, now, 10, None)
    runs = queries.runs(view, schedule_id)
    for run in runs:
        for key in ("nominal_at", "fired_at", "finished_at"):
            run[key] = instant_text(run[key])
        if hide and run["reason"] and run["status"] in OUTPUT_STATES:
            run["reason"] = HIDDEN_REASON
    # The keys and shapes `kairos schedules describe --json` uses for the same things.
    next_fires = [fire_document(p, schedule) for p in fires]
    for fire in next_fires:
        fire["nominal_at"] = format_instant(fire["nominal_at"])
    return {
        "schedule": found,
        "ticker": None if placement is None else placement["owner"],
        "next_fires": next_fires,
        "never_fires": None if fires else never_fires_reason(schedule, now),
        "calendars_not_applied": uses_calendars(schedule),
        "last_runs": runs,
        "last_changes": _changes_with_diffs(queries.changes(view, schedule_id), judged, viewer),
        "dependencies": dependencies(
            view, schedule, now, lambda other: _held_definition(view, group, other)
        ),
    }


def _held_definition(view: ConsoleView, group: LiveGroup, schedule_id: str) -> Schedule | None:
    held = held_schedule(view, group, schedule_id)
    return None if held is None else Schedule.model_validate(held[0]["definition"])


def held_schedule(
    view: ConsoleView, group: LiveGroup, schedule_id: str
) -> tuple[dict[str, Any], dict[str, Any] | None, Judged] | None:
    """The schedule as its ticker holds it (`None`: none held), its partition's entry in the
    group, and how far that partition was judged: what pages show and actions are decided by."""
    latest = queries.schedule(view, schedule_id)
    if latest is None:
        return None
    partitions = group.document().get("partitions", [])
    placement = next((p for p in partitions if p["partition"] == latest["partition"]), None)
    judged = _judged(placement)
    found = _as_held(view, latest, judged)
    return None if found is None else (found, placement, judged)


def _as_held(view: ConsoleView, latest: dict[str, Any], judged: Judged) -> dict[str, Any] | None:
    """The schedule page's row as its ticker holds the schedule, not as the key's latest record
    has it (which may be a change the ticker refused or may refuse); `None` when it holds none."""
    signed = judged.mode is Ownership.SIGNED
    awaiting_from = (judged.committed_offset or 0) if signed else None
    held, awaiting = queries.held_change(view, latest["schedule_id"], awaiting_from)
    if held is None:
        return None
    schedule = Schedule.model_validate(held["definition"])
    kind, trigger = trigger_of(schedule)
    return {
        **latest,
        "owner": schedule.owner,
        "paused": schedule.paused,
        "trigger_kind": kind,
        "trigger": trigger,
        "timezone": schedule.timezone,
        "offset": held["offset"],
        "revision": held["revision"],
        "changed_at": instant_text(held["changed_at"]),
        "changed_by": held["changed_by"],
        "signed_by": judged.verified_team(held["offset"], held["signing_team"]),
        "judged": judged.committed_offset is not None and held["offset"] < judged.committed_offset,
        "awaiting_ticker": awaiting,
        "definition": held["definition"],
        "labels": dict(schedule.labels),
    }


def _judged(placement: dict[str, Any] | None) -> Judged:
    """How far the schedule's partition was judged, and in which mode, from `kairos partitions`'
    entry for it (none when the group could not be read)."""
    if placement is None:
        return NOT_JUDGED
    mode = placement["mode"]
    return Judged(
        placement["committed_offset"],
        None if mode is None else Ownership(mode),
        placement["mode_since"],
    )


def _changes_with_diffs(
    changes: list[dict[str, Any]], judged: Judged, viewer: Identity | None
) -> list[dict[str, Any]]:
    """Each change (newest first) with the diff of the definition from the change before it,
    and the team a signed ticker verified when it took it (none for a refused change).

    Each version's secret values are shown only to its own owner's users, and only once a
    ticker took it; otherwise they are redacted, and marked changed only between two versions
    a ticker took, so a refused forgery cannot learn whether it guessed a secret right."""
    taken = [_taken(change, judged) for change in changes] + [False]
    definitions = [change["definition"] for change in changes] + [None]
    for index, change in enumerate(changes):
        before = _seen(definitions[index + 1], None, taken[index + 1], viewer)
        compared = definitions[index + 1] if taken[index] and taken[index + 1] else None
        after = _seen(definitions[index], compared, taken[index], viewer)
        change["diff"] = list(
            difflib.unified_diff(_lines(before), _lines(after), "before", "after", lineterm="", n=1)
        )[2:]
        change["changed_at"] = instant_text(change["changed_at"])
        team = change.pop("signing_team")
        verified = judged.verified_team(change["offset"], team)
        change["signed_by"] = None if change["refused"] else verified
    for change in changes:
        change.pop("definition")
    return changes


def _taken(change: dict[str, Any], judged: Judged) -> bool:
    committed = judged.committed_offset
    return not change["refused"] and committed is not None and change["offset"] < committed


def _seen(
    definition: dict[str, Any] | None,
    compared: dict[str, Any] | None,
    taken: bool,
    viewer: Identity | None,
) -> dict[str, Any] | None:
    if definition is None or (taken and sees_secrets(viewer, definition.get("owner"))):
        return definition
    return redacted(definition, compared)


def _lines(definition: dict[str, Any] | None) -> list[str]:
    if definition is None:
        return []
    return json.dumps(definition, indent=2, sort_keys=True).splitlines()


def activity_page(view: ConsoleView, now: datetime, hours: int) -> dict[str, Any]:
    """Per minute over the last `hours`: fires, lateness p50/p99, and what went wrong."""
    until = int(now.timestamp()) // 60 + 1
    since = until - hours * 60
    rows = {m.minute: m for m in queries.minutes(view, since, until)}
    minutes = []
    for minute in range(since, until):
        row = rows.get(minute)
        if row is None:
            minutes.append({"minute": instant_text(minute * 60_000), "fires": 0})
            continue
        minutes.append(
            {
                "minute": instant_text(minute * 60_000),
                "fires": row.fires,
                "lateness_p50_ms": _bound(percentile_ms(row.lateness, 0.5)),
                "lateness_p99_ms": _bound(percentile_ms(row.lateness, 0.99)),
                "skipped": row.skipped,
                "failed": row.failed,
                "dead_lettered": row.dead_lettered,
                "deadline_missed": row.deadline_missed,
            }
        )
    window = merged([m.lateness for m in rows.values()])
    return {
        "from": instant_text(since * 60_000),
        "to": instant_text(until * 60_000),
        "fires": sum(m.fires for m in rows.values()),
        "lateness_p50_ms": _bound(percentile_ms(window, 0.5)),
        "lateness_p99_ms": _bound(percentile_ms(window, 0.99)),
        "minutes": minutes,
    }


def _bound(value: int | None) -> int | None:
    """A bucket bound; the last bucket's (later than an hour) has no finite bound to show."""
    return None if value is None or value == OVER_AN_HOUR else value


def default_audit_window(now: datetime) -> tuple[datetime, datetime]:
    """The last hour up to a minute ago: recent, and past the ticker's commit interval."""
    end = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
    return end - timedelta(hours=1), end
