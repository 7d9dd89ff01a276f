"""`kairos schedules describe ID`: one schedule, everything a team asks about it at 2 a.m.

Its definition, owner and labels; the partition it lives on and the ticker firing that partition
now; its next fires with DST and calendar notes; its last runs with outcome, attempts and
lateness; and its last changes. Each part reuses the reader of the command that shows it alone
(`partitions`, `preview`, `runs list`, `replay`), so describe never disagrees with them.
"""

from __future__ import annotations

import difflib
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer

from kairos.cli.describe_upstream import upstream_documents, upstream_lines
from kairos.cli.options import fail, kafka_settings
from kairos.cli.output import JsonAliasOption, OutputOption, as_yaml, chosen, render, table_lines
from kairos.cli.partitions import GroupOption
from kairos.cli.preview_calendars import preview_calendars
from kairos.cli.reading import TIME_HELP, history_reader, instant_option, text
from kairos.cli.recent_runs import recent_runs
from kairos.cli.runs import summary_cells
from kairos.cli.view_index import ViewOption, open_view, records_behind
from kairos.cli.view_index import last_runs as last_runs_in_view
from kairos.core.audit import HistoryEvent, changed_by_text
from kairos.core.calendar import never_fires_reason
from kairos.core.calendar_rules import Planned
from kairos.core.errors import KairosError
from kairos.core.preview_listing import fire_document, heading, occurrence_line, upcoming
from kairos.core.schedule import Schedule
from kairos.services.console.queries import downstream_of
from kairos.streams.kafka.partition_status import PartitionStatusError, read_group_status
from kairos.streams.kafka.settings import TICKER_GROUP, KafkaSettings
from kairos.streams.readers.held_schedules import StoredSchedule
from kairos.streams.readers.history import HistoryReader
from kairos.streams.readers.schedule_reader import ScheduleReader
from kairos.streams.wire.history_records import RefusedChange

CountOption = Annotated[
    int, typer.Option("--count", "-n", min=1, help="How many next fires to show.")
]
RunsOption = Annotated[int, typer.Option("--runs", min=0, help="How many of the last runs.")]
FromOption = Annotated[
    str | None,
    typer.Option(
        "--from", help=f"List the next fires after this instant, not after now. {TIME_HELP}"
    ),
]
ChangesOption = Annotated[
    int, typer.Option("--changes", min=0, help="How many of the last changes.")
]


