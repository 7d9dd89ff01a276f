"""`kairos apply -f schedules.yaml`: make the schedules topic match a file, kubectl-style.

The whole file is validated before anything else; one invalid schedule publishes nothing. Then
the file is compared with the current state of the topic and only the differences are
published: new schedules (create), changed definitions (update), and with `--prune --owner TEAM`
the deletion of TEAM's schedules the file no longer has. A schedule whose file entry does not
set `paused` keeps its current paused state, so an apply never undoes an operator's pause;
`paused: true` or `paused: false` in the file is applied like any other field.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import typer

from kairos.cli.options import (
    fail,
    kafka_settings,
    refused,
)
from kairos.cli.schedules import (
    ChangedByOption,
    ReasonOption,
    changed_by_or_default,
    reader_for,
    warn_rejected,
)
from kairos.core.errors import KairosError
from kairos.core.schedule import (
    Schedule,
    SchedulesInvalidError,
    ScheduleValidationError,
    load_schedules,
)
from kairos.streams.acls import Role
from kairos.streams.calendar_reader import read_calendars
from kairos.streams.records import definition_record
from kairos.streams.schedule_publisher import ChangeKind, ScheduleChange, SchedulesClient
from kairos.streams.schedule_reader import StoredSchedule
from kairos.streams.settings import KafkaSettings
from kairos.streams.topics import TopicRole

Action = Literal["create", "update", "delete", "unchanged"]

_SHOWN_VALUE_LIMIT = 60


@dataclass(frozen=True)
class PlannedChange:
    """What apply does to one schedule; `diff` lists an update's changed fields."""

    action: Action
    schedule_id: str
    schedule: Schedule | None
    """The definition to publish; None for a delete."""
    revision: int
    diff: tuple[str, ...] = ()


def plan_apply(
    desired: list[Schedule], current: dict[str, StoredSchedule], prune_owner: str | None
) -> list[PlannedChange]:
    """The changes that make `current` match `desired`, in file order, then the deletes."""
    plan: list[PlannedChange] = []
    for schedule in desired:
        stored = current.get(schedule.id)
        if stored is None:
            plan.append(PlannedChange("create", schedule.id, schedule, 0))
            continue
        target = schedule
        if "paused" not in schedule.model_fields_set:
            # The file does not say: an operator's pause (or resume) stands.
            target = schedule.model_copy(update={"paused": stored.schedule.paused})
        # Compared as the records that travel on the wire: "unchanged" means re-publishing it
        # would change nothing on the topic.
        if definition_record(target) == definition_record(stored.schedule):
            plan.append(PlannedChange("unchanged", schedule.id, target, stored.revision))
        else:
            diff = _diff(stored.schedule, target)
            plan.append(PlannedChange("update", schedule.id, target, stored.revision + 1, diff))
    if prune_owner is not None:
        in_file = {schedule.id for schedule in desired}
        for stored in sorted(current.values(), key=lambda s: s.id):
            if stored.schedule.owner == prune_owner and stored.id not in in_file:
                plan.append(PlannedChange("delete", stored.id, None, stored.revision + 1))
    return plan


_FileOption = Annotated[
    str,
    typer.Option(
        "-f",
        "--file",
        help="Schedules file {schedules: [...]}, YAML or JSON (by extension, else by "
        "content); '-' reads stdin.",
    ),
]

_PruneOption = Annotated[
    bool,
    typer.Option("--prune", help="Delete the --owner's schedules that the file lacks."),
]

_OwnerOption = Annotated[
    str | None,
    typer.Option("--owner", help="Team whose schedules the file holds; each must have it."),
]

_DryRunOption = Annotated[
    bool, typer.Option("--dry-run", help="Show what would change; publish nothing.")
]


