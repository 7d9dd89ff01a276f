"""`kairos schedules trigger` and `backfill`: run a schedule's job again, with its guarantees.

Both publish a re-run request on the schedule's own partition; the ticker owning it fires the
runs, fenced like every fire, and the audit replays them (`kairos.core.reruns`). The request id
names the runs, so asking again with the same id fires nothing new; the default id is made of
the instants and the offset of the definition read, so it is new once the schedule changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from kairos.cli.options import fail, kafka_settings
from kairos.cli.output import Format, OutputOption, render
from kairos.cli.reading import TIME_HELP
from kairos.cli.schedules import (
    ChangedByOption,
    ReasonOption,
    ScheduleIdArgument,
    changed_by_or_default,
)
from kairos.core.errors import KairosError
from kairos.core.rerun_request import RerunKind, RerunRequest
from kairos.core.reruns import (
    MAX_BACKFILL_RUNS,
    RerunRangeError,
    planned_rerun_ids,
    rerun_request,
)
from kairos.core.run_id import check_request_id, format_instant
from kairos.core.schedule import OverlapPolicy, Schedule
from kairos.core.time_arguments import parse_time
from kairos.streams.client.schedule_publisher import SchedulesClient

RequestIdOption = Annotated[
    str | None,
    typer.Option(
        "--request-id",
        help="Names the request and its runs (letters, digits, . _ -); the same id again fires "
        "nothing new. Default: made from the instants and the schedule's current definition, "
        "so a retried command is a no-op until the schedule changes.",
        show_default=False,
    ),
]
OverlapOption = Annotated[
    OverlapPolicy | None,
    typer.Option(
        "--overlap",
        case_sensitive=False,
        help="Overlap policy of these runs instead of the schedule's (allow, skip, queue, "
        "replace).",
        show_default=False,
    ),
]


def trigger(
    context: typer.Context,
    schedule_id: ScheduleIdArgument,
    at: Annotated[
        str,
        typer.Option("--at", help=f"The run's instant, now or before. {TIME_HELP}"),
    ] = "now",
    request_id: RequestIdOption = None,
    overlap: OverlapOption = None,
    reason: ReasonOption = None,
    changed_by: ChangedByOption = None,
    output: OutputOption = None,
) -> None:
    """Run the schedule's job once now (or as of --at), fired by the ticker that owns it."""
    now = _now()
    instant = _time(at, now, "--at")
    if instant > now:
        raise fail(
            f"--at {format_instant(instant)} is in the future: a trigger runs now or re-runs a "
            "past instant; for a later one-off run, apply a schedule with `at:`",
        )
    instants = (instant, instant)
    ask = _Ask(
        schedule_id, RerunKind.TRIGGER, instants, request_id, overlap, reason, changed_by, now
    )
    _publish(context, ask, output, counted=None)


def backfill(
    context: typer.Context,
    schedule_id: ScheduleIdArgument,
    start: Annotated[str, typer.Option("--from", help=f"First instant, included. {TIME_HELP}")],
    end: Annotated[str, typer.Option("--to", help=f"Last instant, included. {TIME_HELP}")],
    request_id: RequestIdOption = None,
    overlap: OverlapOption = None,
    reason: ReasonOption = None,
    changed_by: ChangedByOption = None,
    output: OutputOption = None,
) -> None:
    """Run the job for every occurrence from --from through --to, at the catch-up rate.

    The runs are fired after on-time fires, never ahead of them; each gets a re-run id of its
    own."""
    now = _now()
    first, last = _time(start, now, "--from"), _time(end, now, "--to")
    if last < first:
        raise fail(f"--to {end} is before --from {start}; swap them")
    if last > now:
        raise fail(
            f"--to {format_instant(last)} is in the future: a backfill re-runs occurrences "
            "that are due already; future ones fire on schedule",
        )
    ask = _Ask(
        schedule_id, RerunKind.BACKFILL, (first, last), request_id, overlap, reason, changed_by, now
    )
    _publish(context, ask, output, counted=MAX_BACKFILL_RUNS)


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _time(text: str, now: datetime, option: str) -> datetime:
    try:
        return parse_time(text, now)
    except KairosError as error:
        raise fail(f"{option}: {error}") from None


def _checked(request_id: str | None) -> str | None:
    """The `--request-id` given, checked before anything is read."""
    try:
        return None if request_id is None else check_request_id(request_id)
    except KairosError as error:
        raise fail(f"--request-id: {error}") from None


@dataclass(frozen=True)
class _Ask:
    """What the command's options ask, as given: `_publish` checks them before it reads."""

    schedule_id: str
    kind: RerunKind
    instants: tuple[datetime, datetime]
    request_id: str | None
    overlap: OverlapPolicy | None
    reason: str | None
    changed_by: str | None
    asked_at: datetime


def _publish(
    context: typer.Context,
    ask: _Ask,
    output: Format | None,
    *,
    counted: int | None,
) -> None:
    """Read the schedule, then publish the request `ask` makes of the definition read (the
    default request id is made of that definition's offset)."""
    request_id = _checked(ask.request_id)
    requested = (changed_by_or_default(ask.changed_by), ask.asked_at)
    settings = kafka_settings(context)
    try:
        with SchedulesClient(settings, requested[0]) as client:
            stored = client.get(ask.schedule_id)
            request = rerun_request(
                ask.schedule_id,
                ask.kind,
                ask.instants,
                request_id=request_id,
                overlap=ask.overlap,
                reason=ask.reason,
                requested=requested,
                definition_offset=stored.offset,
            )
            runs = _runs(stored.schedule, request, counted)
            partition = client.request_rerun(request)
    except KairosError as error:
        raise fail(str(error)) from None
    document: dict[str, Any] = {
        "request_id": request.request_id,
        "schedule_id": request.schedule_id,
        "kind": request.kind.value,
        "from": format_instant(request.start),
        "to": format_instant(request.end),
        "partition": partition,
        "runs": runs,
    }

    def table() -> None:
        what = "trigger" if request.kind is RerunKind.TRIGGER else "backfill"
        typer.echo(
            f"requested {what} {request.request_id} of {request.schedule_id} (partition "
            f"{partition}): {len(runs)} run(s), fired by the ticker that owns the partition"
        )
        for run in runs[:3]:
            typer.echo(f"  {run}")
        if len(runs) > 3:
            typer.echo(f"  … {runs[-1]}")

    render(document, output or Format.TABLE, table)


def _runs(schedule: Schedule, request: RerunRequest, limit: int | None) -> list[str]:
    try:
        return planned_rerun_ids(schedule, request, limit)
    except RerunRangeError as error:
        raise fail(str(error)) from None
