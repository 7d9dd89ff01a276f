"""`kairos audit verify`: prove from the topics that every owed occurrence fired, once.

Exit status: 0 when nothing was lost or committed twice, 1 when something was, 2 when the audit
could not run (an unusable argument, an unreachable broker, a missing topic).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kairos.cli.options import (
    DEFAULT_BOOTSTRAP,
    BootstrapOption,
    JsonOption,
    TopicPrefixOption,
    fail,
    kafka_settings,
)
from kairos.cli.reading import (
    TIME_HELP,
    ScheduleFilterOption,
    history_reader,
    instant_option,
    text,
    wide_console,
)
from kairos.core.audit import (
    AuditReport,
    LatenessSummary,
    ScheduleAudit,
    expected_occurrences,
    fired_through,
    verify,
)
from kairos.core.durations import DurationError, parse_duration
from kairos.core.errors import KairosError
from kairos.streams.history import history_horizon

app = typer.Typer(
    help="Prove from the topics that no scheduled run was lost.", no_args_is_help=True
)

_COUNTS = ("expected", "fired", "skipped", "lost", "pending", "duplicates", "unexpected")
_SHOWN_LOST = 20


@app.command("verify")
def verify_command(
    from_: Annotated[
        str, typer.Option("--from", help=f"Window start (nominal instants, inclusive). {TIME_HELP}")
    ],
    to: Annotated[
        str, typer.Option("--to", help=f"Window end (nominal instants, exclusive). {TIME_HELP}")
    ],
    schedule: ScheduleFilterOption = None,
    grace: Annotated[
        str,
        typer.Option(
            "--grace",
            help="An occurrence due less than this before now counts as pending, not lost: its "
            "commit may be on its way.",
        ),
    ] = "10s",
    as_json: JsonOption = False,
    bootstrap_servers: BootstrapOption = DEFAULT_BOOTSTRAP,
    topic_prefix: TopicPrefixOption = "kairos.",
) -> None:
    """Compute every occurrence the schedule history owed in the window and match it against
    the runs and run-events topics. Exits 1 if any was lost or committed twice."""
    as_of = datetime.now(UTC)
    start = instant_option(from_, "--from", as_of)
    end = instant_option(to, "--to", as_of)
    assert start is not None and end is not None  # both options are required
    if end <= start:
        raise fail(f"--to {text(end)} is not after --from {text(start)}; swap them", code=2)
    try:
        settle = parse_duration(grace)
    except DurationError as error:
        raise fail(f"--grace: {error}", code=2) from None
    settings = kafka_settings(bootstrap_servers, topic_prefix)
    warnings: list[str] = []
    try:
        horizon = history_horizon(settings)
        if horizon.kept is not None and start < as_of - horizon.kept:
            warnings.append(
                f"the window starts before {text(as_of - horizon.kept)}, beyond what the topics "
                f"are sure to keep ({horizon.limited_by}): compaction or retention may have "
                "removed history there, so counts before it prove nothing"
            )
        with history_reader(settings) as reader:
            history = reader.schedule_events(schedule)
            # Fires after the window matter too: a late fire under an old version moves where
            # the next version starts owing (see core/audit.py).
            fired = reader.runs(
                keep=lambda r: r.nominal >= start and schedule in (None, r.schedule_id)
            )
            events = reader.run_events(
                keep=lambda e: start <= e.nominal < end and schedule in (None, e.schedule_id)
            )
            rejected = len(reader.rejected)
    except KairosError as error:
        raise fail(f"{error} (broker {bootstrap_servers})", code=2) from None
    if rejected:
        warnings.append(f"{rejected} record(s) were not valid events and were skipped")
    expected = expected_occurrences(history, start, end, fired_through(fired))
    report = verify(
        expected,
        fired,
        events,
        start=start,
        end=end,
        as_of=as_of,
        grace=settle,
        schedule_id=schedule,
    )
    if as_json:
        typer.echo(json.dumps(as_document(report, warnings), indent=2))
    else:
        _print(report, warnings, wide_console())
    if not report.ok:
        raise typer.Exit(1)


def as_document(report: AuditReport, warnings: list[str]) -> dict[str, Any]:
    """The window's totals beside the per-schedule detail."""
    return {
        "from": text(report.start),
        "to": text(report.end),
        "as_of": text(report.as_of),
        "grace_ms": report.grace // timedelta(milliseconds=1),
        **{name: report.total(name) for name in _COUNTS},
        "lateness_ms": _lateness(report.lateness),
        "outcomes": report.outcomes,
        "ok": report.ok,
        "warnings": warnings,
        "schedules": [_schedule_document(audit) for audit in report.schedules],
    }