def apply(
    context: typer.Context,
    file: _FileOption,
    prune: _PruneOption = False,
    owner: _OwnerOption = None,
    dry_run: _DryRunOption = False,
    changed_by: ChangedByOption = None,
    reason: ReasonOption = None,
) -> None:
    """Publish the schedules of a file that differ from the topic (unchanged ones are not)."""
    if prune and owner is None:
        raise fail("--prune deletes one owner's schedules: name it with --owner TEAM")
    try:
        desired = load_schedules(*_read(file))
        _check_owner(desired, owner)
    except SchedulesInvalidError as invalid:
        typer.echo(
            f"error: {file}: {len(invalid.errors)} problem(s); nothing was published:", err=True
        )
        for problem in invalid.errors:
            typer.echo(f"  - {problem}", err=True)
        raise typer.Exit(1) from None
    except KairosError as error:
        raise fail(f"{file}: {error}; nothing was published") from None
    for schedule in desired:
        if schedule.zone_warning is not None:
            typer.echo(f"warning: schedule '{schedule.id}': {schedule.zone_warning}", err=True)

    settings = kafka_settings(context)
    reader = reader_for(settings)
    schedules = settings.layout.name(TopicRole.SCHEDULES)
    try:
        snapshot = reader.read_all()
    except KairosError as error:
        reason = refused(settings, error, Role.PRODUCER, schedules) or str(error)
        raise fail(f"{reason}; nothing was published") from None
    warn_rejected(snapshot, reader)
    _check_calendars(settings, desired, file)
    plan = plan_apply(desired, snapshot.schedules, owner if prune else None)
    for planned in plan:
        typer.echo(f"{planned.action:<10} {planned.schedule_id}")
        for line in planned.diff:
            typer.echo(f"             {line}")

    changes = [_change_of(planned) for planned in plan if planned.action != "unchanged"]
    if dry_run:
        typer.echo(f"dry run: {_summary(plan)}; nothing was published")
        return
    if changes:
        try:
            with SchedulesClient(settings, changed_by_or_default(changed_by)) as client:
                client.publish(changes, reason)
        except KairosError as error:
            reason = refused(settings, error, Role.PRODUCER, schedules) or str(error)
            raise fail(
                f"{reason}; some changes may have been published: "
                "`kairos apply --dry-run` shows what remains"
            ) from None
    typer.echo(f"applied: {_summary(plan)}")


def _read(file: str) -> tuple[str, Literal["yaml", "json"]]:
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise fail(f"cannot read schedules file {file}: {error}") from None
    suffix = Path(file).suffix.lower()
    if suffix == ".json":
        return text, "json"
    if suffix in (".yaml", ".yml"):
        return text, "yaml"
    # JSON is (nearly) YAML, but JSON's parser gives the clearer errors for a JSON document.
    return text, "json" if text.lstrip().startswith("{") else "yaml"


def _check_owner(schedules: list[Schedule], owner: str | None) -> None:
    """With --owner, every schedule of the file must be that owner's, or a prune would miss it."""
    if owner is None:
        return
    problems = [
        ScheduleValidationError(
            schedule_id=schedule.id,
            index=index,
            field="owner",
            problem=f"is {schedule.owner!r}, but --owner is {owner!r}; set owner: {owner}",
        )
        for index, schedule in enumerate(schedules)
        if schedule.owner != owner
    ]
    if problems:
        raise SchedulesInvalidError(problems)


def _check_calendars(settings: KafkaSettings, desired: list[Schedule], file: str) -> None:
    """Refuse schedules naming a calendar nobody published: it would skip nothing."""
    named = {
        schedule.id: [*schedule.exclude, *schedule.blackout]
        for schedule in desired
        if schedule.exclude or schedule.blackout
    }
    if not named:
        return
    try:
        book = read_calendars(settings)
    except KairosError as error:
        raise fail(
            f"{file}: the schedules name shared calendars, which could not be read: {error}; "
            "nothing was published"
        ) from None
    problems = [
        f"  - schedule '{schedule_id}': calendar '{calendar_id}' is not published; publish it "
        "with `kairos calendars apply -f FILE` first, or fix the id "
        f"(published: {', '.join(sorted(book.versions)) or 'none'})"
        for schedule_id, calendar_ids in named.items()
        for calendar_id in calendar_ids
        if calendar_id not in book
    ]
    if problems:
        typer.echo(f"error: {file}: {len(problems)} problem(s); nothing was published:", err=True)
        for line in problems:
            typer.echo(line, err=True)
        raise typer.Exit(1)


def _change_of(planned: PlannedChange) -> ScheduleChange:
    kind: ChangeKind = "deleted" if planned.action == "delete" else "upserted"
    return ScheduleChange(kind, planned.schedule_id, planned.schedule, planned.revision)


def _diff(old: Schedule, new: Schedule) -> tuple[str, ...]:
    before, after = old.model_dump(mode="json"), new.model_dump(mode="json")
    return tuple(
        f"{field}: {_shown(before[field])} → {_shown(after[field])}"
        for field in Schedule.model_fields
        if before[field] != after[field]
    )


def _shown(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    if len(text) <= _SHOWN_VALUE_LIMIT:
        return text
    return text[: _SHOWN_VALUE_LIMIT - 3] + "..."


def _summary(plan: list[PlannedChange]) -> str:
    counts = dict.fromkeys(("create", "update", "delete", "unchanged"), 0)
    for planned in plan:
        counts[planned.action] += 1
    return ", ".join(f"{count} {action}" for action, count in counts.items())
