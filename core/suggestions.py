"""Suggestions ("did you mean …?") for misspelt field names, zones, enum values, job kinds.

Two rules, the same everywhere. A known name at least four characters long that the misspelling
starts with is offered (`cron_expresion` -> `cron`, `timezone_name` -> `timezone`). Otherwise
the known names scoring at least `_CUTOFF` on difflib's similarity ratio are, best first
(`timezon` -> `timezone` 0.93, `Europe/Londn` -> `Europe/London` 0.96, `shel` -> `shell` 0.89).
Comparing ignores case, so `utc` finds `UTC`.
"""

from __future__ import annotations

import difflib
import typing
from collections.abc import Iterable
from enum import Enum

from pydantic import BaseModel
from pydantic_core import ErrorDetails

_CUTOFF = 0.75
"""difflib ratio below which a name is not offered. At difflib's default, 0.6, a schedule's
`zone` was offered `owner` (0.67) beside `timezone`, and `kind` was offered `id` (0.67):
suggestions that mislead. `start` -> `start_at` (0.77) is still offered."""

_SHORTEST_PREFIX = 4
"""`at` and `id` are prefixes of too many words (`attempts`, `idle`) to be offered that way."""

_MOST = 3
_MARGIN = 0.05
"""Names this much less similar than the best one are not offered beside it."""


def close_names(name: str, known: Iterable[str]) -> list[str]:
    """The known names closest to `name` (at most three, best first); empty when none is close."""
    by_folded: dict[str, str] = {}
    for candidate in known:
        by_folded.setdefault(candidate.casefold(), candidate)
    folded = name.casefold()
    if folded in by_folded:
        # Only the case differs (or nothing does, and there is nothing to suggest).
        exact = by_folded[folded]
        return [exact] if exact != name else []
    prefixes = [
        original
        for lowered, original in by_folded.items()
        if len(lowered) >= _SHORTEST_PREFIX and folded.startswith(lowered)
    ]
    if prefixes:
        return sorted(prefixes, key=len, reverse=True)[:_MOST]
    matches = difflib.get_close_matches(folded, list(by_folded), n=_MOST, cutoff=_CUTOFF)
    if not matches:
        return []
    # Only the names about as close as the best: `Europe/Londn` is offered London (0.96), not
    # Lisbon (0.80) and Oslo (0.78) beside it.
    best = difflib.SequenceMatcher(None, folded, matches[0]).ratio()
    return [
        by_folded[match]
        for match in matches
        if difflib.SequenceMatcher(None, folded, match).ratio() >= best - _MARGIN
    ]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`"; did you mean 'x'?"` (or `'x' or 'y'`) for a close misspelling of `name`, else `""`."""
    matches = close_names(name, known)
    if not matches:
        return ""
    return "; did you mean " + " or ".join(repr(match) for match in matches) + "?"


def model_suggestion(model: type[BaseModel], detail: ErrorDetails) -> str:
    """A "did you mean" for one of pydantic's errors about `model`'s top-level fields, or `""`.

    An unknown field is compared with the model's fields; a value that is not one of an enum's
    with that enum's values. Other errors get none.
    """
    location = detail["loc"]
    if len(location) != 1 or not isinstance(location[0], str):
        return ""
    name = location[0]
    if detail["type"] == "extra_forbidden":
        return did_you_mean(name, model.model_fields)
    field = model.model_fields.get(name)
    value = detail.get("input")
    if detail["type"] != "enum" or field is None or not isinstance(value, str):
        return ""
    return did_you_mean(value, _enum_values(field.annotation))


def _enum_values(annotation: object) -> list[str]:
    """The values of the enum a field holds, `RollPolicy | None` included."""
    candidates = typing.get_args(annotation) or (annotation,)
    return [
        str(member.value)
        for candidate in candidates
        if isinstance(candidate, type) and issubclass(candidate, Enum)
        for member in candidate
    ]
