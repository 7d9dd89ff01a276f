"""What each definition naming calendars owes in an audit's window, worked out apart.

The audit replays a schedule's history with the ticker's own lifecycle rules
(`kairos.core.audit`): what each version of the definition owes is bounded by the change that
brought it and the change that ended it. Within those bounds, what calendars make of the
occurrences (which business days count, where a roll or a deferral moves one, what they skip)
comes from `kairos.core.calendar_owed`, which shares none of the ticker's calendar code: were
the ticker's rule wrong, the audit would not repeat it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from kairos.core.calendar_owed import Era, OwedRun, owed_between
from kairos.core.schedule import Schedule

if TYPE_CHECKING:
    from kairos.core.audit import HistoryEvent

_JUST_AFTER = timedelta(microseconds=1)
CALENDAR_READ_LAG = timedelta(seconds=10)
"""How long after a calendar change a ticker may still decide with the version before it (it
reads the calendars every second; a read that fails is tried again after ten)."""
_MONTH_AND_A_HALF = timedelta(days=46)
"""How far before the window a `business_day` schedule's account begins: the month before's
occurrence is where the ticker worked out the window's first month."""


def names_calendars(definition: Schedule) -> bool:
    """Whether calendars decide anything of the definition's occurrences (a definition limited
    by `max_runs` is left to the replay, which counts its fires)."""
    named = bool(definition.exclude or definition.blackout or definition.business_day)
    return named and definition.max_runs is None


def calendar_debts(
    events: Sequence[HistoryEvent],
    replayed_floors: Mapping[int, datetime],
    window: tuple[datetime, datetime],
    fired: Mapping[tuple[str, int], datetime],
    eras: Sequence[Era],
) -> dict[int, list[OwedRun]]:
    """For each version (its offset) of one schedule's history whose definition names
    calendars, the occurrences it owes with a nominal instant in `window`.

    A version owes from its change (after the last occurrence an earlier version decided:
    `replayed_floors` for those the replay worked out) up to the next change, or through its
    last fire when the ticker saw that change late (`fired`, as in `expected_occurrences`).
    """
    start, end = window
    debts: dict[int, list[OwedRun]] = {}
    floor: datetime | None = None
    for index, event in enumerate(events):
        if event.changed_at >= end:
            break
        definition = event.definition
        if definition is None or definition.paused or not names_calendars(definition):
            floor = _latest(floor, replayed_floors.get(event.offset))
            continue
        following = events[index + 1] if index + 1 < len(events) else None
        until = _owed_until(event, following, end, fired)
        owed_from = (
            event.changed_at if floor is None else max(event.changed_at, floor + _JUST_AFTER)
        )
        margin = _MONTH_AND_A_HALF if definition.business_day is not None else timedelta(0)
        begin = max(owed_from, start - margin)
        runs = owed_between(
            event.schedule_id,
            definition,
            eras,
            begin,
            until,
            created=event.changed_at,
            decided_day=floor if _on_business_days(events, index - 1) else None,
        )
        changes = [era.since for era in eras]
        debts[event.offset] = [
            _unless_racing(run, changes) for run in runs if start <= run.nominal < end
        ]
        if runs:
            floor = _latest(floor, runs[-1].nominal)
    return debts


def _on_business_days(events: Sequence[HistoryEvent], index: int) -> bool:
    """Whether the version at `index` ran on business days: a month it began keeps its day."""
    definition = events[index].definition if index >= 0 else None
    return definition is not None and definition.business_day is not None


def _unless_racing(run: OwedRun, changes: Sequence[datetime]) -> OwedRun:
    """`run`, not telling whether calendars skip it when a calendar changed just before it was
    decided: a ticker reads the calendars every second, so it may have decided with the
    version before."""
    racing = any(run.at - CALENDAR_READ_LAG < since <= run.at for since in changes)
    return replace(run, calendar_skipped=None) if racing else run


def _owed_until(
    event: HistoryEvent,
    following: HistoryEvent | None,
    end: datetime,
    fired: Mapping[tuple[str, int], datetime],
) -> datetime:
    ended = following is None or following.changed_at >= end
    until = end if following is None or ended else following.changed_at
    last = fired.get((event.schedule_id, event.offset))
    if following is not None and last is not None and last >= following.changed_at:
        until = max(until, last + _JUST_AFTER)  # the change seen late: owed through that fire
    return until


def _latest(*instants: datetime | None) -> datetime | None:
    return max((instant for instant in instants if instant is not None), default=None)
