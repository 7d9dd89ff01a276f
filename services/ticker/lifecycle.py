"""What the ticker publishes when a schedule fired its `max_runs`-th run: its `after_last_run`.

The ticker that fired the last run publishes, in the same fenced transaction, a normal change of
the schedules topic (`paused` with the whole definition, or `deleted` and a tombstone), as
`kairos schedules pause` or `delete` would: the topic stays the schedule's truth for every
reader, the audit replays the change like any other, and the ticker itself applies it when it
reads it back. A ticker fenced before committing publishes nothing; its successor fires the
last run again and publishes the change then.
"""

from __future__ import annotations

from datetime import datetime

from kairos.core.firing import ScheduleState
from kairos.core.schedule_lifecycle import AfterLastRun
from kairos.streams.codec import Codecs
from kairos.streams.records import schedule_event_record


def after_last_run_records(
    state: ScheduleState, codecs: Codecs, instance: str, now: datetime
) -> list[tuple[bytes, bytes | None]]:
    """(key, value) of the change that ends a schedule whose runs ran out, in order."""
    schedule = state.schedule_with_id()
    action = schedule.after_last_run
    delete = action is AfterLastRun.DELETE
    event = schedule_event_record(
        schedule.id,
        "deleted" if delete else "paused",
        None if delete else schedule.model_copy(update={"paused": True}),
        changed_by=f"ticker:{instance}",
        changed_at=now,
        reason=f"max_runs {schedule.max_runs} reached (after_last_run: {action.value})",
    )
    key = schedule.id.encode("utf-8")
    records: list[tuple[bytes, bytes | None]] = [(key, codecs.schedule_event.encode(event))]
    if delete:
        records.append((key, None))
    return records
