"""`kairos calendars apply|list|show|delete|seed`: shared business calendars (docs/calendars.md).

`apply -f FILE` validates the whole file before anything else, so one invalid calendar
publishes nothing; then it publishes only the calendars that differ from the topic and prints
each one's new version. With `--signing-key` every record is signed, and the calendars are
compared and checked as a deployment that enforces ownership counts them (docs/calendars.md,
"Ownership"). `seed` writes a calendars file from the `holidays` package and needs no broker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
import yaml

from kairos.cli.options import connection, fail, kafka_settings, refused
from kairos.cli.output import JsonAliasOption, OutputOption, chosen, print_table, render
from kairos.cli.schedule_files import ApplySourceError, SourceProblems, fail_invalid, read_source
from kairos.cli.schedules import ChangedByOption, ReasonOption, changed_by_or_default
from kairos.core.business_calendar import BusinessCalendar, CalendarsInvalidError, load_calendars
from kairos.core.calendar_seeds import SeedError, calendar_document, seed_calendar
from kairos.core.calendar_versions import CalendarBook, CalendarVersion
from kairos.core.errors import KairosError
from kairos.streams.client.calendar_publisher import (
    CalendarDelete,
    CalendarEdit,
    CalendarsClient,
    CalendarUpsert,
)
from kairos.streams.kafka.acls import Role
from kairos.streams.kafka.ownership import Ownership
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.calendar_reader import read_calendars
from kairos.streams.wire.calendar_events import calendar_definition_record
from kairos.streams.wire.signing import SigningKeyError, load_signer

app = typer.Typer(
    help="Publish, list, show, delete and seed the shared business calendars.",
    no_args_is_help=True,
)

CalendarIdArgument = Annotated[str, typer.Argument(help="The calendar's id.")]
Action = Literal["create", "update", "unchanged"]
_SHOWN_LIMIT = 160


@dataclass(frozen=True)
class PlannedCalendar:
    """What apply does to one calendar; `diff` names an update's changed fields."""

    action: Action
    calendar: BusinessCalendar
    current: CalendarVersion | None
    diff: tuple[str, ...] = ()


def plan_calendars(desired: list[BusinessCalendar], book: CalendarBook) -> list[PlannedCalendar]:
    """The changes that make the book hold `desired`, in file order."""
    plan = []
    for calendar in desired:
        current = book.get(calendar.id)
        if current is None:
            plan.append(PlannedCalendar("create", calendar, None))
            continue
        # Compared as the records on the wire: "unchanged" means publishing changes nothing.
        if calendar_definition_record(calendar) == calendar_definition_record(current.calendar):
            plan.append(PlannedCalendar("unchanged", calendar, current))
            continue
        before = current.calendar.model_dump(mode="json", exclude_none=True)
        after = calendar.model_dump(mode="json", exclude_none=True)
        diff = (
            _changed_field(name, before.get(name), after.get(name))
            for name in BusinessCalendar.model_fields
        )
        plan.append(PlannedCalendar("update", calendar, current, tuple(filter(None, diff))))
    return plan


def _changed_field(name: str, before: Any, after: Any) -> str:
    if before == after:
        return ""
    if not (isinstance(before, list) and isinstance(after, list)):
        return _clipped(f"{name}: {_text(before)} → {_text(after)}")
    old, new = [_text(item) for item in before], [_text(item) for item in after]
    added = [item for item in new if item not in old]
    removed = [item for item in old if item not in new]
    listed = [f"+{item}" for item in added] + [f"-{item}" for item in removed]
    return _clipped(f"{name}: {len(added)} added, {len(removed)} removed: {'; '.join(listed)}")


def _text(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def _clipped(line: str) -> str:
    return line if len(line) <= _SHOWN_LIMIT else line[: _SHOWN_LIMIT - 1] + "…"


_FileOption = Annotated[
    str,
    typer.Option(
        "-f", "--file", help="Calendars file {calendars: [...]}, YAML or JSON; '-' reads stdin."
    ),
]
_DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Show what would change; publish nothing.")
]
_RepublishOption = Annotated[
    bool,
    typer.Option(
        "--republish",
        help="Publish the unchanged calendars too: signs them again, with a new key before the "
        "old one is removed, or after one of them was refused (docs/calendars.md, Ownership).",
    ),
]


