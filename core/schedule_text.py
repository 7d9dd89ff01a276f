"""Reading a schedules file's text into a document: the YAML and JSON parsers, and their errors
told as one line each."""

from __future__ import annotations

import json
from typing import Any

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
