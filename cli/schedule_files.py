"""The schedules files of `kairos apply` (several `-f`, directories, `-R`, stdin) and `preview`.

Like `kubectl apply -f`: each `-f` is a file, `-` (stdin), or a directory, whose `*.yaml`,
`*.yml` and `*.json` files are read in name order (with `-R`, those of its subdirectories too).
Hidden files and directories (`.git`, `.cache.yaml`) are passed over. Every file is validated,
job parameters included, before anything is published; an id defined in two files is an error
naming both.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import typer

from kairos.cli.exit_codes import ExitCode
from kairos.core.errors import KairosError
from kairos.core.job_kinds import job_problems
from kairos.core.schedule import (
    Schedule,
    SchedulesInvalidError,
    ScheduleValidationError,
    load_schedules,
)

STDIN = "-"
SCHEDULE_SUFFIXES = (".yaml", ".yml", ".json")


class ApplySourceError(KairosError):
    """A `-f` names nothing readable: a missing path, an empty directory, stdin twice."""


@dataclass(frozen=True)
class SourcedSchedule:
    """One schedule and where it was read: the file (or `-`) and its position there."""

    schedule: Schedule
    source: str
    index: int


@dataclass(frozen=True)
class SourceProblems:
    """Everything wrong with one file: its format, or each invalid schedule."""

    source: str
    problems: tuple[str, ...]


class SourcesInvalidError(KairosError):
    """Problems in one or more files; nothing may be published."""

    def __init__(self, invalid: list[SourceProblems]) -> None:
        self.invalid = tuple(invalid)
        super().__init__("; ".join(f"{one.source}: {', '.join(one.problems)}" for one in invalid))


def fail_invalid(invalid: Iterable[SourceProblems], consequence: str = "") -> typer.Exit:
    """Print each file's problems, a line counting them then one a line, and return the exit to
    raise: the command could not run. `consequence` says what that means, e.g. that nothing was
    published."""
    for one in invalid:
        typer.echo(f"error: {one.source}: {len(one.problems)} problem(s){consequence}:", err=True)
        for problem in one.problems:
            typer.echo(f"  - {problem}", err=True)
    return typer.Exit(ExitCode.COULD_NOT_RUN)


def schedule_files(files: list[str], recursive: bool) -> list[str]:
    """The files that `-f` names, in the order given; a directory's files sorted by path."""
    if not files:
        raise ApplySourceError("name the schedules to apply: -f FILE, -f DIRECTORY or -f -")
    if files.count(STDIN) > 1:
        raise ApplySourceError("'-f -' reads stdin, which can be read once; give it once")
    found: list[str] = []
    for name in files:
        found.extend(_files_of(name, recursive))
    # The same file named twice (`-f a.yaml -f .`) is read once, not reported as its own duplicate.
    seen: set[Path] = set()
    unique: list[str] = []
    for name in found:
        resolved = Path(name).resolve() if name != STDIN else Path(STDIN)
        if resolved not in seen:
            seen.add(resolved)
            unique.append(name)
    return unique


def _files_of(name: str, recursive: bool) -> list[str]:
    if name == STDIN:
        return [STDIN]
    path = Path(name)
    if not path.is_dir():
        # A file is read whatever its extension (by content); a missing one fails when read.
        return [name]
    candidates = path.rglob("*") if recursive else path.glob("*")
    files = sorted(
        str(candidate)
        for candidate in candidates
        if candidate.is_file()
        and candidate.suffix.lower() in SCHEDULE_SUFFIXES
        and not any(part.startswith(".") for part in candidate.relative_to(path).parts)
    )
    if not files:
        deeper = "" if recursive else " (-R also reads its subdirectories)"
        raise ApplySourceError(
            f"directory {name} holds no *.yaml, *.yml or *.json file{deeper}; "
            "add one or name the files"
        )
    return files


def load_sources(files: list[str], owner: str | None) -> list[SourcedSchedule]:
    """Every schedule of every file, validated; `SourcesInvalidError` lists each file's problems.

    A file that cannot be read at all raises `ApplySourceError` at once: one line, not a list.
    """
    loaded: list[SourcedSchedule] = []
    invalid: list[SourceProblems] = []
    for source in files:
        try:
            schedules = load_schedules(*read_source(source, "schedules"))
            problems = [
                *_owner_problems(schedules, owner),
                *(p for index, s in enumerate(schedules) for p in job_problems(s, index)),
            ]
            if problems:
                raise SchedulesInvalidError(problems)
        except SchedulesInvalidError as error:
            invalid.append(SourceProblems(source, tuple(str(p) for p in error.errors)))
            continue
        except ApplySourceError:
            raise
        except KairosError as error:
            invalid.append(SourceProblems(source, (str(error),)))
            continue
        loaded.extend(SourcedSchedule(s, source, index) for index, s in enumerate(schedules))
    invalid.extend(_duplicates_across(loaded))
    if invalid:
        raise SourcesInvalidError(invalid)
    return loaded


def read_source(source: str, what: str) -> tuple[str, Literal["yaml", "json"]]:
    """A file's (or stdin's) text and its format: by extension, else by content. `what` the file
    holds (schedules, calendars) names it when it cannot be read."""
    try:
        text = sys.stdin.read() if source == STDIN else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ApplySourceError(f"cannot read {what} file {source}: {error}") from None
    suffix = Path(source).suffix.lower()
    if suffix == ".json":
        return text, "json"
    if suffix in (".yaml", ".yml"):
        return text, "yaml"
    # JSON is (nearly) YAML, but JSON's parser gives the clearer errors for a JSON document.
    return text, "json" if text.lstrip().startswith("{") else "yaml"


def _owner_problems(schedules: list[Schedule], owner: str | None) -> list[ScheduleValidationError]:
    """With --owner, every schedule must be that owner's, or a prune would miss it."""
    if owner is None:
        return []
    return [
        ScheduleValidationError(
            schedule_id=schedule.id,
            index=index,
            field="owner",
            problem=f"is {schedule.owner!r}, but --owner is {owner!r}; set owner: {owner}",
        )
        for index, schedule in enumerate(schedules)
        if schedule.owner != owner
    ]


def _duplicates_across(loaded: list[SourcedSchedule]) -> list[SourceProblems]:
    # Within one file, load_schedules already refused a repeated id.
    first: dict[str, SourcedSchedule] = {}
    invalid: list[SourceProblems] = []
    for one in loaded:
        earlier = first.setdefault(one.schedule.id, one)
        if earlier is one:
            continue
        problem = (
            f"schedule '{one.schedule.id}' (schedules[{one.index}]): field 'id': also defined in "
            f"{earlier.source} (schedules[{earlier.index}]); an id must be defined in one file "
            "of the apply: remove one of them or rename it"
        )
        invalid.append(SourceProblems(one.source, (problem,)))
    return invalid