@app.command("apply")
def apply(
    context: typer.Context,
    file: _FileOption,
    dry_run: _DryRunOption = False,
    republish: _RepublishOption = False,
    changed_by: ChangedByOption = None,
    reason: ReasonOption = None,
) -> None:
    """Publish the calendars of a file that differ from the topic, and print their versions."""
    try:
        desired = load_calendars(*read_source(file, "calendars"))
    except CalendarsInvalidError as invalid:
        problems = SourceProblems(file, tuple(str(problem) for problem in invalid.errors))
        raise fail_invalid([problems], "; nothing was published") from None
    except ApplySourceError as error:
        raise fail(str(error)) from None
    except KairosError as error:
        raise fail(f"{file}: {error}; nothing was published") from None
    settings = kafka_settings(context)
    # A signed apply compares with what a signed deployment counts, so that it publishes (signed)
    # what such a deployment would not count yet: how an open one prepares its switch.
    judged_as = None if settings.signing_key is None else Ownership.SIGNED
    plan = plan_calendars(desired, _book(settings, "nothing was published", judged_as))
    changes = [planned for planned in plan if republish or planned.action != "unchanged"]
    if dry_run or not changes:
        for planned in plan:
            _show_planned(planned, None)
        typer.echo(f"{'dry run: ' if dry_run else ''}{_summary(plan)}; nothing was published")
        return
    versions = _publish(
        settings,
        [CalendarUpsert(p.calendar) for p in changes],
        changed_by,
        reason,
        "some calendars may have been published: `kairos calendars apply --dry-run` shows what "
        "remains",
    )
    published = dict(zip((p.calendar.id for p in changes), versions, strict=True))
    for planned in plan:
        _show_planned(planned, published.get(planned.calendar.id))
    typer.echo(f"applied: {_summary(plan)}")
    if judged_as is not None:
        _raise_if_refused(settings, set(versions))


def _raise_if_refused(settings: KafkaSettings, versions: set[int]) -> None:
    """Read the topic back and fail, naming each, when a version just published does not count
    in a signed deployment (another team's calendar, another owner named)."""
    book = _book(settings, "the versions published were not checked", Ownership.SIGNED)
    refusals = [r for r in book.refused if r.version in versions]
    for refusal in refusals:
        typer.echo(
            f"refused    {refusal.calendar_id}  (version {refusal.version}): {refusal.reason}",
            err=True,
        )
    if refusals:
        raise fail(f"{len(refusals)} calendar change(s) published but refused: they change nothing")


def _show_planned(planned: PlannedCalendar, version: int | None) -> None:
    if version is not None:
        shown = f"version {version}"
    elif planned.current is not None:
        shown = f"version {planned.current.version}"
    else:
        shown = "new"
    typer.echo(f"{planned.action:<10} {planned.calendar.id}  ({shown})")
    for line in planned.diff:
        typer.echo(f"             {line}")


def _summary(plan: list[PlannedCalendar]) -> str:
    counts = dict.fromkeys(("create", "update", "unchanged"), 0)
    for planned in plan:
        counts[planned.action] += 1
    return ", ".join(f"{count} {action}" for action, count in counts.items())


@app.command("list")
def list_(
    context: typer.Context,
    owner: Annotated[
        str | None, typer.Option("--owner", help="Only the calendars of this owner.")
    ] = None,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """List the current calendars with their versions."""
    chosen_output = chosen(output, as_json)
    book = _book(kafka_settings(context))
    shown = sorted(
        (v for v in book.versions.values() if owner is None or v.calendar.owner == owner),
        key=lambda v: v.calendar.id,
    )
    render([_as_json(version) for version in shown], chosen_output, lambda: _print_list(shown))


def _print_list(shown: list[CalendarVersion]) -> None:
    header = ["ID", "OWNER", "TIMEZONE", "HOLIDAYS", "WINDOWS", "VERSION", "APPENDED AT", "BY"]
    rows = [
        [
            v.calendar.id,
            v.calendar.owner,
            v.calendar.timezone,
            _holiday_span(v.calendar),
            str(len(v.calendar.windows)),
            str(v.version),
            v.changed_at.isoformat(timespec="seconds"),
            _by(v),
        ]
        for v in shown
    ]
    print_table(header, rows)


def _by(version: CalendarVersion) -> str:
    """Who changed it: the publisher's free text, and the team whose signature was verified."""
    signed = f" (signed by team {version.signed_by})" if version.signed_by else ""
    return f"{version.changed_by}{signed}"


def _holiday_span(calendar: BusinessCalendar) -> str:
    if not calendar.holidays:
        return "0"
    first, last = calendar.holidays[0].date, calendar.holidays[-1].date
    return f"{len(calendar.holidays)} ({first.isoformat()}…{last.isoformat()})"


@app.command("show")
def show(
    context: typer.Context,
    calendar_id: CalendarIdArgument,
    output: OutputOption = None,
    as_json: JsonAliasOption = False,
) -> None:
    """Show one calendar's definition and its version."""
    chosen_output = chosen(output, as_json)
    found = _existing(kafka_settings(context), calendar_id)
    render(_as_json(found), chosen_output, lambda: _print_calendar(found))


def _print_calendar(found: CalendarVersion) -> None:
    document = {
        **_version_json(found),
        "calendar": calendar_document([found.calendar])["calendars"][0],
    }
    typer.echo(_yaml(document).rstrip())


@app.command("delete")
def delete(
    context: typer.Context,
    calendar_id: CalendarIdArgument,
    reason: ReasonOption = None,
    changed_by: ChangedByOption = None,
) -> None:
    """Delete a calendar: a `deleted` event for the audit trail, then a tombstone."""
    settings = kafka_settings(context)
    _existing(settings, calendar_id)
    [version] = _publish(settings, [CalendarDelete(calendar_id)], changed_by, reason)
    typer.echo(f"deleted {calendar_id}  (version {version})")


@app.command("seed")
def seed(
    context: typer.Context,
    calendar_id: Annotated[str, typer.Option("--id", help="The new calendar's id.")],
    years: Annotated[str, typer.Option("--years", help="First-last year, such as 2026-2030.")],
    owner: Annotated[
        str | None,
        typer.Option(
            "--owner",
            help="The team that owns it; default: the team of --signing-key (a signed "
            "deployment counts a team's calendars only when they name it).",
            show_default=False,
        ),
    ] = None,
    country: Annotated[
        str | None, typer.Option("--country", help="ISO 3166 country code, such as US.")
    ] = None,
    subdiv: Annotated[
        str | None, typer.Option("--subdiv", help="The country's subdivision, such as NY.")
    ] = None,
    market: Annotated[
        str | None, typer.Option("--market", help="A financial market, such as NYSE.")
    ] = None,
    timezone: Annotated[
        str, typer.Option("--timezone", help="IANA zone of the calendar's windows.")
    ] = "UTC",
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the file here, not to stdout.")
    ] = None,
) -> None:
    """Generate a calendars file from the holidays package (no broker needed)."""
    try:
        calendar = seed_calendar(
            calendar_id=calendar_id,
            owner=owner or _signing_team(context),
            years=_years(years),
            country=country,
            subdiv=subdiv,
            market=market,
            timezone=timezone,
        )
    except SeedError as error:
        raise fail(str(error)) from None
    text = _yaml(calendar_document([calendar]))
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as error:
        raise fail(f"cannot write {output}: {error}") from None
    typer.echo(f"wrote {output}: {len(calendar.holidays)} holidays", err=True)


