"""The schedule fields that name shared calendars, and the rules between them.

What the calendars then do to occurrences is `kairos.core.calendar_rules`'s; docs/defaults.md
states both for users.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Protocol

from pydantic import AfterValidator

from kairos.core.cron import parse_cron

CALENDAR_REF_PATTERN = re.compile(r"[A-Za-z0-9._:/-]{1,200}")

MOST_CALENDARS = 16
"""Calendars one schedule may name in `exclude` or `blackout`."""

MOST_BUSINESS_DAYS = 23
"""No month has more business days than this (31 days, at most 23 of them Monday to Friday)."""


class RollPolicy(StrEnum):
    """Where an occurrence on a non-business day of its `exclude` calendars runs instead."""

    NEXT_BUSINESS_DAY = "next_business_day"
    PREVIOUS_BUSINESS_DAY = "previous_business_day"


class BlackoutAction(StrEnum):
    """What happens to an occurrence inside a blackout window."""

    SKIP = "skip"
    """Recorded as skipped, with the window as the reason (the default)."""
    DEFER = "defer"
    """Run at the window's end; several deferred into one window run once."""


def _calendar_ids(value: tuple[str, ...]) -> tuple[str, ...]:
    for calendar_id in value:
        if not CALENDAR_REF_PATTERN.fullmatch(calendar_id):
            raise ValueError(
                f"{calendar_id!r} is not a calendar id; use 1–200 characters of letters, "
                "digits and . _ : / -"
            )
    if len(set(value)) != len(value):
        raise ValueError("names a calendar twice; list each once")
    if len(value) > MOST_CALENDARS:
        raise ValueError(
            f"names {len(value)} calendars, more than the maximum, {MOST_CALENDARS}; "
            "publish one calendar holding their dates instead"
        )
    return value


CalendarIds = Annotated[tuple[str, ...], AfterValidator(_calendar_ids)]


class _CalendarFields(Protocol):
    @property
    def cron(self) -> str | None: ...
    @property
    def exclude(self) -> tuple[str, ...]: ...
    @property
    def roll(self) -> RollPolicy | None: ...
    @property
    def business_day(self) -> int | None: ...
    @property
    def blackout(self) -> tuple[str, ...]: ...
    @property
    def blackout_action(self) -> BlackoutAction: ...
    @property
    def pause_until(self) -> datetime | None: ...


def calendar_field_problem(schedule: _CalendarFields) -> tuple[str, str] | None:
    """The first (field, problem) among the calendar fields' rules, or `None`."""
    if schedule.roll is not None and not schedule.exclude:
        return "roll", (
            "a roll needs the calendars that say which days are business days; "
            "name them in 'exclude' (for example exclude: [us-federal])"
        )
    if schedule.blackout_action is BlackoutAction.DEFER and not schedule.blackout:
        return (
            "blackout_action",
            "'defer' needs windows to defer out of; name their calendars in 'blackout'",
        )
    if schedule.business_day is not None:
        return _business_day_problem(schedule.cron, schedule.business_day, schedule.roll)
    return None


def _business_day_problem(
    cron: str | None, n: int, roll: RollPolicy | None
) -> tuple[str, str] | None:
    if n == 0 or abs(n) > MOST_BUSINESS_DAYS:
        return "business_day", (
            f"{n} is not a business day of a month; use 1 to {MOST_BUSINESS_DAYS} (the first, "
            f"second, ...) or -1 to -{MOST_BUSINESS_DAYS} (-1 is the last)"
        )
    if cron is None:
        return "business_day", (
            "needs 'cron' for the times of day and months, such as cron: '0 18 * * *'"
        )
    expr = parse_cron(cron)
    if not (expr.dom_star and expr.dow_star) or expr.extended:
        return "cron", (
            f"with business_day the cron names only times and months; write '*' in both day "
            f"fields (for example '{' '.join(cron.split()[:2])} * {cron.split()[3]} *')"
        )
    if roll is not None:
        return "roll", "a business_day occurrence is on a business day already; drop 'roll'"
    return None
