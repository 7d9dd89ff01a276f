"""A schedule's last runs, read back from now in growing steps instead of from the beginning.

A schedule's runs are spread over every partition of the runs topic (keyed by run id), so
without an index the only way to its last runs is to read what every schedule fired since then.
`recent_runs` reads the runs and run-events topics from an instant found by the broker's append
time (`HistoryReader`'s `since`), first about `count` of the schedule's periods back, then eight
times further each step, and from the beginning once a step would reach past `_WHOLE_AFTER`:
a schedule firing every minute costs minutes of the topics, a monthly one what it must. A step
is enough once it holds `count` runs whose nominal instants are inside it: a run appended in the
step for an older instant (a backfill, a catch-up) says nothing of the runs before the step.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from kairos.cli.runs import run_summaries
from kairos.core.audit_margin import read_margin
from kairos.core.schedule import Schedule
from kairos.streams.readers.history import HistoryReader

_STEP = 8
_WHOLE_AFTER = timedelta(days=30)
_SHORTEST = timedelta(minutes=1)


def recent_runs(
    reader: HistoryReader, schedule: Schedule, count: int, period: timedelta, now: datetime
) -> list[dict[str, Any]]:
    """The summaries (`run_summaries`) of the last `count` runs of `schedule`, whose occurrences
    come about `period` apart, oldest first."""
    margin = read_margin([schedule])
    lookback = _first_step(period, count)
    while True:
        since = None if lookback is None else now - lookback - margin
        fired = reader.runs(
            keep=lambda r: r.schedule_id == schedule.id, since=since, schedule_id=schedule.id
        )
        events = reader.run_events(
            keep=lambda e: e.schedule_id == schedule.id, since=since, schedule_id=schedule.id
        )
        summaries = run_summaries(fired, events)
        if lookback is None:
            return summaries[-count:]
        # Every run with a nominal instant from `now - lookback` on was appended after `since`:
        # with `count` of them read, no run the read missed (older) can be among the last ones.
        # Runs appended since with older instants (a backfill) do not count towards that.
        complete = [s for s in summaries if s["nominal_at"] >= now - lookback]
        if len(complete) >= count:
            return summaries[-count:]
        lookback = lookback * _STEP if lookback * _STEP < _WHOLE_AFTER else None


def _first_step(period: timedelta, count: int) -> timedelta | None:
    """About `count` periods back, at least a minute; `None` (read everything) past 30 days."""
    if period >= _WHOLE_AFTER / max(count, 1):
        return None
    return max(period * count, _SHORTEST)
