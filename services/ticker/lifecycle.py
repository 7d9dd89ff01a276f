"""What the ticker publishes itself: a schedule's `after_last_run` once it fired its `max_runs`-th
run, and its pause once `pause_on_failure` is reached (`services/ticker/failure_pause.py`).

The ticker that fired the last run publishes, in the same fenced transaction, a normal change of
the schedules topic (`paused` with the whole definition, or `deleted` and a tombstone), as
`kairos schedules pause` or `delete` would: the topic stays the schedule's truth for every
reader, the audit replays the change like any other, and the ticker itself applies it when it
reads it back. A ticker fenced before committing publishes nothing; its successor fires the
last run again and publishes the change then.

The change is conditional on the version it ended: its records carry `kairos-if-version` with
the state's version (`IF_VERSION_HEADER`). An owner's edit appended between what the ticker had
read and its change is read first; the change then no longer holds (`stale_reason`), and the
ticker refuses it and restores the key, in every ownership mode, so the edit stands.
"""

from __future__ import annotations

from datetime import datetime

from kairos.core.firing import ScheduleState
from kairos.core.schedule_lifecycle import AfterLastRun
from kairos.streams.wire.codec import Codecs
from kairos.streams.wire.records import schedule_event_record
from kairos.streams.wire.schedule_events import (
    IF_VERSION_HEADER,
    ScheduleChange,
    ScheduleUpserted,
)

Headers = list[tuple[str, str | bytes | None]]


def after_last_run_records(
    state: ScheduleState, codecs: Codecs, instance: str, now: datetime
) -> list[tuple[bytes, bytes | None, Headers]]:
    """(key, value, headers) of the change that ends a schedule whose runs ran out, in order."""
    schedule = state.schedule_with_id()
    action = schedule.after_last_run
    reason = f"max_runs {schedule.max_runs} reached (after_last_run: {action.value})"
    return ticker_change_records(
        state, codecs, instance, now, delete=action is AfterLastRun.DELETE, reason=reason
    )


def ticker_change_records(
    state: ScheduleState, codecs: Codecs, instance: str, now: datetime, *, delete: bool, reason: str
) -> list[tuple[bytes, bytes | None, Headers]]:
    """(key, value, headers) of the pause (or delete) of `state`'s schedule the ticker publishes
    itself, marked for the version it ends: its `after_last_run`, its `pause_on_failure`."""
    schedule = state.schedule_with_id()
    event = schedule_event_record(
        schedule.id,
        "deleted" if delete else "paused",
        None if delete else schedule.model_copy(update={"paused": True}),
        changed_by=f"ticker:{instance}",
        changed_at=now,
        reason=reason,
    )
    key = schedule.id.encode("utf-8")
    headers: Headers = [(IF_VERSION_HEADER, str(state.version).encode())]
    records: list[tuple[bytes, bytes | None, Headers]] = [
        (key, codecs.schedule_event.encode(event), headers)
    ]
    if delete:
        records.append((key, None, headers))
    return records


def stale_reason(
    version: int | None, change: ScheduleChange, held: ScheduleState | None
) -> str | None:
    """Why a change marked for `version` (`None`: unmarked) no longer holds, given what is held
    now; `None` when it holds. A delete of a schedule no longer held changes nothing either way
    (the tombstone after the ticker's own delete), so it holds."""
    if version is None:
        return None
    if held is None:
        if not isinstance(change, ScheduleUpserted):
            return None
        now_at = "was deleted since"
    elif held.version == version:
        return None
    else:
        now_at = f"changed since (it is at version {held.version})"
    return (
        f"a change of {change.schedule_id!r} made from its definition at version {version} "
        f"(a pause, a resume, or the ticker's after_last_run), but the schedule {now_at}: not "
        "taken, the later change stands; read the schedule again and repeat the change"
    )
