"""`kairos audit verify`: prove from the topics that every owed occurrence fired, once, on time.

Exit status (`kairos.cli.exit_codes`): 0 when the promise holds for the window, 1 when the
topics show a breach (a run lost, committed twice, fired though nothing owed it, fired early,
fired without the wait its definition names, started or released before an upstream period it
waits for succeeded, left waiting past its wait, or with `--outcomes` refused or never finished
by an executor), 2 when the audit could not run (an unusable argument, an unreachable broker, a
missing topic) and when it is inconclusive: no breach seen, but records an open transaction
holds could still make one (docs/audit.md).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kairos.cli.audit_metrics import write_audit_metrics
from kairos.cli.audit_read import AuditWindow, read_audit_window
from kairos.cli.exit_codes import ExitCode
from kairos.cli.options import (
    JsonOption,
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
    OpenTransaction,
    expected_occurrences,
    fired_through,
    stopped_spans,
)
from kairos.core.audit_report import (
    DEFAULT_EARLY_TOLERANCE,
    AuditReport,
    Finding,
    FindingKind,
    LatenessSummary,
    ScheduleAudit,
    Verdict,
)
from kairos.core.audit_verdict import verify
from kairos.core.calendar_owed import calendar_eras
from kairos.core.calendar_rules import as_of_history
from kairos.core.durations import DurationError, parse_duration
from kairos.core.errors import KairosError
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.readers.calendar_reader import read_calendar_history
from kairos.streams.readers.horizon import history_horizon

app = typer.Typer(
    help="Prove from the topics that no scheduled run was lost.", no_args_is_help=True
)

EXIT_CODES = {
    Verdict.HOLDS: ExitCode.DONE,
    Verdict.BREACH: ExitCode.FINDING,
    Verdict.INCONCLUSIVE: ExitCode.COULD_NOT_RUN,
}
_COUNTS = (
    "expected",
    "fired",
    "reruns",
    "recovered",
    "skipped",
    "lost",
    "pending",
    "duplicates",
    "unexpected",
    "hidden",
)
_SHOWN_FINDINGS = 20
_MS = timedelta(milliseconds=1)


FromOption = Annotated[
    str, typer.Option("--from", help=f"Window start (nominal instants, inclusive). {TIME_HELP}")
]
ToOption = Annotated[
    str, typer.Option("--to", help=f"Window end (nominal instants, exclusive). {TIME_HELP}")
]
GraceOption = Annotated[
    str,
    typer.Option(
        "--grace",
        help="An occurrence due less than this before now counts as pending, not lost: its "
        "commit may be on its way.",
    ),
]
EarlyToleranceOption = Annotated[
    str,
    typer.Option(
        "--early-tolerance",
        help="A fire recorded more than this before its due instant is a breach (early).",
    ),
]
OutcomesOption = Annotated[
    bool,
    typer.Option(
        "--outcomes",
        help="Also fail on fired runs an executor refused at admission (dead-lettered) or did "
        "not finish reporting within --outcome-grace.",
    ),
]
OutcomeGraceOption = Annotated[
    str,
    typer.Option(
        "--outcome-grace",
        help="With --outcomes: how long after its fire a run may go without a terminal run "
        "event (succeeded, dead_lettered, skipped); above the longest job's attempts.",
    ),
]

WholeHistoryOption = Annotated[
    bool,
    typer.Option(
        "--whole-history",
        help="Read the runs, run-events and dead-letter topics from their beginning instead of "
        'from a margin before --from (docs/audit.md, "What a window reads"): slower, and '
        "it also sees a fire appended days before its nominal instant.",
    ),
]
ReadMarginOption = Annotated[
    str | None,
    typer.Option(
        "--read-margin",
        help="Read the runs, run-events and dead-letter topics from this long before --from "
        "(default: 5m, plus 15d when a schedule rolls to the previous business day). Widen it "
        "when tickers run with --max-clock-ahead-ms above 5 minutes.",
    ),
]
MetricsFileOption = Annotated[
    Path | None,
    typer.Option(
        "--metrics-file",
        help="Also write the verdict and findings as Prometheus text to this file (replaced "
        "whole), for node_exporter's textfile collector: the KairosAuditBreach and "
        "KairosAuditStale alerts read it.",
    ),
]


@app.command("verify")
def verify_command(
    context: typer.Context,
    from_: FromOption,
    to: ToOption,
    schedule: ScheduleFilterOption = None,
    grace: GraceOption = "10s",
    early_tolerance: EarlyToleranceOption = f"{DEFAULT_EARLY_TOLERANCE // _MS}ms",
    outcomes: OutcomesOption = False,
    outcome_grace: OutcomeGraceOption = "1h",
    metrics_file: MetricsFileOption = None,
    whole_history: WholeHistoryOption = False,
    read_margin: ReadMarginOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compute every occurrence the schedule history owed in the window and match it against
    the runs and run-events topics. Exits 1 on a breach, 2 when inconclusive (see --help)."""
    as_of = datetime.now(UTC)
    start = instant_option(from_, "--from", as_of)
    end = instant_option(to, "--to", as_of)
    assert start is not None and end is not None  # both options are required
    if end <= start:
        raise fail(f"--to {text(end)} is not after --from {text(start)}; swap them")
    settle = _duration(grace, "--grace")
    tolerance = _duration(early_tolerance, "--early-tolerance")
    check_grace = _duration(outcome_grace, "--outcome-grace") if outcomes else None
    margin = None if read_margin is None else _duration(read_margin, "--read-margin")
    settings = kafka_settings(context)
    try:
        report, warnings = audit_window(
            settings,
            start,
            end,
            as_of=as_of,
            schedule=schedule,
            grace=settle,
            early_tolerance=tolerance,
            outcome_grace=check_grace,
            whole_history=whole_history,
            margin=margin,
        )
    except KairosError as error:
        raise fail(f"{error} (broker {settings.bootstrap_servers})") from None
    if as_json:
        typer.echo(json.dumps(as_document(report, warnings), indent=2))
    else:
        _print(report, warnings, wide_console())
    if metrics_file is not None:
        try:
            write_audit_metrics(metrics_file, report)
        except OSError as error:
            raise fail(f"--metrics-file {metrics_file}: {error.strerror}") from None
    if report.verdict is not Verdict.HOLDS:
        raise typer.Exit(EXIT_CODES[report.verdict])


