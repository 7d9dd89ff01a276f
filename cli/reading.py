"""What `replay`, `audit` and `runs` share: time options, a progress bar, instants as text, and
run events by run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from kairos.cli.options import fail
from kairos.core.audit import RunEventRecord
from kairos.core.run_id import format_instant
from kairos.core.time_arguments import TimeArgumentError, parse_time
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.history import HistoryReader
from kairos.streams.readers.schedule_reader import ScheduleReader, ScheduleSnapshot
from kairos.streams.readers.topic_scan import ReadProgress

TIME_HELP = (
    "ISO-8601 instant with an offset (2027-03-14T07:00:00Z), 'now', or relative to now (-10m, +2h)."
)

SinceOption = Annotated[
    str | None, typer.Option("--since", help=f"Only what happened at or after it. {TIME_HELP}")
]
UntilOption = Annotated[
    str | None, typer.Option("--until", help=f"Only what happened before it. {TIME_HELP}")
]
ScheduleFilterOption = Annotated[
    str | None,
    typer.Option("--schedule", help="Only this schedule (reads just its schedules partition)."),
]

# Progress and warnings go to stderr, so stdout stays clean for --json.
stderr = Console(stderr=True)


def wide_console() -> Console:
    """Standard output; when it is not a terminal, wide enough that tables are not cut.

    Rich's highlighting of numbers and brackets is off: the colours that mean something (red for
    lost or unowned) are the only ones.
    """
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 200
    return console


def instant_option(text: str | None, name: str, now: datetime) -> datetime | None:
    """An instant option's value; a clear error naming the option when it is unusable."""
    if text is None:
        return None
    try:
        # Relative times count from the whole second, so a window printed once can be pasted
        # into the next command as it is.
        return parse_time(text, now.replace(microsecond=0))
    except TimeArgumentError as error:
        raise fail(f"{name}: {error}") from None


def text(instant: datetime | None) -> str | None:
    """An instant as every command prints it: UTC, `2027-03-14T07:00:00.250Z`."""
    return None if instant is None else format_instant(instant)


def jsonable(value: Any) -> Any:
    """`value` with every instant, however deeply nested, spelt as `text` spells it."""
    if isinstance(value, datetime):
        return text(value)
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [jsonable(item) for item in value]
    return value


def events_by_run(events: list[RunEventRecord]) -> dict[str, list[RunEventRecord]]:
    """Each run's events, in the order read, by run id."""
    by_run: dict[str, list[RunEventRecord]] = {}
    for event in events:
        by_run.setdefault(event.run_id, []).append(event)
    return by_run


def event_document(event: RunEventRecord) -> dict[str, Any]:
    """One run event as `replay --json` and `runs get` show it."""
    return {
        "kind": event.kind,
        "attempt": event.attempt,
        "by": event.source,
        "started_at": event.started_at,
        "finished_at": event.finished_at,
        "reason": event.reason,
        "next_attempt_at": event.next_attempt_at,
    }


@contextmanager
def history_reader(settings: KafkaSettings) -> Iterator[HistoryReader]:
    """A reader of the deployment's topics, with a progress bar on a terminal's stderr."""
    if not stderr.is_terminal:
        reader = HistoryReader(settings)
        yield reader
        _warn_rejected(reader)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=stderr, transient=True) as progress:
        tasks: dict[str, TaskID] = {}

        def show(step: ReadProgress) -> None:
            if step.topic not in tasks:
                tasks[step.topic] = progress.add_task(f"reading {step.topic}", total=step.total)
            progress.update(tasks[step.topic], completed=step.done, total=step.total)

        reader = HistoryReader(settings, on_progress=show)
        yield reader
    _warn_rejected(reader)


def _warn_rejected(reader: HistoryReader) -> None:
    if not reader.rejected:
        return
    first = reader.rejected[0]
    stderr.print(
        f"warning: skipped {len(reader.rejected)} record(s) that are not valid events, as the "
        f"ticker does; the first at {first.topic} partition {first.partition} offset "
        f"{first.offset}: {first.reason}",
        style="yellow",
        highlight=False,
    )


def reader_for(settings: KafkaSettings) -> ScheduleReader:
    return ScheduleReader(settings)


def warn_rejected(snapshot: ScheduleSnapshot, reader: ScheduleReader) -> None:
    """Say on stderr that records breaking the contract were skipped, as the ticker skips them."""
    if not snapshot.rejected:
        return
    first = snapshot.rejected[0]
    typer.echo(
        f"warning: skipped {len(snapshot.rejected)} unreadable record(s) on {reader.topic}, "
        "as the ticker does (the ticker copies them to the dead-letter topic); first at "
        f"partition {first.partition} offset {first.offset}: {first.reason}",
        err=True,
    )
