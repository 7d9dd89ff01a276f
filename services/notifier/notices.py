"""The notices a record of the run-events or dead-letters topic holds, each for one team.

A run event is told to the team its `owner` names: the team the ticker fired the run for, so a
forged change of the schedule moves nothing here. A dead letter is told to the team it is
`reported_to` (a change that team signed, refused). Everything else tells no one: an event
without an owner, a dead letter reported to nobody, and the notifier's own dead letters (a route
that failed is reported where the team reads its rejections, not notified again).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from kairos.core.notifications import Notice, Topic, lateness, run_event_topic
from kairos.streams.wire.dead_letters import NOTIFICATION_FAILED


def run_event_notice(event: Mapping[str, Any]) -> Notice | None:
    owner, topic = event.get("owner"), run_event_topic(event)
    if owner is None or topic is None:
        return None
    run_id, kind, attempt = event["run_id"], event["kind"], event["attempt"]
    reason = event.get("reason")
    # One run may miss two deadlines (start_by, finish_by) in one attempt: each its own notice.
    which = (
        hashlib.sha256((reason or "").encode()).hexdigest()[:8]
        if topic is Topic.DEADLINE_MISSED
        else ""
    )
    details: dict[str, Any] = {
        "kind": kind,
        "attempt": attempt,
        "executor": event["executor_instance"],
        "nominal_at": _text(event["nominal_at"]),
        "reason": reason,
    }
    if topic is Topic.LATE:
        details["late_s"] = lateness(event).total_seconds()
        summary = f"{event['schedule_id']} started {details['late_s']:.0f} s late ({run_id})"
    else:
        summary = f"{event['schedule_id']}: {kind.replace('_', ' ')} ({run_id})" + (
            f": {reason}" if reason else ""
        )
    return Notice(
        notice_id=f"run/{run_id}/{kind}/{attempt}" + (f"/{which}" if which else ""),
        team=owner,
        topic=topic,
        schedule_id=event["schedule_id"],
        run_id=run_id,
        at=event.get("finished_at") or event.get("started_at") or event["fired_at"],
        summary=summary[:500],
        details=details,
    )


def dead_letter_notice(letter: Mapping[str, Any]) -> Notice | None:
    team = letter.get("reported_to")
    if team is None or letter["error_class"] == NOTIFICATION_FAILED:
        return None
    source = f"{letter['source_topic']}/{letter['source_partition']}/{letter['source_offset']}"
    key = letter.get("key")
    subject = key.decode(errors="replace") if key else None
    return Notice(
        notice_id=f"refused/{source}",
        team=team,
        topic=Topic.REFUSED,
        schedule_id=subject,
        run_id=None,
        at=letter["dead_lettered_at"],
        summary=f"change of {subject} refused ({letter['error_class']}): {letter['reason']}"[:500],
        details={
            "error_class": letter["error_class"],
            "reason": letter["reason"],
            "source": source,
        },
    )


def _text(instant: Any) -> str:
    return str(instant.isoformat()).replace("+00:00", "Z")