def audit_window(
    settings: KafkaSettings,
    start: datetime,
    end: datetime,
    *,
    as_of: datetime,
    schedule: str | None = None,
    grace: timedelta = timedelta(seconds=10),
    early_tolerance: timedelta = DEFAULT_EARLY_TOLERANCE,
    outcome_grace: timedelta | None = None,
    whole_history: bool = False,
    margin: timedelta | None = None,
) -> tuple[AuditReport, list[str]]:
    """The audit of the window read from the topics, and what limits what it proves; raises
    `KairosError` when the topics cannot be read. The console runs this same audit.

    The runs, run-events and dead-letter topics are read from a margin before `start`
    (`margin`, else `kairos.core.audit_margin.read_margin`), the run events from as much
    before the earliest upstream period a waiting run of the window waits for, when earlier;
    or from their beginning with `whole_history`."""
    warnings = _horizon_warnings(settings, start, as_of)
    window = AuditWindow(
        start, end, schedule, early_tolerance, outcome_grace, whole_history, margin
    )
    changes = read_calendar_history(settings)
    calendars = as_of_history(changes)
    with history_reader(settings) as reader:
        read = read_audit_window(reader, window, calendars)
    if read.rejected:
        warnings.append(f"{read.rejected} record(s) were not valid events and were skipped")
    report = verify(
        expected_occurrences(
            read.history,
            start,
            end,
            fired_through(read.fired),
            calendars=calendars,
            eras=calendar_eras(changes),
            reruns=read.reruns,
        ),
        read.fired,
        read.events,
        start=start,
        end=end,
        as_of=as_of,
        grace=grace,
        schedule_id=schedule,
        stops=stopped_spans(read.history),
        unsettled=read.unsettled,
        outcomes=read.outcomes,
        early_tolerance=early_tolerance,
        periods=read.periods,
    )
    return report, warnings


def _duration(value: str, option: str) -> timedelta:
    try:
        return parse_duration(value)
    except DurationError as error:
        raise fail(f"{option}: {error}") from None


def _horizon_warnings(settings: KafkaSettings, start: datetime, as_of: datetime) -> list[str]:
    horizon = history_horizon(settings)
    if horizon.kept is None or start >= as_of - horizon.kept:
        return []
    return [
        f"the window starts before {text(as_of - horizon.kept)}, beyond what the topics "
        f"are sure to keep ({horizon.limited_by}): compaction or retention may have "
        "removed history there, so counts before it prove nothing"
    ]


