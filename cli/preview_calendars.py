"""The shared calendars `kairos preview` reads schedules with: a calendars file, or the topic.

A schedule that names calendars (`exclude`, `blackout`) is previewed with them, so a team sees
its holiday skips, rolls and deferrals before applying. `--calendars FILE` previews with a file
not published yet; otherwise the published calendars are read, and only when a schedule names
some, so previewing plain schedules from a file still needs no broker.
"""

from __future__ import annotations

from pathlib import Path

import typer

from kairos.cli.options import kafka_settings
from kairos.cli.preview_sources import PreviewInputError
from kairos.core.business_calendar import load_calendars
from kairos.core.calendar_rules import CalendarLookup, latest
from kairos.core.calendar_versions import CalendarVersion
from kairos.core.errors import KairosError
from kairos.core.limits import EARLIEST_INSTANT
from kairos.core.schedule import Schedule
from kairos.streams.readers.calendar_reader import read_calendars

FILE_VERSION = 0
"""The version a calendar read from a file is shown with: it has none until published."""


def preview_calendars(
    context: typer.Context, file: Path | None, schedules: list[Schedule]
) -> CalendarLookup | None:
    named = sorted(
        {name for schedule in schedules for name in (*schedule.exclude, *schedule.blackout)}
    )
    if file is not None:
        versions = _from_file(file)
    elif not named:
        return None
    else:
        try:
            versions = dict(read_calendars(kafka_settings(context)).versions)
        except KairosError as error:
            raise PreviewInputError(
                f"the schedules name calendars ({', '.join(named)}); give them with "
                f"--calendars FILE, or reach the broker they are published on: {error}"
            ) from None
    for name in named:
        if name not in versions:
            typer.echo(
                f"warning: calendar '{name}' is not {'in ' + str(file) if file else 'published'}: "
                "its schedules run as if it had no holidays and no windows",
                err=True,
            )
    return latest(versions)


def _from_file(file: Path) -> dict[str, CalendarVersion]:
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PreviewInputError(f"cannot read calendars file {file}: {error}") from None
    calendars = load_calendars(text, "json" if file.suffix.lower() == ".json" else "yaml")
    return {
        calendar.id: CalendarVersion(calendar, FILE_VERSION, EARLIEST_INSTANT, f"file {file}")
        for calendar in calendars
    }