def _schedule_document(audit: ScheduleAudit) -> dict[str, Any]:
    return {
        "schedule_id": audit.schedule_id,
        **{name: getattr(audit, name) for name in _COUNTS},
        "lateness_ms": _lateness(audit.lateness),
        "outcomes": audit.outcomes,
        "lost_runs": [
            {
                "run_id": o.run_id,
                "nominal_at": text(o.nominal),
                "due_at": text(o.due_at),
                "schedule_offset": o.version,
            }
            for o in audit.lost_runs
        ],
        "duplicate_runs": audit.duplicate_runs,
        "unexpected_runs": list(audit.unexpected_runs),
        "skipped_runs": [{"run_id": r, "reason": why} for r, why in audit.skipped_runs],
    }


def _lateness(summary: LatenessSummary | None) -> dict[str, int] | None:
    if summary is None:
        return None
    return {
        "count": summary.count,
        "p50": summary.p50,
        "p90": summary.p90,
        "p99": summary.p99,
        "max": summary.max,
    }


def _print(report: AuditReport, warnings: list[str], console: Console) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    console.print(
        f"window {text(report.start)} .. {text(report.end)} (nominal instants), as of "
        f"{text(report.as_of)}",
    )
    totals = ", ".join(f"{name} {report.total(name)}" for name in _COUNTS)
    console.print(totals)
    lateness = report.lateness
    if lateness is not None:
        console.print(
            f"lateness ms: p50 {lateness.p50}, p90 {lateness.p90}, p99 {lateness.p99}, "
            f"max {lateness.max}",
        )
    if report.outcomes:
        outcomes = ", ".join(f"{kind} {n}" for kind, n in report.outcomes.items())
        console.print(f"outcomes: {outcomes}")
    noted = [
        a
        for a in report.schedules
        if a.lost or a.duplicates or a.unexpected or a.skipped or a.pending
    ]
    if noted:
        table = Table(show_edge=False, pad_edge=False)
        for header in ("SCHEDULE", *(name.upper() for name in _COUNTS), "P99 MS"):
            table.add_column(header, no_wrap=True)
        for audit in noted:
            p99 = audit.lateness.p99 if audit.lateness else None
            table.add_row(
                audit.schedule_id,
                *(str(getattr(audit, name)) for name in _COUNTS),
                "-" if p99 is None else str(p99),
                style="bold red" if audit.lost or audit.duplicates else None,
            )
        console.print(table)
    clean = len(report.schedules) - len(noted)
    if clean:
        console.print(f"{clean} schedule(s): every owed occurrence fired exactly once")
    lost = [o for audit in report.schedules for o in audit.lost_runs]
    for occurrence in lost[:_SHOWN_LOST]:
        console.print(
            f"[bold red]LOST[/] {occurrence.run_id} (due {text(occurrence.due_at)})",
        )
    if len(lost) > _SHOWN_LOST:
        console.print(f"... and {len(lost) - _SHOWN_LOST} more lost; --json lists them all")
    for audit in report.schedules:
        for run_id, extra in audit.duplicate_runs.items():
            console.print(f"[bold red]DUPLICATE[/] {run_id} committed {extra + 1} times")
    if report.ok:
        console.print("[green]OK[/]: nothing lost, nothing fired twice")
    else:
        console.print("[bold red]FAILED[/]: occurrences were lost or fired twice")
