"""`kairos replay`: the history the topics hold, in time order.

Every schedule change (who, when, what changed, before → after), every run requested (nominal,
fired, lateness) with its outcome, and every occurrence a misfire policy skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console

from kairos.cli.options import (
    JsonOption,
    fail,
    kafka_settings,
)
from kairos.cli.reading import (
    ScheduleFilterOption,
    SinceOption,
    UntilOption,
    event_document,
    events_by_run,
    history_reader,
    instant_option,
    jsonable,
    text,
)
from kairos.core.audit import (
    FiredRun,
    HistoryEvent,
    RunEventRecord,
    changed_by_text,
    changed_fields,
)
from kairos.core.audit_margin import CLOCK_MARGIN
from kairos.core.errors import KairosError
from kairos.core.schedule import Schedule

# The fields a creation shows in the human listing; --json gives every field.
_CREATION_FIELDS = ("cron", "every", "at", "start_at", "end_at", "paused", "owner", "timezone")


def replay(
    context: typer.Context,
    schedule: ScheduleFilterOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    owner: Annotated[
        str | None,
        typer.Option("--owner", help="Only schedules this team owned in any of their versions."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Replay schedule changes, runs requested and their outcomes from the topics, oldest first.

    With --json, one JSON object per line, each with a "type": change, run or skip.
    """
    now = datetime.now(UTC)
    start = instant_option(since, "--since", now)
    end = instant_option(until, "--until", now)
    settings = kafka_settings(context)
    try:
        # Entries are placed by the ticker's and executors' clocks, which a broker stamp
        # trails by at most the clock margin: records appended before are none of the window's.
        appended = None if start is None else start - CLOCK_MARGIN
        with history_reader(settings) as reader:
            history = reader.schedule_events(schedule)
            fired = reader.runs(
                keep=lambda r: schedule in (None, r.schedule_id),
                since=appended,
                schedule_id=schedule,
            )
            events = reader.run_events(
                keep=lambda e: schedule in (None, e.schedule_id),
                since=appended,
                schedule_id=schedule,
            )
    except KairosError as error:
        raise fail(f"{error} (broker {settings.bootstrap_servers})") from None
    owned = _owned_by(owner, history, fired) if owner is not None else None
    entries = sorted(
        (
            entry
            for entry in _entries(history, fired, events)
            if (start is None or entry["at"] >= start)
            and (end is None or entry["at"] < end)
            and (owned is None or entry["schedule_id"] in owned)
        ),
        key=lambda entry: (entry["at"], entry["type"] != "change"),
    )
    console = Console(highlight=False, markup=False, soft_wrap=True)
    for entry in entries:
        if as_json:
            typer.echo(json.dumps(jsonable(entry)))
        else:
            console.print(_line(entry))
    if not entries and not as_json:
        typer.echo("nothing recorded matches", err=True)


def _owned_by(team: str, history: list[HistoryEvent], fired: list[FiredRun]) -> set[str]:
    owned = {e.schedule_id for e in history if e.definition and e.definition.owner == team}
    return owned | {r.schedule_id for r in fired if r.owner == team}


def _entries(
    history: list[HistoryEvent], fired: list[FiredRun], events: list[RunEventRecord]
) -> Iterator[dict[str, Any]]:
    """The window's story: the schedule changes, then the fires with their steps, then skips."""
    yield from _change_entries(history)
    story = events_by_run(events)
    seen: set[str] = set()
    for run in sorted(fired, key=lambda r: (r.partition, r.offset)):
        steps = story.get(run.run_id, [])
        yield {
            "type": "run",
            "at": run.fired_at,
            "schedule_id": run.schedule_id,
            "run_id": run.run_id,
            "nominal_at": run.nominal,
            "due_at": run.due_at,
            "fired_at": run.fired_at,
            "lateness_ms": run.lateness_ms,
            "attempt": run.attempt,
            "ticker_instance": run.ticker_instance,
            "schedule_offset": run.schedule_offset,
            # A second commit of a fire is a duplicate; an attempt above 1 is a retry request.
            "duplicate": run.attempt == 1 and run.run_id in seen,
            "outcome": steps[-1].kind if steps else None,
            "events": [event_document(step) for step in steps],
        }
        if run.attempt == 1:
            seen.add(run.run_id)
    for run_id, steps in story.items():
        skip = next((s for s in steps if s.kind == "skipped"), None)
        if skip is not None and run_id not in seen:
            yield {
                "type": "skip",
                "at": skip.fired_at,
                "schedule_id": skip.schedule_id,
                "run_id": run_id,
                "nominal_at": skip.nominal,
                "reason": skip.reason,
                "decided_by": skip.source,
            }


def _change_entries(history: list[HistoryEvent]) -> Iterator[dict[str, Any]]:
    previous: dict[str, Schedule | None] = {}
    for event in history:
        before = previous.get(event.schedule_id)
        previous[event.schedule_id] = event.definition
        if event.change == "tombstone" and before is None:
            continue  # compaction's marker after a delete event: nothing new happened
        yield {
            "type": "change",
            "at": event.changed_at,
            "schedule_id": event.schedule_id,
            "change": "created" if before is None and event.definition else event.change,
            "changed_by": event.changed_by,
            "signed_by": event.signed_by,
            "reason": event.reason,
            "revision": event.revision,
            "partition": event.partition,
            "offset": event.offset,
            "changes": {
                name: {"before": old, "after": new}
                for name, (old, new) in changed_fields(before, event.definition).items()
            },
        }


def _line(entry: dict[str, Any]) -> str:
    head = f"{text(entry['at'])}  {entry['schedule_id']}  "
    if entry["type"] == "change":
        changes = entry["changes"]
        if entry["change"] == "created":
            shown = [k for k in _CREATION_FIELDS if k in changes and changes[k]["after"]]
            what = ", ".join(f"{k} {json.dumps(changes[k]['after'])}" for k in shown)
        elif entry["change"] in ("deleted", "tombstone"):
            what = "the schedule is gone (--json lists its last definition)"
        else:
            what = (
                "; ".join(
                    f"{k}: {json.dumps(v['before'])} → {json.dumps(v['after'])}"
                    for k, v in changes.items()
                )
                or "no field changed"
            )
        by = (
            entry["change"] + changed_by_text(entry["changed_by"], entry["signed_by"])
            if entry["changed_by"]
            else "deleted by a tombstone without a delete event"
        )
        reason = f"  (reason: {entry['reason']})" if entry["reason"] else ""
        return f"{head}{by}, revision {entry['revision']}: {what}{reason}"
    if entry["type"] == "skip":
        return f"{head}skipped {entry['run_id']} by {entry['decided_by']}: {entry['reason']}"
    late = f"{entry['lateness_ms']} ms late"
    duplicate = "  DUPLICATE" if entry["duplicate"] else ""
    retry = f" (retry request, attempt {entry['attempt']})" if entry["attempt"] > 1 else ""
    outcome = entry["outcome"] or "no outcome yet"
    return (
        f"{head}run {entry['run_id']}{retry} fired by {entry['ticker_instance']}, {late}"
        f" → {outcome}{duplicate}"
    )