def describe(
    context: typer.Context,
    schedule_id: Annotated[str, typer.Argument(help="The schedule's id.")],
    count: CountOption = 5,
    fires_from: FromOption = None,
    runs: RunsOption = 5,
    changes: ChangesOption = 5,
    group_id: GroupOption = None,
    view: ViewOption = None,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """Show one schedule: definition, owner, labels, where it fires from, next fires, last runs
    and last changes."""
    chosen_output = chosen(output, as_json)
    now = datetime.now(UTC)
    after = instant_option(fires_from, "--from", now) or now
    settings = kafka_settings(context)
    stored, awaiting = _stored(settings, schedule_id)
    schedule = stored.schedule
    try:
        calendars = preview_calendars(context, None, [schedule])
        placement = _placement(settings, stored, group_id or settings.deployment_id(TICKER_GROUP))
        upcoming_fires = upcoming(schedule, after, count, calendars)
        with history_reader(settings) as reader:
            if view is None:
                period = _period(upcoming(schedule, now, 2, calendars))
                last_runs = recent_runs(reader, schedule, runs, period, now) if runs else []
                behind, downstream = None, None
            else:
                last_runs, behind, downstream = _from_view(view, settings, schedule_id, runs)
            upstream = upstream_documents(
                ScheduleReader(settings), reader, schedule, now, calendars
            )
            every_refusal = reader.refused_changes() if changes else []
            history = reader.schedule_events(schedule_id, every_refusal) if changes else []
            refusals = _refusals_of(every_refusal, schedule_id)
    except KairosError as error:
        raise fail(f"{error} (broker {settings.bootstrap_servers})") from None
    document = {
        "schedule": schedule.model_dump(mode="json"),
        "state": "paused" if schedule.paused else "active",
        "owner": schedule.owner,
        "labels": dict(schedule.labels),
        "placement": placement,
        "next_fires": [fire_document(p, schedule, calendars) for p in upcoming_fires],
        "never_fires": None if upcoming_fires else never_fires_reason(schedule, after),
        "waits_for": upstream,
        "waited_for_by": downstream,
        "last_runs": last_runs,
        "runs_from": "topics" if view is None else "view",
        "view_records_behind": None if view is None else behind,
        "awaiting_ticker": len(awaiting),
        # Without --changes both lists are empty, and [-0:] takes nothing more from them.
        "last_changes": [_change_document(e, awaiting) for e in history[-changes:]],
        "last_refused_changes": [_refusal_document(r) for r in refusals[-changes:]],
    }
    render(document, chosen_output, lambda: _print(document, schedule, upcoming_fires))


def _from_view(
    url: str, settings: KafkaSettings, schedule_id: str, count: int
) -> tuple[list[dict[str, Any]], int, list[str]]:
    """The last runs the console's view holds, how many records it has yet to read, and the
    schedules that wait for this one (only the view indexes them: the topics would be read
    whole)."""
    console_view = open_view(url)
    return (
        last_runs_in_view(console_view, schedule_id, count),
        records_behind(console_view, settings),
        downstream_of(console_view, schedule_id),
    )


def _period(fires: list[Planned]) -> timedelta:
    """How far apart the schedule's next two occurrences are: a day when it has fewer."""
    if len(fires) < 2:
        return timedelta(days=1)
    return max(fires[1].fire.nominal - fires[0].fire.nominal, timedelta(seconds=1))


def _stored(settings: KafkaSettings, schedule_id: str) -> tuple[StoredSchedule, list[int]]:
    """The schedule as its ticker holds it, and the offsets of its changes awaiting a signed
    ticker's verdict; a clear error, with close ids, when it is not there."""
    reader = ScheduleReader(settings)
    try:
        snapshot = reader.read_partition_of(schedule_id)
        awaiting = snapshot.awaiting.get(schedule_id, [])
        stored = snapshot.schedules.get(schedule_id)
        if stored is not None:
            return stored, awaiting
        # Only on a miss: every id, to suggest the one a typo meant, and the schedule's own
        # history, to say when it was deleted.
        known = list(reader.read_all().schedules)
        history_reader = HistoryReader(settings)
        every_refusal = history_reader.refused_changes()
        history = history_reader.schedule_events(schedule_id, every_refusal)
        refusals = _refusals_of(every_refusal, schedule_id)
    except KairosError as error:
        raise fail(str(error)) from None
    close = difflib.get_close_matches(schedule_id, known, n=3, cutoff=0.8)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
    refused = (
        f"; its last change was refused at {text(refusals[-1].dead_lettered_at)}: "
        f"{refusals[-1].reason}"
        if refusals
        else ""
    )
    raise fail(
        f"no schedule {schedule_id!r} on {reader.topic} ({_gone(history)}){hint}{refused}; "
        "`kairos schedules list` shows the published ones"
    )


def _refusals_of(every_refusal: list[RefusedChange], schedule_id: str) -> list[RefusedChange]:
    """The changes of the schedule the tickers refused (ownership, quota), oldest first."""
    return [r for r in every_refusal if r.key == schedule_id]


def _refusal_document(refusal: RefusedChange) -> dict[str, Any]:
    return {
        "refused_at": refusal.dead_lettered_at,
        "offset": refusal.source_offset,
        "reported_to": refusal.reported_to,
        "reason": refusal.reason,
    }


def _gone(history: list[HistoryEvent]) -> str:
    if not history:
        return "never published, or deleted and compacted away"
    # The `deleted` event names who and why; the tombstone after it does not.
    last = next((e for e in reversed(history) if e.change == "deleted"), history[-1])
    by = changed_by_text(last.changed_by, last.signed_by)
    why = f": {last.reason}" if last.reason else ""
    return f"deleted at {text(last.changed_at)}{by}{why}"


def _placement(settings: KafkaSettings, stored: StoredSchedule, group_id: str) -> dict[str, Any]:
    try:
        status = read_group_status(settings, group_id)
    except PartitionStatusError as error:
        raise KairosError(str(error)) from None
    partition = next(p for p in status.partitions if p.partition == stored.partition)
    return {
        "topic": status.topic,
        "partition": stored.partition,
        "definition_offset": stored.offset,
        "group_id": status.group_id,
        "group_state": status.state,
        "ticker": partition.owner,
        "ticker_host": partition.owner_host,
        # The owner's committed offset is past this definition once its state holds it.
        "applied": partition.committed_offset is not None
        and partition.committed_offset > stored.offset,
    }


def _change_document(event: HistoryEvent, awaiting: list[int]) -> dict[str, Any]:
    return {
        "awaiting_ticker": event.offset in awaiting,
        "revision": event.revision,
        "change": event.change,
        "changed_by": event.changed_by,
        "signed_by": event.signed_by,
        "changed_at": event.changed_at,
        "reason": event.reason,
        "offset": event.offset,
    }


def _print(document: dict[str, Any], schedule: Schedule, fires: list[Planned]) -> None:
    place = document["placement"]
    labels = ", ".join(f"{k}={v}" for k, v in sorted(document["labels"].items()))
    ticker = place["ticker"] or "NO OWNER: no ticker fires this partition now"
    if place["ticker"] and not place["applied"]:
        ticker += " (has not applied this definition yet)"
    set_fields = schedule.model_dump(mode="json", exclude_defaults=True)
    lines = [
        heading(schedule),
        f"  state       {document['state']}",
        f"  owner       {document['owner'] or '-'}",
        f"  labels      {labels or '-'}",
        f"  partition   {place['partition']} of {place['topic']} "
        f"(definition at offset {place['definition_offset']})",
        f"  ticker      {ticker} [group {place['group_id']}, {place['group_state']}]",
        *(
            [f"  awaiting    {document['awaiting_ticker']} change(s) its ticker has not judged"]
            if document["awaiting_ticker"]
            else []
        ),
        "",
        # Only what differs from the defaults: `-o yaml` has every field.
        "Definition (fields set):",
        *(f"  {line}" for line in as_yaml(set_fields).splitlines()),
        "",
        f"Next {len(fires)} fire(s), on the schedule's clock:",
        *(occurrence_line(fire, schedule) for fire in fires),
    ]
    if document["never_fires"]:
        lines.append(f"  none: {document['never_fires']}")
    if schedule.paused and fires:
        lines.append("  (paused: these run only if it is resumed before them)")
    lines += upstream_lines(document["waits_for"], document["waited_for_by"])
    lines += ["", f"Last {len(document['last_runs'])} run(s){_source(document)}:"]
    lines += _runs_table(document)
    lines += ["", f"Last {len(document['last_changes'])} change(s):", *_changes_table(document)]
    lines += _refused_lines(document)
    for line in lines:
        typer.echo(line)


def _source(document: dict[str, Any]) -> str:
    behind = document["view_records_behind"]
    if behind is None:
        return ""
    return f" (from the console's view, {behind} record(s) behind the topics)"


def _refused_lines(document: dict[str, Any]) -> list[str]:
    refused = document["last_refused_changes"]
    if not refused:
        return []
    return [
        "",
        f"Last {len(refused)} refused change(s), not taken:",
        *(f"  {text(r['refused_at'])}  offset {r['offset']}: {r['reason']}" for r in refused),
    ]


def _runs_table(document: dict[str, Any]) -> list[str]:
    if not document["last_runs"]:
        return ["  none on the runs topic"]
    header = ["RUN ID", "FIRED AT", "LATENESS", "TICKER", "ATTEMPTS", "OUTCOME"]
    rows = [summary_cells(summary) for summary in document["last_runs"]]
    return [f"  {line}" for line in table_lines(header, rows)]


def _changes_table(document: dict[str, Any]) -> list[str]:
    if not document["last_changes"]:
        return ["  none on the schedules topic"]
    # BY is what the publisher wrote; SIGNED BY the team a signed ticker verified.
    header = ["REVISION", "CHANGED AT", "BY", "SIGNED BY", "CHANGE", "REASON"]
    rows = [
        [
            str(c["revision"]),
            text(c["changed_at"]) or "-",
            c["changed_by"] or "-",
            c["signed_by"] or "-",
            c["change"] + (" (awaiting its ticker)" if c["awaiting_ticker"] else ""),
            c["reason"] or "-",
        ]
        for c in document["last_changes"]
    ]
    return [f"  {line}" for line in table_lines(header, rows)]