def as_document(report: AuditReport, warnings: list[str]) -> dict[str, Any]:
    """The window's totals and verdict beside the findings and the per-schedule detail."""
    return {
        "from": text(report.start),
        "to": text(report.end),
        "as_of": text(report.as_of),
        "grace_ms": report.grace // _MS,
        "early_tolerance_ms": report.early_tolerance // _MS,
        "outcome_grace_ms": (None if report.outcome_grace is None else report.outcome_grace // _MS),
        **{name: report.total(name) for name in _COUNTS},
        "lateness_ms": _lateness(report.lateness),
        "outcomes": report.outcomes,
        "verdict": report.verdict.value,
        "ok": report.ok,
        "warnings": warnings,
        "findings": [_finding_document(finding) for finding in report.findings],
        "open_transactions": [_transaction_document(t) for t in report.open_transactions],
        "schedules": [_schedule_document(audit) for audit in report.schedules],
    }


def _finding_document(finding: Finding) -> dict[str, Any]:
    return {
        "kind": finding.kind.value,
        "schedule_id": finding.schedule_id,
        "run_id": finding.run_id,
        "nominal_at": text(finding.nominal),
        "due_at": text(finding.due_at),
        "fired_at": text(finding.fired_at),
        "detail": finding.detail,
    }


def _transaction_document(transaction: OpenTransaction) -> dict[str, Any]:
    return {
        "topic": transaction.topic,
        "partition": transaction.partition,
        "last_stable_offset": transaction.last_stable_offset,
        "high_watermark": transaction.high_watermark,
        "pending_offsets": transaction.pending,
        "since": text(transaction.since),
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
        "findings": [_finding_document(finding) for finding in audit.findings],
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
        "min": summary.min,
    }


def _print(report: AuditReport, warnings: list[str], console: Console) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    console.print(
        f"window {text(report.start)} .. {text(report.end)} (nominal instants), as of "
        f"{text(report.as_of)}",
    )
    console.print(", ".join(f"{name} {report.total(name)}" for name in _COUNTS))
    lateness = report.lateness
    if lateness is not None:
        console.print(
            f"lateness ms: p50 {lateness.p50}, p90 {lateness.p90}, p99 {lateness.p99}, "
            f"max {lateness.max}, min {lateness.min}",
        )
    if report.outcomes:
        outcomes = ", ".join(f"{kind} {n}" for kind, n in report.outcomes.items())
        console.print(f"outcomes: {outcomes}")
    _print_table(report, console)
    _print_findings(report, console)
    if report.verdict is Verdict.HOLDS:
        console.print("[green]OK[/]: nothing lost, nothing fired twice, nothing unowed or early")
    elif report.verdict is Verdict.BREACH:
        kinds = sorted({f.kind.value for f in report.findings if f.kind.breach})
        console.print(f"[bold red]FAILED[/]: the promise was broken ({', '.join(kinds)})")
    else:
        console.print(
            "[bold yellow]INCONCLUSIVE[/]: no breach seen, but an open transaction holds "
            "records that decide it; audit again once it ends (at most the producer's "
            "transaction timeout)"
        )


def _print_table(report: AuditReport, console: Console) -> None:
    noted = [a for a in report.schedules if a.findings or a.skipped or a.pending]
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
                style="bold red" if audit.breaches else None,
            )
        console.print(table)
    clean = len(report.schedules) - len(noted)
    if clean:
        console.print(f"{clean} schedule(s): every owed occurrence fired exactly once")


def _print_findings(report: AuditReport, console: Console) -> None:
    # A live ticker nearly always has a transaction open: one younger than the grace that hides
    # nothing is an ordinary commit on its way, counted rather than listed.
    hiding = any(f.kind is FindingKind.HIDDEN for f in report.findings)
    recent = report.as_of - report.grace
    shown = [t for t in report.open_transactions if hiding or t.since is None or t.since < recent]
    if len(shown) < len(report.open_transactions):
        in_flight = len(report.open_transactions) - len(shown)
        console.print(f"{in_flight} partition(s) had a transaction in flight, hiding nothing")
    for transaction in shown:
        since = text(transaction.since) or "an unknown instant"
        console.print(
            f"[bold yellow]OPEN TRANSACTION[/] {transaction.topic} partition "
            f"{transaction.partition}: last stable offset {transaction.last_stable_offset} is "
            f"below the high watermark {transaction.high_watermark} ({transaction.pending} "
            f"offset(s) pending), open since {since}; what it holds is neither fired nor lost "
            "until it is committed or aborted"
        )
    findings = report.findings
    for finding in findings[:_SHOWN_FINDINGS]:
        style = "bold red" if finding.kind.breach else "bold yellow"
        console.print(
            f"[{style}]{finding.kind.value.upper()}[/] {escape(finding.run_id)} (due "
            f"{text(finding.due_at)}): {escape(finding.detail)}"
        )
    if len(findings) > _SHOWN_FINDINGS:
        more = len(findings) - _SHOWN_FINDINGS
        console.print(f"... and {more} more finding(s); --json lists them all")
