"""`kairos runs list|get`: the runs a schedule fired, and one run's whole story."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kairos.cli import runs_late
from kairos.cli.options import fail, kafka_settings
from kairos.cli.output import JsonAliasOption, OutputOption, chosen, render
from kairos.cli.reading import (
    ScheduleFilterOption,
    SinceOption,
    UntilOption,
    event_document,
    events_by_run,
    history_reader,
    instant_option,
    text,
    wide_console,
)
from kairos.core.audit import FiredRun, HistoryEvent, RunEventRecord, changed_by_text
from kairos.core.errors import KairosError
from kairos.core.run_id import RunIdError, parse_run_id
from kairos.streams.kafka.topics import TopicRole

app = typer.Typer(help="The runs fired, and what became of each.", no_args_is_help=True)
app.command("late")(runs_late.late)


@app.command("list")
def list_(
    context: typer.Context,
    schedule: ScheduleFilterOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="Show the latest N runs by nominal instant.")
    ] = 50,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """List runs by nominal instant (--since/--until bound it), with their status."""
    chosen_output = chosen(output, as_json)
    now = datetime.now(UTC)
    start = instant_option(since, "--since", now)
    end = instant_option(until, "--until", now)

    def wanted(schedule_id: str, nominal: datetime) -> bool:
        return (
            schedule in (None, schedule_id)
            and (start is None or nominal >= start)
            and (end is None or nominal < end)
        )

    settings = kafka_settings(context)
    try:
        with history_reader(settings) as reader:
            fired = reader.runs(
                keep=lambda r: wanted(r.schedule_id, r.nominal), schedule_id=schedule
            )
            events = reader.run_events(
                keep=lambda e: wanted(e.schedule_id, e.nominal), schedule_id=schedule
            )
    except KairosError as error:
        raise fail(f"{error} (broker {settings.bootstrap_servers})") from None
    summaries = run_summaries(fired, events)
    shown = summaries[-limit:]
    render(shown, chosen_output, lambda: _print_runs(shown))
    if len(summaries) > limit:
        typer.echo(f"{len(summaries) - limit} earlier run(s) not shown; raise --limit", err=True)


def _print_runs(shown: list[dict[str, Any]]) -> None:
    if not shown:
        typer.echo("no runs match", err=True)
        return
    table = Table(show_edge=False, pad_edge=False)
    for header in ("RUN ID", "FIRED AT", "LATENESS", "TICKER", "ATTEMPTS", "STATUS"):
        table.add_column(header, no_wrap=True)
    for summary in shown:
        table.add_row(*summary_cells(summary))
    wide_console().print(table)


def summary_cells(summary: dict[str, Any]) -> list[str]:
    """A run summary's row of the runs table, which `runs list` and `describe` both print."""
    commits = summary["commits"]
    return [
        summary["run_id"],
        text(summary["fired_at"]) or "-",
        "-" if summary["lateness_ms"] is None else f"{summary['lateness_ms']} ms",
        summary["ticker_instance"] or "-",
        str(summary["attempts"]),
        summary["status"] + (f" ({commits} commits!)" if commits > 1 else ""),
    ]


def run_summaries(fired: list[FiredRun], events: list[RunEventRecord]) -> list[dict[str, Any]]:
    """One summary of each run, by nominal instant, then run id."""
    fires: dict[str, list[FiredRun]] = {}
    for run in fired:
        if run.attempt == 1:
            fires.setdefault(run.run_id, []).append(run)
    story = events_by_run(events)
    summaries = []
    for run_id in fires.keys() | story.keys():
        commits = fires.get(run_id, [])
        steps = story.get(run_id, [])
        first = min(commits, key=lambda r: r.offset) if commits else None
        if first is None and not any(s.kind == "skipped" for s in steps):
            continue  # events of a run whose request the runs topic no longer holds
        summaries.append(
            {
                "run_id": run_id,
                "schedule_id": first.schedule_id if first else steps[0].schedule_id,
                "nominal_at": first.nominal if first else steps[0].nominal,
                "fired_at": first.fired_at if first else None,
                "lateness_ms": first.lateness_ms if first else None,
                "ticker_instance": first.ticker_instance if first else None,
                "commits": len(commits),
                "attempts": max((s.attempt for s in steps), default=0),
                "status": _status(commits, steps),
            }
        )
    return sorted(summaries, key=lambda s: (s["nominal_at"], s["run_id"]))


