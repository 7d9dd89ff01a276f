"""`kairos apply -f FILE|DIR|- ...`: make the schedules topic match files, kubectl-style.

Every file is validated before anything else, each job's parameters for its kind included; one
invalid schedule publishes nothing. Then the files are compared with the current state of the
topic and only the differences are published: new schedules (create), changed definitions
(update), and with `--prune --owner TEAM` the deletion of TEAM's schedules the files no longer
have. A schedule whose entry does not set `paused` keeps its current paused state, so an apply
never undoes an operator's pause; `paused: true` or `paused: false` is applied like any other
field.

Exit codes (`kairos.cli.exit_codes`): 0 applied (or, with `--dry-run`, nothing would change); 1
with `--dry-run` only, changes would be published (drift, for CI, as `kubectl diff`'s); 2 it could
not run: invalid or unreadable files, no broker, a refused prune, a failed publish.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

import typer

from kairos.cli.apply_report import (
    Action,
    FieldChange,
    OutputFormat,
    PlanLine,
    document,
    summary,
    table_lines,
)
from kairos.cli.exit_codes import ExitCode
from kairos.cli.options import fail, kafka_settings, refused
from kairos.cli.reading import reader_for, warn_rejected
from kairos.cli.schedule_files import (
    STDIN,
    ApplySourceError,
    SourcedSchedule,
    SourcesInvalidError,
    fail_invalid,
    load_sources,
    schedule_files,
)
from kairos.cli.schedules import ChangedByOption, ReasonOption, changed_by_or_default
from kairos.core.dependencies import dependency_problems
from kairos.core.errors import KairosError
from kairos.core.ownership import Change, Held, upsert_change
from kairos.core.schedule import Schedule
from kairos.streams.client.change_precheck import ChangeRefusedError, OwnershipPrecheck
from kairos.streams.client.schedule_publisher import ChangeKind, ScheduleChange, SchedulesClient
from kairos.streams.kafka.acls import Role
from kairos.streams.kafka.partitioner import partition_for
from kairos.streams.kafka.settings import KafkaSettings
from kairos.streams.kafka.topics import TopicRole
from kairos.streams.readers.calendar_reader import read_calendars
from kairos.streams.readers.held_schedules import StoredSchedule
from kairos.streams.readers.schedule_reader import ScheduleSnapshot
from kairos.streams.wire.records import definition_record
from kairos.streams.wire.signing import load_signer


@dataclass(frozen=True)
class PlannedChange:
    """What apply does to one schedule; `diff` lists an update's changed fields."""

    action: Action
    schedule_id: str
    schedule: Schedule | None
    """The definition to publish; None for a delete."""
    revision: int
    diff: tuple[FieldChange, ...] = ()


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
    list[str],
    typer.Option(
        "-f",
        "--file",
        help="Schedules file {schedules: [...]}, YAML or JSON (by extension, else by content), "
        "or a directory of *.yaml, *.yml and *.json files; '-' reads stdin. Repeatable.",
    ),
]
_RecursiveOption = Annotated[
    bool, typer.Option("-R", "--recursive", help="Read the -f directories' subdirectories too.")
]
_PruneOption = Annotated[
    bool,
    typer.Option("--prune", help="Delete the --owner's schedules that the files lack."),
]
_OwnerOption = Annotated[
    str | None,
    typer.Option("--owner", help="Team whose schedules the files hold; each must have it."),
]
_DryRunOption = Annotated[
    bool,
    typer.Option(
        "--dry-run",
        help="Show what would change and publish nothing; exit 1 if something would change, "
        "0 if nothing would, 2 if the files or the topic could not be read.",
    ),
]
_OutputOption = Annotated[
    OutputFormat,
    typer.Option("-o", "--output", help="table: the diff; json or yaml: one document."),
]
_YesOption = Annotated[
    bool,
    typer.Option(
        "--yes", "-y", help="Confirm a --prune that deletes every schedule of the --owner."
    ),
]


def apply(
    context: typer.Context,
    files: _FileOption,
    recursive: _RecursiveOption = False,
    prune: _PruneOption = False,
    owner: _OwnerOption = None,
    dry_run: _DryRunOption = False,
    output: _OutputOption = "table",
    yes: _YesOption = False,
    changed_by: ChangedByOption = None,
    reason: ReasonOption = None,
) -> None:
    """Publish the schedules of files that differ from the topic (unchanged ones are not)."""
    plan, settings = _planned(context, files, recursive, prune, owner)
    _show(plan, dry_run, output)
    changes = [_change_of(planned) for planned in plan if planned.action != "unchanged"]
    if dry_run:
        _warn_if_owner_emptied(plan, owner)
        if output == "table":
            typer.echo(f"dry run: {summary(_lines(plan))}; nothing was published")
        if changes:
            raise typer.Exit(ExitCode.FINDING)
        return
    _confirm_owner_emptied(plan, owner, yes, interactive=STDIN not in files)
    if changes:
        _publish(settings, changes, changed_by, reason)
    if output == "table":
        typer.echo(f"applied: {summary(_lines(plan))}")


