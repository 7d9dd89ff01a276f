"""The entries of a schedules or a calendars file, and how their problems are told.

Both files list entries of one model under one key, `{"schedules": [...]}` or
`{"calendars": [...]}`, and both name an entry the same way: by its id, or by its position in the
file when it has no usable id. What differs (the model, its id rule, how each of pydantic's
errors reads, the error types) is an `EntryFile`'s to say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from re import Pattern
from typing import ClassVar, Generic, Protocol, TypeVar

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from kairos.core.errors import KairosError
from kairos.core.schedule_text import unique_entries


class EntryValidationError(KairosError):
    """One problem with one entry of a file: which entry, which field, what is wrong.

    `entry_id` is `None` when the entry has no usable id; then `index` (its position in the
    file, from 0) identifies it.
    """

    entry: ClassVar[str]
    """What the file lists, such as `schedule`; the file lists them under the plural."""

    def __init__(
        self, entry_id: str | None, *, index: int | None, field: str, problem: str
    ) -> None:
        self.entry_id = entry_id
        self.index = index
        self.field = field
        self.problem = problem
        super().__init__(f"{self.where}: field '{field}': {problem}")

    @property
    def where(self) -> str:
        position = f"{self.entry}s[{self.index}]" if self.index is not None else None
        if self.entry_id is None:
            return f"{self.entry} {position or '(without id)'}"
        return f"{self.entry} '{self.entry_id}'" + (f" ({position})" if position else "")


P = TypeVar("P", bound=EntryValidationError)


class EntriesInvalidError(KairosError, Generic[P]):
    """Every problem found in one or more entries; `errors` lists them all."""

    entries: ClassVar[str]
    """What the file lists, such as `schedules`."""

    def __init__(self, errors: list[P]) -> None:
        self.errors = tuple(errors)
        lines = "\n".join(f"  - {error}" for error in self.errors)
        count = f"{len(self.errors)} problem{'s' if len(self.errors) != 1 else ''}"
        super().__init__(f"{count} in the {self.entries}; fix each and try again:\n{lines}")


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


M = TypeVar("M", bound=_Identified)

Problem = Callable[[str | None, int | None, str, str], P]
"""An entry's problem from (entry id, index, field, problem): the error type's constructor."""


@dataclass(frozen=True)
class EntryFile(Generic[M, P]):
    """How one kind of file's entries are read: one at a time (`parse`), or a whole list
    (`load`), every problem raised at once as an `invalid`."""

    validate: Callable[[object], M]
    id_pattern: Pattern[str]
    """The ids a problem may name its entry by: the ones the model accepts."""
    describe: Callable[[ErrorDetails], tuple[str, str]]
    """(field, problem) of one of pydantic's errors."""
    problem: Problem[P]
    invalid: type[EntriesInvalidError[P]]

    def parse(self, data: object, index: int | None) -> M:
        """Validate one entry given as a mapping; `index` is its position in a file."""
        try:
            return self.validate(data)
        except ValidationError as error:
            raise self.invalid(self._problems(error, data, index)) from None

    def load(self, entries: list[object]) -> list[M]:
        """Every entry validated, and none with the id of one before it."""
        parsed, problems = unique_entries(
            entries, self._parsed_or_problems, lambda one: one.id, self._duplicate
        )
        if problems:
            raise self.invalid(problems)
        return parsed

    def _parsed_or_problems(self, entry: object, index: int) -> M | list[P]:
        try:
            return self.parse(entry, index)
        except self.invalid as invalid:
            return list(invalid.errors)

    def _duplicate(self, entry: M, index: int, first: int) -> P:
        return self.problem(
            entry.id,
            index,
            "id",
            f"duplicate id, also used by {self.invalid.entries}[{first}]; ids must be unique",
        )

    def _problems(self, error: ValidationError, data: object, index: int | None) -> list[P]:
        entry_id = None
        if isinstance(data, Mapping):
            candidate = data.get("id")
            if isinstance(candidate, str) and self.id_pattern.fullmatch(candidate):
                entry_id = candidate
        return [
            self.problem(entry_id, index, field, problem)
            for field, problem in map(self.describe, error.errors(include_url=False))
        ]
