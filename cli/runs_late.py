"""`kairos runs late`: the runs that missed their schedule's deadline (`kairos.core.late_runs`).

Read from the console's view with `--view`, else from the runs and run-events topics, from the
records the broker appended since `--since` less the audit's read margin
(`kairos.core.audit_margin`): a day's look back costs a day of the topics, not their history.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import typer
from rich.table import Table

from kairos.cli.options import fail, kafka_settings
from kairos.cli.output import Format, JsonAliasOption, OutputOption, chosen, render
from kairos.cli.reading import (
    ScheduleFilterOption,
    SinceOption,
    history_reader,
    instant_option,
    text,
    wide_console,
)
from kairos.cli.view_index import ViewOption, late_inputs, open_view
from kairos.core.audit_margin import read_margin
from kairos.core.errors import KairosError
from kairos.core.late_runs import ReportedMiss, RunProgress, late_runs, progress_from_topics
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.schedule_reader import ScheduleReader

_DEFAULT_SINCE = timedelta(days=1)


def late(
    context: typer.Context,
    schedule: ScheduleFilterOption = None,
    since: SinceOption = None,
    view: ViewOption = None,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """List runs (nominal at or after --since, default a day ago) that missed a deadline."""
    chosen_output = chosen(output, as_json)
    now = datetime.now(UTC)
    start = instant_option(since, "--since", now) or now - _DEFAULT_SINCE
    settings = kafka_settings(context)
    try:
        stored = ScheduleReader(settings).read_all().schedules
        deadlines = {sid: s.schedule.deadline for sid, s in stored.items() if s.schedule.deadline}
        owners = {sid: s.schedule.owner for sid, s in stored.items()}

        if view is None:
            margin = read_margin(s.schedule for s in stored.values())
            progress = _from_topics(settings, start, margin, schedule)
        else:
            progress = late_inputs(open_view(view), start, schedule)
    except KairosError as error:
        raise fail(f"{error} (broker {settings.bootstrap_servers})") from None
    rows = late_runs(*progress, deadlines, now)
    for row in rows:
        row["owner"] = owners.get(row["schedule_id"])
    if chosen_output is not Format.TABLE:
        render(rows, chosen_output, lambda: None)
        return
    if not rows:
        typer.echo("no late runs", err=True)
        return
    table = Table(show_edge=False, pad_edge=False)
    for header in ("RUN ID", "OWNER", "DEADLINE", "DUE BY", "REPORTED BY", "WHY"):
        table.add_column(header, no_wrap=header != "WHY")
    for row in rows:
        reporter = row["reported_by"] or "(no executor yet)"
        why = row["reason"] or ""
        cells = (row["run_id"], row["owner"] or "", row["deadline"], text(row["due_by"]))
        table.add_row(*cells, reporter, why)
    wide_console().print(table)


def _from_topics(
    settings: KafkaSettings, start: datetime, margin: timedelta, schedule: str | None
) -> tuple[list[RunProgress], list[ReportedMiss]]:
    def wanted(schedule_id: str, nominal: datetime) -> bool:
        return schedule in (None, schedule_id) and nominal >= start

    # Read by append time: what a run with a nominal instant after `start` can have written.
    appended = start - margin
    with history_reader(settings) as reader:
        fired = reader.runs(
            keep=lambda r: r.attempt == 1 and wanted(r.schedule_id, r.nominal),
            since=appended,
            schedule_id=schedule,
        )
        events = reader.run_events(
            keep=lambda e: wanted(e.schedule_id, e.nominal), since=appended, schedule_id=schedule
        )
    return progress_from_topics(fired, events)