def _planned(
    context: typer.Context, files: list[str], recursive: bool, prune: bool, owner: str | None
) -> tuple[list[PlannedChange], KafkaSettings]:
    if prune and owner is None:
        raise fail("--prune deletes one owner's schedules: name it with --owner TEAM")
    try:
        sourced = load_sources(schedule_files(files, recursive), owner)
    except ApplySourceError as error:
        raise fail(f"{error}; nothing was published") from None
    except SourcesInvalidError as invalid:
        raise fail_invalid(invalid.invalid, "; nothing was published") from None
    desired = [one.schedule for one in sourced]
    for schedule in desired:
        if schedule.zone_warning is not None:
            typer.echo(f"warning: schedule '{schedule.id}': {schedule.zone_warning}", err=True)
    settings = kafka_settings(context)
    reader = reader_for(settings)
    try:
        snapshot = reader.read_all()
    except KairosError as error:
        raise fail(f"{_refusal(settings, error)}; nothing was published") from None
    warn_rejected(snapshot, reader)
    _check_calendars(settings, sourced)
    plan = plan_apply(desired, snapshot.schedules, owner if prune else None)
    _check_ownership(settings, plan, snapshot)
    _check_dependencies(plan, snapshot)
    return plan, settings


def _check_ownership(
    settings: KafkaSettings, plan: list[PlannedChange], snapshot: ScheduleSnapshot
) -> None:
    """Refuse, before publishing anything, what a signed ticker would refuse of the plan."""
    if settings.signing_key is None:
        return
    try:
        team = load_signer(settings.signing_key).team
    except KairosError as error:
        raise fail(f"{error}; nothing was published") from None
    precheck = OwnershipPrecheck(settings, team, timeout_s=30.0)
    refusals = []
    for planned in plan:
        partition = partition_for(planned.schedule_id, snapshot.partitions)
        if planned.action == "unchanged" or not snapshot.signed(partition):
            continue
        stored = snapshot.schedules.get(planned.schedule_id)
        held = None if stored is None else Held(stored.schedule.owner, stored.schedule.paused)
        new = planned.schedule
        change = Change.DELETE if new is None else upsert_change(held, new.paused)
        try:
            precheck.check(planned.schedule_id, change, stored, None if new is None else new.owner)
        except ChangeRefusedError as refusal:
            refusals.append(str(refusal))
        except KairosError as error:
            raise fail(f"{error}; nothing was published") from None
    if refusals:
        for reason in refusals:
            typer.echo(f"error: {reason}", err=True)
        raise fail(f"{len(refusals)} change(s) would be refused; nothing was published")


def _show(plan: list[PlannedChange], dry_run: bool, output: OutputFormat) -> None:
    lines = _lines(plan)
    if output == "table":
        for line in table_lines(lines):
            typer.echo(line)
    else:
        typer.echo(document(lines, dry_run, output))


def _publish(
    settings: KafkaSettings,
    changes: list[ScheduleChange],
    changed_by: str | None,
    reason: str | None,
) -> None:
    try:
        with SchedulesClient(settings, changed_by_or_default(changed_by)) as client:
            client.publish(changes, reason)
    except KairosError as error:
        raise fail(
            f"{_refusal(settings, error)}; some changes may have been published: "
            "`kairos apply --dry-run` shows what remains"
        ) from None


def _refusal(settings: KafkaSettings, error: KairosError) -> str:
    """Why the schedules topic could not be read or written: the ACL the deployment lacks, when
    that is why."""
    topic = settings.layout.name(TopicRole.SCHEDULES)
    return refused(settings, error, Role.PRODUCER, topic) or str(error)


def _owner_emptied(plan: list[PlannedChange], owner: str | None) -> int:
    """How many schedules a prune deletes when it leaves the owner none (else 0)."""
    deletes = sum(planned.action == "delete" for planned in plan)
    kept = sum(planned.action != "delete" for planned in plan)
    return deletes if owner is not None and kept == 0 else 0


