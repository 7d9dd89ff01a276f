"""Durations as schedules write them: short forms (`15m`, `1h30m`, `250ms`) or ISO-8601 (`PT15M`).

Durations are fixed lengths of elapsed time with millisecond precision, so they map onto an
Avro `long` of milliseconds without loss. Calendar units of varying length (years, months) are
refused rather than guessed.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any, Protocol

from kairos.core.errors import KairosError

_MS_PER_UNIT = {"w": 604_800_000, "d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}

# Units in descending order, each at most once, so `1h30m` has one reading and `30m1h` is refused.
_SHORT = re.compile(
    r"(?:(?P<w>\d+)w)?(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m(?!s))?"
    r"(?:(?P<s>\d+)s)?(?:(?P<ms>\d+)ms)?"
)
_ISO = re.compile(
    r"P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)

EXAMPLES = "'90s', '15m', '1h30m', '2d', '250ms' or ISO-8601 'PT15M', 'P1D'"

LONGEST = timedelta(days=36_500)
"""No duration is read longer than this (100 years): beyond it a `timedelta` or the arithmetic
on it can overflow. Each schedule field has its own, shorter, maximum (`kairos.core.limits`)."""

_LONGEST_MS = LONGEST // timedelta(milliseconds=1)
# More digits than any amount within LONGEST has; refused before int() reads them, which
# refuses strings of over 4,300 digits with an unrelated message.
_MOST_DIGITS = 16


class DurationError(KairosError, ValueError):
    """A duration could not be read; `text` is the input, `problem` what is wrong with it.

    It is also a `ValueError` so that pydantic reports it as a field error.
    """

    def __init__(self, text: object, problem: str) -> None:
        self.text = text
        self.problem = problem
        super().__init__(f"invalid duration {text!r}: {problem}; write it like {EXAMPLES}")


def parse_duration(value: object) -> timedelta:
    """Read a duration from a short form, an ISO-8601 duration or a `timedelta`.

    Bare numbers are refused: `90` could mean seconds or minutes, and a wrong guess shifts runs.
    """
    if isinstance(value, timedelta):
        return _checked(value, value)
    if isinstance(value, bool) or not isinstance(value, str):
        raise DurationError(value, "a duration needs a unit (a bare number is ambiguous)")
    text = value.strip()
    if not text:
        raise DurationError(value, "it is empty")
    if text[0] in "pP":
        return _parse_iso(value, text)
    match = _SHORT.fullmatch(text)
    if match is None or not any(match.groupdict().values()):
        raise DurationError(
            value, "not a duration: use whole numbers with units w, d, h, m, s, ms, largest first"
        )
    total_ms = sum(
        _amount(value, amount) * _MS_PER_UNIT[unit]
        for unit, amount in match.groupdict().items()
        if amount is not None
    )
    return duration_from_ms(total_ms, original=value)


@lru_cache(maxsize=4_096)
def _shared_duration(total_ms: int) -> timedelta:
    # Shared: every held schedule keeps several durations, mostly the same few values.
    return timedelta(milliseconds=total_ms)


def duration_from_ms(total_ms: int, *, original: object = None) -> timedelta:
    """The duration of `total_ms` milliseconds (as Avro records carry durations), checked.

    `original` is the input to name in an error; by default the milliseconds.
    """
    if 0 <= total_ms <= _LONGEST_MS:
        return _shared_duration(total_ms)
    shown = f"{total_ms}ms" if original is None else original
    if total_ms < 0:
        raise DurationError(shown, "durations cannot be negative")
    raise _too_long(shown)


def _too_long(original: object) -> DurationError:
    return DurationError(
        original, f"longer than {format_duration(LONGEST)}, the longest duration Kairos reads"
    )


def _amount(original: object, digits: str) -> int:
    if len(digits.lstrip("0")) > _MOST_DIGITS:
        raise _too_long(original)
    return int(digits)


def _parse_iso(original: str, text: str) -> timedelta:
    match = _ISO.fullmatch(text)
    if match is None or not any(match.groupdict().values()):
        date_part = text.upper().partition("T")[0]
        if "Y" in date_part or "M" in date_part:
            raise DurationError(
                original, "years and months have no fixed length; give days instead (P30D)"
            )
        raise DurationError(
            original, "not an ISO-8601 duration of weeks, days, hours, minutes and seconds"
        )
    parts = match.groupdict()
    total_ms = sum(
        _amount(original, parts[unit]) * _MS_PER_UNIT[unit]
        for unit in ("w", "d", "h", "m")
        if parts[unit] is not None
    )
    if parts["s"] is not None:
        _amount(original, parts["s"].partition(".")[0])
        try:
            seconds_ms = Decimal(parts["s"]) * 1000
        except InvalidOperation as error:  # pragma: no cover - the regex admits only decimals
            raise DurationError(original, "the seconds are not a number") from error
        if seconds_ms != seconds_ms.to_integral_value():
            raise DurationError(original, "durations have millisecond precision")
        total_ms += int(seconds_ms)
    return duration_from_ms(total_ms, original=original)


def _checked(original: object, duration: timedelta) -> timedelta:
    if duration < timedelta(0):
        raise DurationError(original, "durations cannot be negative")
    if duration.microseconds % 1000:
        raise DurationError(original, "durations have millisecond precision")
    if duration > LONGEST:
        raise _too_long(original)
    return duration


def format_duration(duration: timedelta) -> str:
    """The canonical short form, largest unit first: `1d2h30m`, `250ms`, `0s`.

    `parse_duration(format_duration(d)) == d` for every duration `parse_duration` accepts.
    """
    total_ms = duration // timedelta(milliseconds=1)
    if total_ms == 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        amount, total_ms = divmod(total_ms, _MS_PER_UNIT[unit])
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


class _Validating(Protocol):
    """What a field validator is given (pydantic's `ValidationInfo`), as far as it is read."""

    @property
    def context(self) -> Any | None: ...


def read_duration(value: object, info: _Validating) -> timedelta:
    """A duration field's input: text (`10m`, `PT1H`), or integer milliseconds where the
    validation context says `durations_in_ms` (Avro records)."""
    # Checked in this order, cheapest first: a restore reads a million definitions.
    if type(value) is int and info.context is not None and info.context.get("durations_in_ms"):
        return duration_from_ms(value)
    return parse_duration(value)
