"""The one builder of `DeadLetter` records: a bounded copy of the record that failed, with why.

A dead letter copies the failed record's key and value so that republishing them replays it.
The copy is bounded: a record near Kafka's size limit, copied whole beside the other fields,
would not fit in a record itself, and a dead letter that cannot be produced would stop the
process that writes it. Past the bounds, the copy keeps the first bytes, `truncated` is set and
`key_size`/`value_size` keep the original sizes. Every schedule event the contract accepts
(`MAX_SCHEDULE_EVENT_BYTES`) is copied whole.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kairos.streams.wire.schedule_events import MAX_SCHEDULE_EVENT_BYTES

KEY_COPY_LIMIT = 1024
"""Bytes of the key kept; schedule ids and run ids are far shorter."""
VALUE_COPY_LIMIT = MAX_SCHEDULE_EVENT_BYTES
REASON_LIMIT = 2048
"""Characters of the reason kept: a validation message may quote the offending input."""


OWNERSHIP_REFUSED = "OwnershipRefusedError"
"""The `error_class` of a schedule change refused by the ownership rules (docs/teams.md)."""
QUOTA_EXCEEDED = "QuotaExceededError"
"""The `error_class` of a schedule change refused because it exceeds its team's quota."""
RERUN_OUT_OF_BOUNDS = "RerunOutOfBoundsError"
"""The `error_class` of a re-run request over the bounds every request keeps (too many runs, or
reaching past now: `kairos.core.reruns.judge_rerun`)."""
STALE_CHANGE = "StaleChangeError"
"""The `error_class` of a change marked for a version of its schedule (`kairos-if-version`, the
ticker's own `after_last_run`) that the schedule had left when the change was read."""
NOTIFICATION_FAILED = "NotificationFailedError"
"""A notice no route of its team took (`kairos notifier`): reported to that team, and never
itself notified."""
REFUSED_CHANGES = frozenset({OWNERSHIP_REFUSED, QUOTA_EXCEEDED, RERUN_OUT_OF_BOUNDS, STALE_CHANGE})
"""The error classes of schedule changes a ticker refused and restored the key after: every
reader of the schedules topic skips them as the ticker did."""


def dead_letter_record(
    *,
    source_topic: str,
    source_partition: int,
    source_offset: int,
    key: bytes | None,
    value: bytes | None,
    reason: str,
    error_class: str,
    dead_lettered_at: datetime,
    dead_lettered_by: str,
    reported_to: str | None = None,
) -> dict[str, Any]:
    """A `DeadLetter` record; it is keyed on its topic by its own (bounded) `key`.

    `reported_to` is the team a refused change is reported to (`kairos teams rejections`)."""
    kept_key = _prefix(key, KEY_COPY_LIMIT)
    kept_value = _prefix(value, VALUE_COPY_LIMIT)
    if len(reason) > REASON_LIMIT:
        reason = reason[: REASON_LIMIT - 3] + "..."
    return {
        "source_topic": source_topic,
        "source_partition": source_partition,
        "source_offset": source_offset,
        "key": kept_key,
        "value": kept_value,
        "reason": reason,
        "error_class": error_class,
        "dead_lettered_at": dead_lettered_at,
        "dead_lettered_by": dead_lettered_by,
        "truncated": kept_key != key or kept_value != value,
        "key_size": None if key is None else len(key),
        "value_size": None if value is None else len(value),
        "reported_to": reported_to,
    }


def _prefix(data: bytes | None, limit: int) -> bytes | None:
    return data if data is None or len(data) <= limit else data[:limit]
