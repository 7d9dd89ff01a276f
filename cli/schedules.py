"""`kairos schedules list|get|delete|pause|resume`: the compacted schedules topic, by hand.

`describe` (cli/describe.py) is registered here too; the re-running verbs live in cli/reruns.py.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Annotated, Any

import typer

from kairos.cli.describe import describe
from kairos.cli.label_selector import LabelSelectorError, parse_selector
from kairos.cli.options import fail, kafka_settings
from kairos.cli.output import Format, JsonAliasOption, OutputOption, chosen, print_table, render
from kairos.cli.reading import reader_for, warn_rejected
from kairos.core.errors import KairosError
from kairos.core.schedule import Schedule
from kairos.streams.client.schedule_publisher import SchedulesClient
from kairos.streams.readers.held_schedules import StoredSchedule

ChangedByOption = Annotated[
    str | None,
    typer.Option(
        "--changed-by",
        envvar="KAIROS_CHANGED_BY",
        help="Who makes the change, for the audit trail; default $USER@hostname.",
    ),
]
ReasonOption = Annotated[str | None, typer.Option("--reason", help="Why, for the audit trail.")]
ScheduleIdArgument = Annotated[str, typer.Argument(help="The schedule's id.")]

app = typer.Typer(
    help="List, show, describe, delete, pause and resume the schedules on the schedules topic.",
    no_args_is_help=True,
)
app.command("describe")(describe)


def changed_by_or_default(changed_by: str | None) -> str:
    """`--changed-by`, else `$USER@hostname`: every change names a person or a service."""
    if changed_by and changed_by.strip():
        return changed_by.strip()
    return f"{os.environ.get('USER') or 'unknown'}@{socket.gethostname()}"


LabelsOption = Annotated[
    str | None,
    typer.Option(
        "--selector",
        "-l",
        help="Only the schedules whose labels match, as kubectl reads selectors: "
        "team=billing,tier!=batch,critical,!legacy.",
        show_default=False,
    ),
]
StateOption = Annotated[
    bool | None,
    typer.Option(
        "--paused/--active",
        help="Only the paused, or only the active, schedules.",
        show_default=False,
    ),
]


@app.command("list")
def list_(
    context: typer.Context,
    owner: Annotated[
        str | None, typer.Option("--owner", help="Only the schedules of this owner.")
    ] = None,
    selector: LabelsOption = None,
    paused: StateOption = None,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """List the current schedules, filtered by owner, labels and state (all must match)."""
    chosen_output = chosen(output, as_json)
    try:
        wanted = None if selector is None else parse_selector(selector)
    except LabelSelectorError as error:
        raise fail(str(error)) from None
    reader = reader_for(kafka_settings(context))
    try:
        snapshot = reader.read_all()
    except KairosError as error:
        raise fail(str(error)) from None
    warn_rejected(snapshot, reader)
    shown = sorted(
        (
            s
            for s in snapshot.schedules.values()
            if owner in (None, s.schedule.owner)
            and (wanted is None or wanted.matches(s.schedule.labels))
            and paused in (None, s.schedule.paused)
        ),
        key=lambda s: s.id,
    )
    render([as_document(s) for s in shown], chosen_output, lambda: _print_table(shown))


def _print_table(shown: list[StoredSchedule]) -> None:
    rows = [
        [
            s.id,
            trigger_text(s.schedule),
            s.schedule.timezone,
            "paused" if s.schedule.paused else "active",
            s.schedule.owner or "-",
            ",".join(f"{k}={v}" for k, v in sorted(s.schedule.labels.items())) or "-",
            s.changed_at.isoformat(timespec="seconds"),
            s.changed_by,
        ]
        for s in shown
    ]
    header = ["ID", "TRIGGER", "TIMEZONE", "STATE", "OWNER", "LABELS", "CHANGED AT", "CHANGED BY"]
    print_table(header, rows)


@app.command("get")
def get(
    context: typer.Context,
    schedule_id: ScheduleIdArgument,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """Show one schedule's full definition and its last change (YAML unless -o says otherwise)."""
    chosen_output = chosen(output, as_json, default=Format.YAML)
    reader = reader_for(kafka_settings(context))
    try:
        snapshot = reader.read_partition_of(schedule_id)
    except KairosError as error:
        raise fail(str(error)) from None
    stored = snapshot.schedules.get(schedule_id)
    awaiting = snapshot.awaiting.get(schedule_id, [])
    if awaiting:
        typer.echo(f"note: {awaiting_text(schedule_id, awaiting)}", err=True)
    if stored is None:
        raise fail(f"no schedule {schedule_id!r} held by its ticker on {reader.topic}")
    if stored.pending:
        typer.echo(
            f"note: the change shown (offset {stored.offset}) is not judged by a ticker yet",
            err=True,
        )
    document = {**as_document(stored), "awaiting_ticker": len(awaiting)}
    render(document, chosen_output, lambda: _print_table([stored]))