def _signing_team(context: typer.Context) -> str:
    key = connection(context, one_shot=False).settings.signing_key
    if key is None:
        raise fail("--owner: name the team that owns the calendar, or pass --signing-key")
    try:
        return load_signer(key).team
    except SigningKeyError as error:
        raise fail(str(error)) from None


def _years(text: str) -> range:
    first, _, last = text.partition("-")
    try:
        start, end = int(first), int(last or first)
    except ValueError:
        raise fail(f"--years {text!r}: write a year or a range such as 2026-2030") from None
    if end < start:
        raise fail(f"--years {text!r}: the last year is before the first")
    return range(start, end + 1)


def _book(
    settings: KafkaSettings, consequence: str | None = None, judged_as: Ownership | None = None
) -> CalendarBook:
    try:
        book = read_calendars(settings, judged_as=judged_as)
    except KairosError as error:
        raise fail(_refusal(settings, error, consequence)) from None
    if book.skipped:
        first = book.skipped[0]
        typer.echo(
            f"warning: skipped {book.skipped_count} unreadable record(s) on the calendars topic; "
            f"first at offset {first.version}: {first.reason}",
            err=True,
        )
    if book.refused:
        latest = book.refused[-1]
        typer.echo(
            f"warning: {book.refused_count} calendar change(s) on the topic do not count (not "
            f"signed by a registered team that may make them); the latest, version "
            f"{latest.version} of {latest.calendar_id!r}: {latest.reason}",
            err=True,
        )
    return book


def _existing(settings: KafkaSettings, calendar_id: str) -> CalendarVersion:
    """The calendar the topic holds as `calendar_id`; a command naming another cannot run."""
    found = _book(settings).get(calendar_id)
    if found is None:
        raise fail(f"no calendar {calendar_id!r}; `kairos calendars list` shows the calendars")
    return found


def _publish(
    settings: KafkaSettings,
    edits: list[CalendarEdit],
    changed_by: str | None,
    reason: str | None,
    consequence: str | None = None,
) -> list[int]:
    """Publish `edits` and return their versions; a failure says what it means (`consequence`)."""
    try:
        with CalendarsClient(settings, changed_by_or_default(changed_by)) as client:
            return client.publish(edits, reason)
    except KairosError as error:
        raise fail(_refusal(settings, error, consequence)) from None


def _refusal(settings: KafkaSettings, error: KairosError, consequence: str | None = None) -> str:
    """The line a failed read or publish of the calendars topic fails with: the ACL the
    deployment lacks, when that is why, then what it means for the command (`consequence`)."""
    topic = settings.layout.name(TopicRole.CALENDARS)
    message = refused(settings, error, Role.CALENDAR_PUBLISHER, topic) or str(error)
    return f"{message}; {consequence}" if consequence else message


def _yaml(document: dict[str, Any]) -> str:
    """A calendars document as `show` prints it and `seed` writes it: in its own key order, each
    list or mapping of plain values (a holiday, the business days) on one line."""
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=None, allow_unicode=True)


def _version_json(version: CalendarVersion) -> dict[str, Any]:
    return {
        "version": version.version,
        "changed_at": version.changed_at.isoformat(),
        "changed_by": version.changed_by,
        "signed_by": version.signed_by,
        "reason": version.reason,
    }


def _as_json(version: CalendarVersion) -> dict[str, Any]:
    return {
        "calendar": version.calendar.model_dump(mode="json"),
        "version": _version_json(version),
    }
