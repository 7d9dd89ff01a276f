"""Suggestions ("did you mean …?") for misspelt field names, zones, enum values, job kinds.

Two rules, the same everywhere. A known name at least four characters long that the misspelling
starts with is offered (`cron_expresion` -> `cron`, `timezone_name` -> `timezone`). Otherwise
the known names scoring at least `_CUTOFF` on difflib's similarity ratio are, best first
(`timezon` -> `timezone` 0.93, `Europe/Londn` -> `Europe/London` 0.96, `shel` -> `shell` 0.89).
Comparing ignores case, so `utc` finds `UTC`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

_CUTOFF = 0.75
"""difflib ratio below which a name is not offered. At difflib's default, 0.6, a schedule's
`zone` was offered `owner` (0.67) beside `timezone`, and `kind` was offered `id` (0.67):
suggestions that mislead. `start` -> `start_at` (0.77) is still offered."""

_SHORTEST_PREFIX = 4
"""`at` and `id` are prefixes of too many words (`attempts`, `idle`) to be offered that way."""

_MOST = 3


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
    return [by_folded[match] for match in matches]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`"; did you mean 'x'?"` (or `'x' or 'y'`) for a close misspelling of `name`, else `""`."""
    matches = close_names(name, known)
    if not matches:
        return ""
    return "; did you mean " + " or ".join(repr(match) for match in matches) + "?"
