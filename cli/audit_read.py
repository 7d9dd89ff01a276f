"""What `kairos audit verify` reads from the topics for a window, and from where.

The schedules topic is read whole: it is the change history every occurrence is owed by, and
its size follows the changes, not the runs. The runs, run-events and dead-letter topics are read
from the records appended `read_margin` before the window's start (`kairos.core.audit_margin`
says why that is enough), or from their beginning with `whole_history`; either way to their end,
since a late fire under an old version moves where the next version starts owing. Of the fires
after the window only the latest under each version is kept, so memory follows the window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from kairos.core.audit import FiredRun, HistoryEvent, RequestedRerun, RunEventRecord
from kairos.core.audit_margin import read_margin
from kairos.core.audit_verdict import OutcomeCheck, Unsettled
from kairos.streams.readers.history import HistoryReader


@dataclass(frozen=True)
class AuditRead:
    """What the audit read from the topics; `since` is where the time-indexed reads began."""

    history: list[HistoryEvent]
    reruns: list[RequestedRerun]
    fired: list[FiredRun]
    events: list[RunEventRecord]
    unsettled: Unsettled
    outcomes: OutcomeCheck | None
    rejected: int
    since: datetime | None


@dataclass(frozen=True)
class AuditWindow:
    start: datetime
    end: datetime
    schedule: str | None
    early_tolerance: timedelta
    outcome_grace: timedelta | None
    whole_history: bool = False
    margin: timedelta | None = None
    """How far before `start` to read; `read_margin` of the history when not given."""


class _LatestBeyond:
    """Keeps the fires of the window; of those after it, only the latest per version."""

    def __init__(self, window: AuditWindow) -> None:
        self._window = window
        self.latest: dict[tuple[str, int], FiredRun] = {}

    def in_window(self, run: FiredRun) -> bool:
        window = self._window
        return window.start <= run.nominal < window.end and window.schedule in (
            None,
            run.schedule_id,
        )

    def keep(self, run: FiredRun) -> bool:
        window = self._window
        if run.nominal < window.start or window.schedule not in (None, run.schedule_id):
            return False
        if run.nominal < window.end:
            return True
        key = (run.schedule_id, run.schedule_offset)
        held = self.latest.get(key)
        if run.attempt == 1 and (held is None or run.nominal > held.nominal):
            self.latest[key] = run
        return False


def read_audit_window(reader: HistoryReader, window: AuditWindow) -> AuditRead:
    history = reader.schedule_events(window.schedule)
    since = None
    if not window.whole_history:
        margin = window.margin
        if margin is None:
            margin = read_margin((e.definition for e in history), window.early_tolerance)
        since = window.start - margin
    beyond = _LatestBeyond(window)
    # Records past a last stable offset may yet be aborted: the window's only, never a floor.
    fired, unsettled_fires = reader.runs_and_unsettled(
        keep=beyond.keep,
        since=since,
        keep_unsettled=beyond.in_window,
        schedule_id=window.schedule,
    )
    fired += beyond.latest.values()
    events, unsettled_events = reader.run_events_and_unsettled(
        keep=lambda e: (
            window.start <= e.nominal < window.end and window.schedule in (None, e.schedule_id)
        ),
        since=since,
        schedule_id=window.schedule,
    )
    check = None
    if window.outcome_grace is not None:
        letters = tuple(reader.admission_dead_letters(since))
        check = OutcomeCheck(letters, window.outcome_grace)
    unsettled = Unsettled(
        tuple(reader.open_transactions), tuple(unsettled_fires), tuple(unsettled_events)
    )
    return AuditRead(
        history,
        reader.reruns,
        fired,
        events,
        unsettled,
        check,
        len(reader.rejected),
        since,
    )