def awaiting_text(schedule_id: str, offsets: list[int]) -> str:
    """Says that changes of `schedule_id` wait for a signed ticker's verdict, and so are not
    shown."""
    return (
        f"{len(offsets)} change{'' if len(offsets) == 1 else 's'} of {schedule_id} "
        f"await{'s' if len(offsets) == 1 else ''} its ticker (offsets "
        f"{', '.join(map(str, offsets))}): not shown, since a signed ticker may refuse "
        "them; what it holds is shown"
    )


_Change = Callable[[SchedulesClient, str, str | None], None]


def _change_command(name: str, done: str) -> Callable[[_Change], Callable[..., None]]:
    """Register the decorated change as `kairos schedules NAME ID`, with its docstring as the
    command's help: the command publishes the change, then says the schedule is `done`."""

    def register(change: _Change) -> Callable[..., None]:
        def command(
            context: typer.Context,
            schedule_id: ScheduleIdArgument,
            reason: ReasonOption = None,
            changed_by: ChangedByOption = None,
        ) -> None:
            settings = kafka_settings(context)
            try:
                with SchedulesClient(settings, changed_by_or_default(changed_by)) as client:
                    change(client, schedule_id, reason)
            except KairosError as error:
                raise fail(str(error)) from None
            typer.echo(f"{done} {schedule_id}")

        command.__doc__ = change.__doc__
        return app.command(name)(command)

    return register


@_change_command("delete", "deleted")
def delete(client: SchedulesClient, schedule_id: str, reason: str | None) -> None:
    """Delete a schedule: a `deleted` event, then a tombstone."""
    client.delete(schedule_id, reason)


@_change_command("pause", "paused")
def pause(client: SchedulesClient, schedule_id: str, reason: str | None) -> None:
    """Pause a schedule: no run fires until it is resumed."""
    client.pause(schedule_id, reason)


@_change_command("resume", "resumed")
def resume(client: SchedulesClient, schedule_id: str, reason: str | None) -> None:
    """Resume a paused schedule; occurrences that fell inside the pause do not run."""
    client.resume(schedule_id, reason)


def trigger_text(schedule: Schedule) -> str:
    shown = schedule.model_dump(mode="json")
    if schedule.cron is not None:
        return f"cron {schedule.cron}"
    if schedule.every is not None:
        return f"every {shown['every']}"
    return f"at {shown['at']}"


def as_document(stored: StoredSchedule) -> dict[str, Any]:
    return {
        "schedule": stored.schedule.model_dump(mode="json"),
        "last_change": {
            "change": stored.change,
            "changed_by": stored.changed_by,
            "changed_at": stored.changed_at.isoformat(),
            "reason": stored.reason,
            "revision": stored.revision,
            "event_id": str(stored.event_id),
            "partition": stored.partition,
            "offset": stored.offset,
            "signed_by": stored.signed_by,
            "judged": not stored.pending,
        },
    }
