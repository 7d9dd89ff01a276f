"""Reading a schedules (or calendars) file's text: the YAML and JSON parsers, their errors told as
one line each, and the one shape both files share, `{<key>: [ {...}, ... ]}` with unique ids."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import yaml

from kairos.core.errors import KairosError


class SchedulesFileFormatError(KairosError):
    """A schedules file is not YAML/JSON of the shape `{"schedules": [...]}`."""

    def __init__(self, fmt: str, problem: str) -> None:
        self.fmt = fmt
        self.problem = problem
        super().__init__(f"not a valid {fmt.upper()} schedules file: {problem}")


def decode_schedules_text(text: str, fmt: str) -> Any:
    """The YAML or JSON document of a schedules file, or the error that says why it is not."""
    try:
        return _parse(text, fmt)
    except RecursionError:
        # Both parsers recurse per level of nesting: thousands of `[` exhaust the stack.
        raise SchedulesFileFormatError(
            fmt, "it is nested too deeply to read; a schedules file needs only a few levels"
        ) from None


def _parse(text: str, fmt: str) -> Any:
    if fmt == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise SchedulesFileFormatError(
                fmt, f"{error.msg} at line {error.lineno}, column {error.colno}"
            ) from None
    if fmt == "yaml":
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(error, "problem", None) or str(error)
            raise SchedulesFileFormatError(fmt, f"{problem}{where}") from None
        except ValueError as error:
            # PyYAML builds dates and times as it reads them: `2026-13-01` fails in datetime.
            raise SchedulesFileFormatError(
                fmt, f"a date or time that does not exist: {error}; correct it"
            ) from None
    raise SchedulesFileFormatError(fmt, "the format must be 'yaml' or 'json'")


T = TypeVar("T")
P = TypeVar("P")


def listed_entries(text: str, fmt: str, key: str) -> list[object]:
    """The list under the document's one top-level `key`; `SchedulesFileFormatError` otherwise."""
    document = decode_schedules_text(text, fmt)
    if not isinstance(document, Mapping) or set(document) != {key}:
        raise SchedulesFileFormatError(
            fmt, f"the top level must be a mapping with exactly one key, '{key}'"
        )
    entries = document[key]
    if not isinstance(entries, list):
        raise SchedulesFileFormatError(fmt, f"'{key}' must be a list of {key}")
    return entries


def unique_entries(
    entries: list[object],
    parse: Callable[[object, int], T | list[P]],
    id_of: Callable[[T], str],
    duplicate: Callable[[T, int, int], P],
) -> tuple[list[T], list[P]]:
    """Every entry parsed (`parse` returns the entry or its problems), and every problem, a
    repeated id included (`duplicate(entry, index, first index)`)."""
    parsed: list[T] = []
    problems: list[P] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries):
        result = parse(entry, index)
        if isinstance(result, list):
            problems.extend(result)
            continue
        ident = id_of(result)
        if ident in first_index:
            problems.append(duplicate(result, index, first_index[ident]))
            continue
        first_index[ident] = index
        parsed.append(result)
    return parsed, problems