def _status(commits: list[FiredRun], steps: list[RunEventRecord]) -> str:
    """The latest event's kind; `requested` for a fire no executor has reported on."""
    if steps:
        return steps[-1].kind
    return "requested" if commits else "unknown"


@app.command("get")
def get(
    context: typer.Context,
    run_id: Annotated[str, typer.Argument(help="The run id, e.g. report@2027-03-14T07:00:00Z.")],
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """Show one run's whole story: the definition that owed it, its fire(s), every event."""
    chosen_output = chosen(output, as_json)
    try:
        schedule_id, nominal = parse_run_id(run_id)
    except RunIdError as error:
        raise fail(str(error)) from None
    settings = kafka_settings(context)
    try:
        with history_reader(settings) as reader:
            # Runs and run events are keyed by run id: one partition of each holds them all.
            fired = reader.runs(run_id=run_id)
            events = reader.run_events(run_id=run_id)
            history = reader.schedule_events(schedule_id) if fired or events else []
    except KairosError as error:
        raise fail(f"{error} (broker {settings.bootstrap_servers})") from None
    if not fired and not events:
        raise fail(
            f"no run {run_id} on {settings.layout.name(TopicRole.RUNS)} or "
            f"{settings.layout.name(TopicRole.RUN_EVENTS)}: it has not fired (yet), or its "
            f"records are past retention. `kairos audit verify --schedule {schedule_id} "
            f"--from {text(nominal)} --to <a later instant>` tells whether it was owed"
        )
    story = _story(run_id, schedule_id, nominal, fired, events, history)
    render(story, chosen_output, lambda: _print_story(story))


def _story(
    run_id: str,
    schedule_id: str,
    nominal: datetime,
    fired: list[FiredRun],
    events: list[RunEventRecord],
    history: list[HistoryEvent],
) -> dict[str, Any]:
    fires = [r for r in fired if r.attempt == 1]
    # The definition that owed it: the version a fire names, else the one in force at nominal.
    offsets = {r.schedule_offset for r in fires}
    version = next((e for e in history if e.offset in offsets), None)
    if version is None:
        version = next((e for e in reversed(history) if e.changed_at <= nominal), None)
    return {
        "run_id": run_id,
        "schedule_id": schedule_id,
        "nominal_at": nominal,
        "status": _status(fires, events),
        "duplicate_commits": max(0, len(fires) - 1),
        "requests": [
            {
                "attempt": r.attempt,
                "due_at": r.due_at,
                "fired_at": r.fired_at,
                "lateness_ms": r.lateness_ms,
                "ticker_instance": r.ticker_instance,
                "schedule_offset": r.schedule_offset,
                "partition": r.partition,
                "offset": r.offset,
            }
            for r in fired
        ],
        "events": [{**event_document(e), "offset": e.offset} for e in events],
        "version": None if version is None else _version_document(version),
    }


def _version_document(version: HistoryEvent) -> dict[str, Any]:
    return {
        "partition": version.partition,
        "offset": version.offset,
        "change": version.change,
        "changed_by": version.changed_by,
        "signed_by": version.signed_by,
        "changed_at": version.changed_at,
        "reason": version.reason,
        "definition": version.definition.model_dump(mode="json") if version.definition else None,
    }


def _print_story(story: dict[str, Any]) -> None:
    console = Console(highlight=False, markup=False, soft_wrap=True)
    console.print(f"{story['run_id']}: {story['status']}")
    console.print(f"  nominal    {text(story['nominal_at'])}")
    version = story["version"]
    if version is not None:
        console.print(
            f"  owed by    schedule version at offset {version['offset']} ({version['change']}"
            f"{changed_by_text(version['changed_by'], version['signed_by'])} at "
            f"{text(version['changed_at'])})"
        )
    for request in story["requests"]:
        kind = "fired" if request["attempt"] == 1 else f"retry request {request['attempt']}"
        console.print(
            f"  {kind:<10} {text(request['fired_at'])} by {request['ticker_instance']}, due "
            f"{text(request['due_at'])}, {request['lateness_ms']} ms late"
        )
    if story["duplicate_commits"]:
        console.print(f"  DUPLICATE: fired {story['duplicate_commits'] + 1} times")
    for event in story["events"]:
        when = event["finished_at"] or event["started_at"]
        reason = f": {event['reason']}" if event["reason"] else ""
        console.print(
            f"  {event['kind']:<10} attempt {event['attempt']} by {event['by']}"
            f"{' at ' + (text(when) or '') if when else ''}{reason}"
        )
