"""`kairos preview`: the next fires of each schedule in a schedules file, DST effects marked."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import typer

from kairos.core import limits
from kairos.core.calendar import Fire, never_fires_reason, next_fires
from kairos.core.cron import parse_cron
from kairos.core.errors import KairosError
from kairos.core.schedule import Schedule, SchedulesInvalidError, load_schedules


class _PreviewInputError(KairosError):
    """The preview's own input (the file or `--from`) is unusable."""


_FileOption = Annotated[
    Path,
    typer.Option(
        "-f", "--file", help="Schedules file, YAML or JSON (by extension): {schedules: [...]}."
    ),
]

_FromOption = Annotated[
    str | None,
    typer.Option(
        "--from",
        help="ISO-8601 instant with an offset, e.g. 2027-03-14T00:00:00Z; "
        "default now. Fires strictly after it are shown.",
    ),
]

_CountOption = Annotated[
    int, typer.Option("-n", "--count", min=1, help="Fires to show per schedule.")
]

_AsJsonOption = Annotated[
    bool,
    typer.Option("--json", help='Print {"<schedule id>": ["<fire in its zone>", ...]} only.'),
]


def preview(
    file: _FileOption,
    from_: _FromOption = None,
    count: _CountOption = 5,
    as_json: _AsJsonOption = False,
) -> None:
    """Show each schedule's next fires in its own zone, marking fires moved or doubled by DST."""
    try:
        after = _parse_from(from_) if from_ is not None else datetime.now(UTC)
        schedules = load_schedules(_read(file), _format_of(file))
    except SchedulesInvalidError as error:
        typer.echo(f"error: {file}: {len(error.errors)} invalid schedule field(s):", err=True)
        for problem in error.errors:
            typer.echo(f"  - {problem}", err=True)
        raise typer.Exit(1) from None
    except KairosError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from None

    for schedule in schedules:
        if schedule.zone_warning is not None:
            typer.echo(f"warning: schedule '{schedule.id}': {schedule.zone_warning}", err=True)
    listing: dict[str, list[Fire]] = {}
    for schedule in schedules:
        listing[schedule.id] = next_fires(schedule, after, count)
        reason = never_fires_reason(schedule, after) if not listing[schedule.id] else None
        if reason is not None:
            typer.echo(
                f"warning: schedule '{schedule.id}' never fires after "
                f"{after.isoformat()}: {reason}",
                err=True,
            )

    if as_json:
        typer.echo(
            json.dumps(
                {
                    schedule_id: [fire.wall.isoformat() for fire in fires]
                    for schedule_id, fires in listing.items()
                }
            )
        )
        return
    for schedule in schedules:
        typer.echo(_heading(schedule))
        for fire in listing[schedule.id]:
            typer.echo(f"  {fire.wall.isoformat()}{_mark(fire, schedule)}")


def _parse_from(text: str) -> datetime:
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise _PreviewInputError(
            f"--from {text!r} is not an ISO-8601 instant; write e.g. 2027-03-14T00:00:00Z"
        ) from None
    if instant.tzinfo is None:
        raise _PreviewInputError(
            f"--from {text!r} has no UTC offset; add one, e.g. {text}Z or {text}+01:00"
        )
    try:
        in_range = limits.EARLIEST_INSTANT <= instant < limits.LATEST_INSTANT
    except OverflowError:
        in_range = False
    if not in_range:
        raise _PreviewInputError(
            f"--from {text!r} is outside the instants schedules name, {limits.INSTANT_RANGE}"
        )
    return instant


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _PreviewInputError(f"cannot read schedules file {file}: {error}") from None


def _format_of(file: Path) -> Literal["yaml", "json"]:
    return "json" if file.suffix.lower() == ".json" else "yaml"


def _heading(schedule: Schedule) -> str:
    if schedule.cron is not None:
        trigger = f"cron '{schedule.cron}'"
    elif schedule.every is not None:
        trigger = f"every {schedule.model_dump(mode='json')['every']}"
    else:
        trigger = "once"
    paused = " [paused]" if schedule.paused else ""
    return f"{schedule.id}: {trigger} in {schedule.timezone}{paused}"


def _mark(fire: Fire, schedule: Schedule) -> str:
    if fire.moved_by_dst_gap:
        return (
            f"  [DST gap: {fire.requested_wall.strftime('%H:%M')} does not exist that day; "
            "moved to the jump]"
        )
    if fire.repeated_hour_pass is None:
        return ""
    if schedule.cron is None:
        runs = ""
    elif parse_cron(schedule.cron).wildcard or schedule.dst_repeat == "both":
        runs = ", doubled: runs in both passes"
    else:
        runs = ", runs once"
    return f"  [DST repeated hour, pass {fire.repeated_hour_pass} of 2{runs}]"
