"""`kairos preview`: the next fires of schedules, DST effects marked, or their herd histogram.

The schedules come from one source: a schedules file (`-f`), or the published schedules topic
(`--id`, repeatable, and/or `--owner`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

from kairos.cli.options import fail, kafka_settings
from kairos.cli.preview_calendars import preview_calendars
from kairos.cli.preview_sources import PreviewInputError, file_schedules, published_schedules
from kairos.cli.team_quotas import describe_quota, registered_team
from kairos.core import limits
from kairos.core.calendar import never_fires_reason
from kairos.core.calendar_rules import CalendarLookup
from kairos.core.durations import format_duration, parse_duration
from kairos.core.errors import KairosError
from kairos.core.preview_histogram import (
    LONGEST_HORIZON,
    count_fires,
    histogram_json,
    histogram_text,
)
from kairos.core.preview_listing import heading, occurrence_line, runs_json, upcoming
from kairos.core.quotas import Trigger, schedules_use
from kairos.core.schedule import Schedule
from kairos.core.time_arguments import TimeArgumentError, parse_time
from kairos.streams.kafka.acls import Role

DEFAULT_COUNT = 5
DEFAULT_HORIZON = "24h"
DEFAULT_TOP = 20

_FileOption = Annotated[
    str | None,
    typer.Option(
        "-f",
        "--file",
        metavar="FILE",
        help="Schedules file {schedules: [...]}, YAML or JSON (by extension, else by content); "
        "'-' reads stdin.",
    ),
]

_IdOption = Annotated[
    list[str] | None,
    typer.Option(
        "--id",
        metavar="ID",
        help="A published schedule's id (repeatable); read from the schedules topic.",
    ),
]

_OwnerOption = Annotated[
    str | None,
    typer.Option("--owner", metavar="TEAM", help="Every published schedule of this owner (team)."),
]

_FromOption = Annotated[
    str | None,
    typer.Option(
        "--from",
        metavar="INSTANT",
        help="ISO-8601 instant with an offset (2027-03-14T00:00:00Z), 'now', or relative "
        "(-1d), as `replay` and `audit` read them; default now. Fires strictly after it are "
        "shown.",
    ),
]

_CountOption = Annotated[
    int | None,
    typer.Option(
        "-n", "--count", min=1, help=f"Fires to show per schedule; default {DEFAULT_COUNT}."
    ),
]

_AsJsonOption = Annotated[
    bool,
    typer.Option(
        "--json",
        help='Print {"<schedule id>": ["<fire in its zone>", ...]} only; with --histogram, '
        "the full per-minute map.",
    ),
]

_HistogramOption = Annotated[
    bool,
    typer.Option(
        "--histogram",
        help="Count the fires per UTC minute over --horizon, due and with jitter, busiest first.",
    ),
]

_HorizonOption = Annotated[
    str | None,
    typer.Option(
        "--horizon",
        metavar="DURATION",
        help=f"With --histogram: fires due in (--from, --from + horizon]; default "
        f"{DEFAULT_HORIZON}, at most {format_duration(LONGEST_HORIZON)}.",
    ),
]

_CalendarsOption = Annotated[
    Path | None,
    typer.Option(
        "--calendars",
        metavar="FILE",
        help="Calendars file (as for `kairos calendars apply`) to read the schedules' exclude "
        "and blackout with; default: the published calendars, read when a schedule names some.",
    ),
]

_TopOption = Annotated[
    int | None,
    typer.Option(
        "--top", min=1, help=f"With --histogram: the busiest minutes shown; default {DEFAULT_TOP}."
    ),
]


def preview(
    context: typer.Context,
    file: _FileOption = None,
    ids: _IdOption = None,
    owner: _OwnerOption = None,
    from_: _FromOption = None,
    count: _CountOption = None,
    as_json: _AsJsonOption = False,
    histogram: _HistogramOption = False,
    horizon: _HorizonOption = None,
    top: _TopOption = None,
    calendars_file: _CalendarsOption = None,
) -> None:
    """Show each schedule's next fires in its own zone, marking fires moved or doubled by DST;
    or, with --histogram, how many fire in each minute: a herd, before it is applied."""
    ids = ids or []
    _check_options(file, ids, owner, histogram, as_json, count, horizon, top)
    try:
        now = datetime.now(UTC)
        after = _parse_from(from_, now) if from_ is not None else now
        span = _parse_horizon(horizon or DEFAULT_HORIZON) if histogram else None
        schedules = (
            file_schedules(file) if file is not None else published_schedules(context, ids, owner)
        )
        calendars = preview_calendars(context, calendars_file, schedules)
    except KairosError as error:
        raise fail(str(error)) from None
    for schedule in schedules:
        if schedule.zone_warning is not None:
            typer.echo(f"warning: schedule '{schedule.id}': {schedule.zone_warning}", err=True)
    if span is not None:
        _show_histogram(schedules, after, span, as_json, top or DEFAULT_TOP, calendars)
        if owner is not None and not ids and not as_json:
            _show_quota(context, owner, schedules)
    else:
        _show_listing(schedules, after, count or DEFAULT_COUNT, as_json, calendars)


def _check_options(
    file: str | None,
    ids: list[str],
    owner: str | None,
    histogram: bool,
    as_json: bool,
    count: int | None,
    horizon: str | None,
    top: int | None,
) -> None:
    """Usage errors (exit 2): one source, and each option only where it means something."""
    published = bool(ids) or owner is not None
    if file is None and not published:
        raise fail(
            "nothing to preview: give a schedules file (-f FILE) or published schedules "
            "(--id ID, repeatable, and/or --owner TEAM)",
        )
    if file is not None and published:
        raise fail(
            "give one source: -f reads a file, --id/--owner read the published schedules; "
            "drop one of them",
        )
    if histogram and count is not None:
        raise fail("-n/--count is the listing's; --histogram counts every fire in --horizon")
    if not histogram and (horizon is not None or top is not None):
        raise fail("--horizon and --top apply to --histogram; add --histogram or drop them")
    if as_json and top is not None:
        raise fail("--top shortens the text histogram; --json prints every minute: drop one")


def _parse_from(text: str, now: datetime) -> datetime:
    try:
        # The parser `replay` and `audit` read their times with; relative ones count from the
        # whole second, as theirs do.
        instant = parse_time(text, now.replace(microsecond=0))
    except TimeArgumentError as error:
        raise PreviewInputError(f"--from: {error}") from None
    if not limits.EARLIEST_INSTANT <= instant < limits.LATEST_INSTANT:
        raise PreviewInputError(
            f"--from {text!r} is outside the instants schedules name, {limits.INSTANT_RANGE}"
        )
    return instant


def _parse_horizon(text: str) -> timedelta:
    try:
        span = parse_duration(text)
    except KairosError as error:
        raise PreviewInputError(f"--horizon: {error}") from None
    if span <= timedelta(0):
        raise PreviewInputError(f"--horizon {text!r} is empty; give a positive duration, e.g. 24h")
    if span > LONGEST_HORIZON:
        raise PreviewInputError(
            f"--horizon {text!r} is longer than the maximum, {format_duration(LONGEST_HORIZON)}; "
            "shorten it, or run one histogram per month"
        )
    return span


def _show_histogram(
    schedules: list[Schedule],
    after: datetime,
    span: timedelta,
    as_json: bool,
    top: int,
    calendars: CalendarLookup | None,
) -> None:
    try:
        counted = count_fires(schedules, after, after + span, calendars=calendars)
    except KairosError as error:
        raise fail(str(error)) from None
    if as_json:
        typer.echo(json.dumps(histogram_json(counted)))
        return
    for line in histogram_text(counted, top):
        typer.echo(line)


def _show_quota(context: typer.Context, owner: str, schedules: list[Schedule]) -> None:
    """Where the team stands against its quota, which bounds its worst minute (docs/teams.md)."""
    team = registered_team(kafka_settings(context), owner, Role.PRODUCER)
    if team is None or not team.quota.limited:
        why = "is not registered" if team is None else "is registered"
        typer.echo(f"team {owner} {why}: it has no quota")
        return
    use = schedules_use(Trigger.of(schedule) for schedule in schedules)
    typer.echo(
        f"quota of team {owner}: {describe_quota(team.quota)}; its {use.schedules} schedules "
        f"count {use.fires_per_minute} fires a minute against it (each at its most in any "
        f"minute; `kairos teams quota {owner}` shows each partition's share)"
    )


def _show_listing(
    schedules: list[Schedule],
    after: datetime,
    count: int,
    as_json: bool,
    calendars: CalendarLookup | None,
) -> None:
    listing = {schedule.id: upcoming(schedule, after, count, calendars) for schedule in schedules}
    for schedule in schedules:
        reason = never_fires_reason(schedule, after) if not listing[schedule.id] else None
        if reason is not None:
            typer.echo(
                f"warning: schedule '{schedule.id}' never fires after "
                f"{after.isoformat()}: {reason}",
                err=True,
            )
    if as_json:
        typer.echo(json.dumps({sid: runs_json(lines) for sid, lines in listing.items()}))
        return
    for schedule in schedules:
        typer.echo(heading(schedule))
        for line in listing[schedule.id]:
            typer.echo(occurrence_line(line, schedule))