def _warn_if_owner_emptied(plan: list[PlannedChange], owner: str | None) -> None:
    deleted = _owner_emptied(plan, owner)
    if deleted:
        typer.echo(
            f"warning: this prune deletes all {deleted} schedule(s) of owner {owner!r}; "
            "applying it will ask for --yes",
            err=True,
        )


def _confirm_owner_emptied(
    plan: list[PlannedChange], owner: str | None, yes: bool, interactive: bool
) -> None:
    """An empty file (a truncated render, a wrong directory) must not silently delete a team."""
    deleted = _owner_emptied(plan, owner)
    if not deleted or yes:
        return
    deletion = f"delete all {deleted} schedule(s) of owner {owner!r}, leaving it none"
    if interactive and sys.stdin.isatty():
        if typer.confirm(f"{deletion}?", default=False, err=True):
            return
        raise fail("not confirmed; nothing was published")
    raise fail(
        f"refused: this would {deletion}; the files hold none of its schedules. "
        "If that is meant, add --yes; nothing was published"
    )


def _check_calendars(settings: KafkaSettings, sourced: list[SourcedSchedule]) -> None:
    """Refuse schedules naming a calendar nobody published: it would skip nothing."""
    named = [
        (one, [*one.schedule.exclude, *one.schedule.blackout])
        for one in sourced
        if one.schedule.exclude or one.schedule.blackout
    ]
    if not named:
        return
    try:
        book = read_calendars(settings)
    except KairosError as error:
        raise fail(
            f"the schedules name shared calendars, which could not be read: {error}; "
            "nothing was published"
        ) from None
    problems = [
        f"  - {one.source}: schedule '{one.schedule.id}': calendar '{calendar_id}' is not "
        "published; publish it with `kairos calendars apply -f FILE` first, or fix the id "
        f"(published: {', '.join(sorted(book.versions)) or 'none'})"
        for one, calendar_ids in named
        for calendar_id in calendar_ids
        if calendar_id not in book
    ]
    if problems:
        typer.echo(f"error: {len(problems)} problem(s); nothing was published:", err=True)
        for line in problems:
            typer.echo(line, err=True)
        raise typer.Exit(ExitCode.COULD_NOT_RUN)


def _check_dependencies(plan: list[PlannedChange], snapshot: ScheduleSnapshot) -> None:
    """Refuse what a changed schedule waits for that cannot be waited for (`dependency_problems`);
    warn of schedules left unchanged whose upstream this apply deletes or stops granting: their
    runs will end at the end of their wait, with the reason."""
    after = {schedule_id: stored.schedule for schedule_id, stored in snapshot.schedules.items()}
    for planned in plan:
        if planned.schedule is None:
            after.pop(planned.schedule_id, None)
        else:
            after[planned.schedule_id] = planned.schedule
    touched = {planned.schedule_id for planned in plan if planned.action != "unchanged"}
    changed = [after[schedule_id] for schedule_id in sorted(touched) if schedule_id in after]
    now = datetime.now(UTC)
    problems = dependency_problems(after, changed, now)
    affected = [
        schedule
        for schedule_id, schedule in sorted(after.items())
        if schedule_id not in touched and any(u.schedule in touched for u in schedule.upstream)
    ]
    for schedule_id, problem in dependency_problems(after, affected, now):
        typer.echo(f"warning: schedule '{schedule_id}' (not in this apply): {problem}", err=True)
    if problems:
        typer.echo(f"error: {len(problems)} problem(s); nothing was published:", err=True)
        for schedule_id, problem in problems:
            typer.echo(f"  - schedule '{schedule_id}': {problem}", err=True)
        raise typer.Exit(ExitCode.COULD_NOT_RUN)


def _change_of(planned: PlannedChange) -> ScheduleChange:
    kind: ChangeKind = "deleted" if planned.action == "delete" else "upserted"
    return ScheduleChange(kind, planned.schedule_id, planned.schedule, planned.revision)


def _lines(plan: list[PlannedChange]) -> list[PlanLine]:
    return [
        PlanLine(
            planned.action,
            planned.schedule_id,
            planned.revision,
            planned.diff,
            planned.schedule.model_dump(mode="json", exclude_defaults=True)
            if planned.action == "create" and planned.schedule is not None
            else None,
        )
        for planned in plan
    ]


def _diff(old: Schedule, new: Schedule) -> tuple[FieldChange, ...]:
    before, after = old.model_dump(mode="json"), new.model_dump(mode="json")
    return tuple(
        FieldChange(field, before[field], after[field])
        for field in Schedule.model_fields
        if before[field] != after[field]
    )
